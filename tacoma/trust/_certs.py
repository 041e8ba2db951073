"""Making the cluster's certificates, with the `cryptography` package (no openssl process).

A cluster has one CA (an EC P-256 key, ten years). Every identity it issues is a key and a
certificate whose common name is the identity's name and whose organizational units are its
roles: `place` (it may serve meets, and speak for the principals whose agents it forwards or
moves), `client` (it may meet) and `admin` (it may use ps and kill). A place's certificate
names the addresses it serves as IP or DNS subject alternative names, which clients check as
any TLS client checks a host name, and may be used for both ends of a connection (a place
meets other places); a client's may be used only to connect.

Only `tacoma trust` and a place making its user's local identities import this module.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import getpass
import ipaddress
import os
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..wire._errors import TrustError
from ._store import LOCAL_PLACE, Bundle, TrustStore, check_name, parse_serials, serial_text

__all__ = ["ROLES", "IdentityInfo", "describe", "ensure_local", "init", "issue",
           "local_client_name", "read_certificate", "revoke"]

ROLES = ("place", "client", "admin")
CA_DAYS = 3650
IDENTITY_DAYS = 365
#: The addresses a place on loopback serves.
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class IdentityInfo:
    """What `tacoma trust show` says of one certificate."""

    name: str
    roles: tuple[str, ...]
    addresses: tuple[str, ...]
    serial: str
    not_after: datetime.datetime
    path: Path | None = None
    revoked: bool = False

    @property
    def expired(self) -> bool:
        return self.not_after <= datetime.datetime.now(datetime.UTC)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` readable by its owner only, replacing it atomically."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def _make_dir(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    root.chmod(0o700)
    (root / "identities").mkdir(exist_ok=True, mode=0o700)


@contextlib.contextmanager
def _locked(store: TrustStore) -> Iterator[None]:
    """Hold the trust directory's lock: two first places of a user starting at once must
    not make two CAs."""
    _make_dir(store.root)
    fd = os.open(store.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _load_ca(store: TrustStore) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    if not store.exists():
        raise TrustError(f"no CA in {store.root}: tacoma trust init makes one")
    try:
        cert = x509.load_pem_x509_certificate(store.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(store.ca_key.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise TrustError(f"cannot read the CA in {store.root}: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TrustError(f"the CA key in {store.root} is not an EC key tacoma made")
    return cert, key


def init(store: TrustStore) -> bool:
    """Make the CA if there is none; True if it was made now."""
    with _locked(store):
        return _init(store)


def _init(store: TrustStore) -> bool:
    if store.exists():
        return False
    key = _key()
    user = getpass.getuser()
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tacoma"),
        # A random part: two CAs of one user on one host are told apart by name too, so a
        # peer of the other cluster hears "unknown issuer", not a signature failure.
        x509.NameAttribute(NameOID.COMMON_NAME,
                           f"tacoma CA {secrets.token_hex(3)} of {user}@"
                           f"{os.uname().nodename}"[:64]),
    ])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(minutes=5))
            .not_valid_after(_now() + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write_private(store.ca_key, _key_pem(key))
    store.ca_cert.write_bytes(_cert_pem(cert))
    return True


def _san(address: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(address.strip("[]")))
    except ValueError:
        return x509.DNSName(address)


def issue(store: TrustStore, name: str, roles: Iterable[str],
          addresses: Iterable[str] = (), days: int = IDENTITY_DAYS,
          out: Path | None = None) -> Path:
    """Issue identity `name` with `roles`; a place's names the `addresses` it serves.

    Written to the store's identities (replacing an identity of that name: its old
    certificate stays valid until it expires or is revoked) and, if given, to `out`.
    """
    with _locked(store):
        return _issue(store, name, roles, addresses, days, out)


def _issue(store: TrustStore, name: str, roles: Iterable[str], addresses: Iterable[str],
           days: int, out: Path | None = None) -> Path:
    check_name(name)
    roles = tuple(dict.fromkeys(roles))
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise TrustError(f"roles must be some of {', '.join(ROLES)}, got {roles!r}")
    if not 1 <= days <= CA_DAYS:
        raise TrustError(f"an identity lasts 1 to {CA_DAYS} days, not {days}")
    addresses = tuple(addresses)
    if name == LOCAL_PLACE and roles != ("place",):
        raise TrustError(f"{LOCAL_PLACE} is the place identity of this user's local places; "
                         "issue another name")
    if addresses and "place" not in roles:
        raise TrustError("only a place's identity names addresses (--place)")
    ca_cert, ca_key = _load_ca(store)
    key = _key()
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tacoma"),
        *(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role) for role in roles),
        x509.NameAttribute(NameOID.COMMON_NAME, name),
    ])
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if "place" in roles:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    not_after = min(_now() + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(_now() - datetime.timedelta(minutes=5))
               .not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                              critical=True)
               .add_extension(x509.KeyUsage(
                   digital_signature=True, key_cert_sign=False, crl_sign=False,
                   content_commitment=False, key_encipherment=False,
                   data_encipherment=False, key_agreement=True, encipher_only=False,
                   decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if "place" in roles:
        sans = [_san(a) for a in (addresses or (name,))]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    bundle = _key_pem(key) + _cert_pem(cert) + _cert_pem(ca_cert)
    path = store.identity_file(name)
    try:
        if out is not None:  # first: a bad --out leaves nothing half made
            _write_private(out, bundle)
        _write_private(path, bundle)
        # Every certificate issued, so that revoking a name revokes its earlier ones too.
        with open(store.root / "issued", "a") as record:
            record.write(f"{serial_text(cert.serial_number)} {name} {','.join(roles)} "
                         f"{not_after:%Y-%m-%dT%H:%M:%SZ}\n")
    except OSError as exc:
        raise TrustError(f"cannot write identity {name}: {exc.strerror or exc} "
                         f"({exc.filename or path})") from None
    return path


def local_client_name() -> str:
    """The name of the client identity made for this user on this host."""
    user = "".join(c if c.isalnum() or c in "._-" else "-" for c in getpass.getuser())
    return check_name(user.lstrip("._-")[:64] or "user")


def ensure_local(store: TrustStore) -> bool:
    """Make what one user's places and clients on this host need and do not have yet: the
    CA, the place identity for loopback (LOCAL_PLACE) and the user's own client identity
    (admin, and the default). True if anything was made."""
    with _locked(store):
        made = _init(store)
        if not store.identity_file(LOCAL_PLACE).exists():
            _issue(store, LOCAL_PLACE, ("place",), LOOPBACK, CA_DAYS)
            made = True
        user = local_client_name()
        if not store.identity_file(user).exists():
            _issue(store, user, ("client", "admin"), (), CA_DAYS)
            made = True
        if store.default_identity() is None:
            store.default_file.write_text(user + "\n")
            made = True
        return made


def read_certificate(pem: bytes, path: Path | None = None,
                     revoked: frozenset[str] = frozenset()) -> IdentityInfo:
    cert = x509.load_pem_x509_certificate(pem)
    subject = cert.subject
    name = str(subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
    roles = tuple(str(a.value) for a in
                  subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME))
    addresses: tuple[str, ...] = ()
    with contextlib.suppress(x509.ExtensionNotFound):
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        addresses = tuple(str(v) for v in (*sans.get_values_for_type(x509.IPAddress),
                                           *sans.get_values_for_type(x509.DNSName)))
    serial = serial_text(cert.serial_number)
    return IdentityInfo(name, roles, addresses, serial, cert.not_valid_after_utc, path,
                        serial in revoked)


def _serials(path: Path) -> dict[str, str]:
    """The serials a `revoked` or `issued` file names (none if there is no such file)."""
    try:
        return parse_serials(path.read_text(errors="replace"))
    except OSError:
        return {}


def describe(store: TrustStore) -> tuple[IdentityInfo | None, list[IdentityInfo]]:
    """The CA and every identity in the store (for tacoma trust show)."""
    if not store.exists():
        return None, []
    ca = read_certificate(store.ca_cert.read_bytes(), store.ca_cert)
    revoked = frozenset(_serials(store.revoked))
    identities = []
    for name in store.names():
        path = store.identity_file(name)
        identities.append(read_certificate(Bundle.read(path).certificate, path, revoked))
    return ca, identities


def revoke(store: TrustStore, name: str) -> IdentityInfo:
    """Put every certificate ever issued as `name` on the deny list (places reread it):
    its current one, and any it had before being issued again."""
    path = store.find(check_name(name))
    info = read_certificate(Bundle.read(path).certificate, path)
    # The current one, and those the record names (kept since its first issue).
    serials = {info.serial} | {s for s, who in _serials(store.root / "issued").items()
                               if who == name}
    try:
        with _locked(store):
            already = _serials(store.revoked).keys()
            with open(store.revoked, "a") as out:
                for serial in sorted(serials - already):
                    out.write(f"{serial} {name} revoked {_now():%Y-%m-%dT%H:%M:%SZ}\n")
    except OSError as exc:
        raise TrustError(f"cannot write the deny list {store.revoked}: "
                         f"{exc.strerror or exc}") from None
    return info
