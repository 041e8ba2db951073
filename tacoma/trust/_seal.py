"""Seals: a place's signature on what it alone may say, checked by the other places.

A lazy folder's reference names the place that holds its data (its origin), and an agent's
place connects there to read it. A reference is a few bytes any agent or client can write,
so an unchecked origin would make a place connect wherever it names: a port scanner from
inside the network the place sits in. So the place that holds the data *seals* the
reference: it signs what names the data (origin, id, size, layout, root hash) with its own
identity's key, and puts its certificate beside the signature. A place reading the folder
checks, before it connects anywhere, that the certificate is a place's of this cluster's
CA, current and not revoked, that it names the origin's host as one of its addresses (as a
TLS client checks a host name), and that the signature holds. A forged reference, or one
naming an address its sealer does not serve, is refused without a connection.

ECDSA P-256 over SHA-256, as the identities' keys are; `cryptography` does the work (the
standard library has no signatures). A seal is about 600 bytes; signing takes about 50 us
and is done when a place keeps or relays a folder, checking about 150 us once per seal
(kept, as checked, for as long as the place runs).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress

import msgpack
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ..wire._errors import TrustError
from ..wire._lazy import MAX_SEAL
from ._store import Bundle, serial_text
from ._tls import DenyList

__all__ = ["Issued", "Seals"]

#: Seals a place remembers as checked.
_CHECKED_MOST = 4096


class Issued:
    """Certificates whose CA signature this place checked, by their DER bytes: a place
    sees the same few certificates again and again (each place's on its seals and lines,
    each principal's on its passports), and checking the CA's signature on one costs an
    ECDSA verification, so it is done once per certificate. What can change (the time,
    the deny list) is checked on every use by the callers."""

    def __init__(self, ca: x509.Certificate) -> None:
        self._ca = ca
        self._ca_key = ca.public_key()
        self._known: dict[bytes, x509.Certificate] = {}

    def load(self, der: bytes) -> x509.Certificate:
        """The certificate `der`, if this cluster's CA signed it; TrustError ("is malformed",
        "is not of this cluster's CA": the caller says whose) otherwise."""
        known = self._known.get(der)
        if known is not None:
            return known
        try:
            certificate = x509.load_der_x509_certificate(der)
        except Exception:  # noqa: BLE001 - whatever is malformed, it is no certificate
            raise TrustError("is malformed") from None
        algorithm = certificate.signature_hash_algorithm
        if certificate.issuer != self._ca.subject or algorithm is None \
                or not isinstance(self._ca_key, ec.EllipticCurvePublicKey):
            raise TrustError("is not of this cluster's CA")
        try:
            self._ca_key.verify(certificate.signature, certificate.tbs_certificate_bytes,
                                ec.ECDSA(algorithm))
        except InvalidSignature:
            raise TrustError("is not of this cluster's CA") from None
        if len(self._known) >= _CHECKED_MOST:
            self._known.clear()
        self._known[der] = certificate
        return certificate


class Seals:
    """One place's seals: it signs with its identity, and checks other places'."""

    def __init__(self, bundle: Bundle, deny_list: DenyList) -> None:
        key = serialization.load_pem_private_key(bundle.key, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TrustError(f"identity {bundle.path} has no EC key: issue it again with "
                             "tacoma trust issue")
        self._key = key
        self._certificate = x509.load_pem_x509_certificate(bundle.certificate).public_bytes(
            serialization.Encoding.DER)
        self._ca = x509.load_pem_x509_certificate(bundle.ca)
        self.issued = Issued(self._ca)
        self._deny = deny_list
        #: Digests of seals checked, with the host each names, the serial it was made with
        #: and its sealer's name.
        self._checked: dict[bytes, tuple[str, str, str]] = {}

    def seal(self, message: bytes) -> bytes:
        """This place's seal on `message`."""
        signature = self._key.sign(message, ec.ECDSA(hashes.SHA256()))
        packed: bytes = msgpack.packb([self._certificate, signature], use_bin_type=True)
        return packed

    def check(self, seal: bytes, message: bytes, host: str) -> str:
        """The name of the place that sealed `message` (TrustError unless `seal` is a
        current place's of this cluster, serving `host`, on `message`)."""
        digest = hashlib.sha256(seal + b"\0" + message).digest()
        known = self._checked.get(digest)
        if known is not None and known[0] == host:
            if known[1] in self._deny.serials:
                raise TrustError("its sealing place's certificate is revoked")
            return known[2]
        if not seal:
            raise TrustError("it is not sealed by the place that holds the data")
        try:
            der, signature = msgpack.unpackb(seal, raw=False, max_bin_len=MAX_SEAL,
                                             max_array_len=2)
        except Exception:  # noqa: BLE001 - whatever is malformed, it is not a seal
            raise TrustError("its seal is malformed") from None
        if not isinstance(der, bytes):
            raise TrustError("its seal is malformed")
        try:
            certificate = self.issued.load(der)
        except TrustError as exc:
            raise TrustError(f"its sealing certificate {exc}") from None
        serial = self._check_certificate(certificate, host)
        public = certificate.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            raise TrustError("its sealing certificate has no EC key")
        try:
            public.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, TypeError):
            raise TrustError("its seal does not match what it seals (forged, or "
                             "changed on the way)") from None
        if len(self._checked) >= _CHECKED_MOST:
            self._checked.clear()
        names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        name = str(names[0].value) if names else ""
        self._checked[digest] = (host, serial, name)
        return name

    def _check_certificate(self, certificate: x509.Certificate, host: str) -> str:
        """The certificate's serial, if it (of this CA: Issued) is a current place's that
        serves `host`; TrustError otherwise."""
        now = datetime.datetime.now(datetime.UTC)
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            raise TrustError("its sealing certificate is not valid now")
        roles = {str(a.value) for a in
                 certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)}
        if "place" not in roles:
            raise TrustError("it is sealed by an identity that is not a place's")
        serial = serial_text(certificate.serial_number)
        if serial in self._deny.serials:
            raise TrustError("its sealing place's certificate is revoked")
        if not _serves(certificate, host):
            raise TrustError(f"its sealing place does not serve {host}")
        return serial


def _serves(certificate: x509.Certificate, host: str) -> bool:
    """Whether `certificate` names `host` among its addresses (IP, or DNS with one
    leading wildcard label), as a TLS client checks a server's name."""
    try:
        names = certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    host = host.strip("[]").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        return address in names.get_values_for_type(x509.IPAddress)
    for name in names.get_values_for_type(x509.DNSName):
        name = name.lower()
        if name == host or (name.startswith("*.") and host.endswith(name[1:])
                            and "." not in host[:-len(name) + 1]):
            return True
    return False
