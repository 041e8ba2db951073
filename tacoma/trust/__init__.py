"""Trust: the cluster's CA and identities, and mutual TLS on every connection.

    _store   where a user's trust lives (the CA, identity files, the deny list); no crypto
    _tls     TLS contexts, the peer's identity from its certificate, the deny list, and the
             place's wrapping of accepted connections (standard library `ssl`)
    _certs   making certificates (the `cryptography` package): `tacoma trust`, and a
             place making its user's local identities on first start
    _seal    a place's signature on what only it may say (a lazy folder's reference, its
             line on a trip), and its check of other places' (`cryptography`: places only)
    _passport  an agent's passport, signed by its principal's client and checked by every
             place it reaches, and the places' lines on its trip (msgpack to read them;
             `cryptography` only to sign and to check)

May import: wire. The client imports `_store`, `_tls` and `_passport` (its `Signer` when it
first signs), never `_certs` nor `_seal`.
"""

from ._store import IDENTITY_ENV as IDENTITY_ENV
from ._store import INSECURE_ENV as INSECURE_ENV
from ._store import LOCAL_PLACE as LOCAL_PLACE
from ._store import TRUST_ENV as TRUST_ENV
from ._store import Bundle as Bundle
from ._store import TrustStore as TrustStore
from ._store import default_trust_dir as default_trust_dir
from ._tls import Peer as Peer

__all__ = ["IDENTITY_ENV", "INSECURE_ENV", "LOCAL_PLACE", "TRUST_ENV", "Bundle", "Peer",
           "TrustStore", "default_trust_dir"]
