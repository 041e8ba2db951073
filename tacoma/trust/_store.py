"""Where a user's cluster trust lives on disk, and what an identity file holds.

    TRUST_DIR/              the user's config directory (tacoma/trust), mode 0700
        ca.pem              the cluster's CA certificate (public)
        ca.key              its private key (0600): whoever holds it can make identities
        identities/NAME.pem one identity each (0600): its private key, its certificate and
                            the CA's certificate, in one PEM file, so that the file alone is
                            all a host needs (copy it to the host that uses it)
        revoked             the deny list: one `SERIAL NAME` line per revoked certificate
        default             the name of the identity clients use unless told otherwise

Nothing here needs the `cryptography` package (making certificates does, in `_certs`):
clients read identity files and build TLS contexts with the standard library alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from ..wire._errors import TrustError

__all__ = ["IDENTITY_ENV", "INSECURE_ENV", "LOCAL_PLACE", "TRUST_ENV", "Bundle", "TrustStore",
           "check_name", "default_trust_dir", "insecure_from_env", "names_a_file", "parse_serials",
           "serial_text"]

#: Environment variables: the trust directory, the client identity (a name or a file) and
#: whether clients speak plaintext (for a closed test network only).
TRUST_ENV = "TACOMA_TRUST_DIR"
IDENTITY_ENV = "TACOMA_IDENTITY"
INSECURE_ENV = "TACOMA_INSECURE"

#: The place identity made for a user's own places on loopback (`ensure_local`).
LOCAL_PLACE = "local-place"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_PEM = re.compile(rb"-----BEGIN ([A-Z ]+)-----\r?\n.*?-----END \1-----\r?\n?", re.S)


def check_name(name: str) -> str:
    """`name` if it can name an identity (it becomes a certificate's common name, a file
    name and a principal in logs); else TrustError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TrustError(f"{name!r} cannot name an identity: use 1 to 64 letters, digits and "
                         "._@- (starting with a letter or digit)")
    return name


def serial_text(serial: str | int) -> str:
    """A certificate's serial number as tacoma writes it: upper-case hex, no leading zeros
    (OpenSSL pads it to whole bytes, `cryptography` does not)."""
    text = f"{serial:X}" if isinstance(serial, int) else serial.upper()
    return text.lstrip("0") or "0"


def parse_serials(text: str) -> dict[str, str]:
    """The `SERIAL NAME ...` lines of the deny list (`revoked`) or the record of issued
    certificates (`issued`): serial -> name; `#` lines and blank ones are skipped."""
    serials: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and not parts[0].startswith("#"):
            serials[serial_text(parts[0])] = parts[1] if len(parts) > 1 else "?"
    return serials


def default_trust_dir() -> Path:
    """$TACOMA_TRUST_DIR, else the user's config directory's tacoma/trust."""
    env = os.environ.get(TRUST_ENV)
    if env:
        return Path(env).expanduser().absolute()
    return Path(platformdirs.user_config_dir("tacoma", appauthor=False)) / "trust"


def insecure_from_env() -> bool:
    return os.environ.get(INSECURE_ENV, "").strip().lower() in ("1", "yes", "true", "on")


@dataclass(frozen=True)
class Bundle:
    """An identity file: its private key, its certificate and its CA's certificate (PEM)."""

    path: Path
    key: bytes
    certificate: bytes
    ca: bytes

    @classmethod
    def read(cls, path: Path) -> Bundle:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise TrustError(f"no identity file {path}") from None
        except OSError as exc:
            raise TrustError(f"cannot read identity file {path}: {exc.strerror or exc}") \
                from None
        blocks = [(m.group(1), m.group(0)) for m in _PEM.finditer(data)]
        keys = [b for kind, b in blocks if kind.endswith(b"PRIVATE KEY")]
        certs = [b for kind, b in blocks if kind == b"CERTIFICATE"]
        if len(keys) != 1 or len(certs) < 2:
            raise TrustError(f"{path} is not a tacoma identity file (one private key, its "
                             "certificate, its CA's certificate); make one with tacoma trust "
                             "issue")
        return cls(path, keys[0], certs[0], certs[-1])


def names_a_file(spec: str) -> bool:
    """Whether an identity `spec` (--identity, $TACOMA_IDENTITY) is a file's path, not an
    identity's name in the trust directory."""
    return os.sep in spec or spec.endswith(".pem")


class TrustStore:
    """One trust directory: the CA, the identities it issued, the deny list."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root).expanduser().absolute() if root else default_trust_dir()

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def identities(self) -> Path:
        return self.root / "identities"

    @property
    def revoked(self) -> Path:
        return self.root / "revoked"

    @property
    def default_file(self) -> Path:
        return self.root / "default"

    def exists(self) -> bool:
        return self.ca_cert.exists() and self.ca_key.exists()

    def identity_file(self, name: str) -> Path:
        return self.identities / f"{check_name(name)}.pem"

    def default_identity(self) -> str | None:
        """The name of the identity clients use unless told otherwise, if there is one."""
        try:
            name = self.default_file.read_text().strip()
        except OSError:
            return None
        return name or None

    def find(self, spec: str) -> Path:
        """The identity file `spec` names: a path to one, or an identity's name here."""
        if names_a_file(spec):
            path = Path(spec).expanduser()
            if not path.exists():
                raise TrustError(f"no identity file {path}")
            return path
        path = self.identity_file(spec)
        if not path.exists():
            hint = ("tacoma trust init makes a CA first" if not self.exists()
                    else f"tacoma trust issue {spec} makes it")
            raise TrustError(f"no identity {spec!r} in {self.root} ({hint})")
        return path

    def names(self) -> list[str]:
        if not self.identities.is_dir():
            return []
        return sorted(p.stem for p in self.identities.glob("*.pem"))
