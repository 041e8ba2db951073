"""`tacoma trust`: the cluster's CA and identities (see tacoma.trust).

    init      make the CA, the local place identity and the user's own client identity
    issue     an identity for a place (--place, naming its --address) or a client (--admin)
    show      the CA, the identities issued, their roles, addresses and expiry
    revoke    put an identity's certificate on the deny list, which running places reread
"""

from __future__ import annotations

import datetime
from pathlib import Path

import click

from ..trust._store import (
    IDENTITY_ENV,
    INSECURE_ENV,
    LOCAL_PLACE,
    TRUST_ENV,
    Bundle,
    TrustStore,
)
from ..wire._errors import TrustError
from ._common import CommandFunction, fail

__all__ = ["identity_options", "trust"]


def _store(trust_dir: Path | None) -> TrustStore:
    return TrustStore(trust_dir)


_trust_dir_option = click.option(
    "--trust-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help=f"The trust directory. [default: ${TRUST_ENV}, or the user's config directory]")


@click.group()
def trust() -> None:
    """The cluster's CA and identities: who may meet whom.

    Every connection to a place is mutual TLS: the place and the client each show a
    certificate signed by the cluster's CA. One user on one machine needs nothing: the
    first `tacoma place` makes the CA and the identities it needs. For a cluster of hosts,
    issue each place an identity naming its address, copy the identity file to its host
    (`tacoma place --identity FILE`), and give each user a client identity.
    """


@trust.command()
@_trust_dir_option
def init(trust_dir: Path | None) -> None:
    """Make a CA, with the local place identity and your own client identity (admin)."""
    from ..trust import _certs

    store = _store(trust_dir)
    try:
        made = _certs.init(store)
        _certs.ensure_local(store)
    except TrustError as exc:
        fail(exc)
    if made:
        click.echo(f"made a CA in {store.root}")
    else:
        click.echo(f"a CA is already in {store.root}; kept it")
    click.echo(f"identities: {', '.join(store.names())} (default for clients: "
               f"{store.default_identity()})")


@trust.command()
@click.argument("name")
@click.option("--place", "is_place", is_flag=True,
              help="A place's identity: it serves meets, and carries the passports of the "
                   "agents it forwards and moves (it signs its own hand-overs).")
@click.option("--address", "addresses", multiple=True, metavar="HOST",
              help="An address the place serves (IP or DNS name), checked by its clients "
                   "as a host name. Repeatable. [default: NAME]")
@click.option("--admin", is_flag=True, help="May use tacoma ps and tacoma kill.")
@click.option("--days", type=click.IntRange(1, 3650), default=365, show_default=True,
              help="How long the certificate is valid.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the identity file here (to copy to the host that uses it).")
@_trust_dir_option
def issue(name: str, is_place: bool, addresses: tuple[str, ...], admin: bool, days: int,
          out: Path | None, trust_dir: Path | None) -> None:
    """Issue identity NAME: a certificate and key signed by the CA, in one file (0600).

    A client identity by default; --place for a place's. Issuing a name again replaces its
    file; the old certificate stays valid until it expires or is revoked.
    """
    from ..trust import _certs

    roles = ["place"] if is_place else ["client"]
    if admin:
        roles.append("admin")
    if addresses and not is_place:
        raise click.UsageError("--address names where a place serves: give --place too")
    store = _store(trust_dir)
    try:
        path = _certs.issue(store, name, roles, addresses, days, out)
        info = _certs.read_certificate(Bundle.read(path).certificate)
    except TrustError as exc:
        fail(exc)
    where = f" for {', '.join(info.addresses)}" if info.addresses else ""
    click.echo(f"issued {name} ({', '.join(info.roles)}){where}, valid until "
               f"{info.not_after:%Y-%m-%d}: {path}" + (f" and {out}" if out else ""))
    if is_place:
        click.echo(f"  start it with: tacoma place --listen HOST:PORT --identity "
                   f"{out or name}")
    else:
        click.echo(f"  meet with it: tacoma meet ... --identity {out or name} "
                   f"(or ${IDENTITY_ENV}={out or name})")


@trust.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead.")
@_trust_dir_option
def show(as_json: bool, trust_dir: Path | None) -> None:
    """The CA and every identity it issued: roles, addresses, serial, expiry, revoked."""
    import json

    from ..trust import _certs

    store = _store(trust_dir)
    try:
        ca, identities = _certs.describe(store)
    except TrustError as exc:
        fail(exc)
    except (OSError, ValueError) as exc:  # an unreadable or damaged file in the directory
        fail(TrustError(f"cannot read the trust directory {store.root}: {exc}"))
    if ca is None:
        if as_json:
            click.echo(json.dumps({"trust_dir": str(store.root), "ca": None,
                                   "identities": []}))
            return
        click.echo(f"no CA in {store.root}: tacoma trust init makes one (the first "
                   "tacoma place does too)")
        return
    default = store.default_identity()
    if as_json:
        def row(i: _certs.IdentityInfo) -> dict[str, object]:
            return {"name": i.name, "roles": list(i.roles), "addresses": list(i.addresses),
                    "serial": i.serial, "not_after": i.not_after.isoformat(),
                    "expired": i.expired, "revoked": i.revoked,
                    "path": str(i.path) if i.path else None}
        click.echo(json.dumps({"trust_dir": str(store.root), "ca": row(ca),
                               "default": default, "identities": [row(i) for i in identities]}))
        return
    from ..display import table

    today = datetime.datetime.now(datetime.UTC)
    click.echo(f"CA {ca.name}, until {ca.not_after:%Y-%m-%d}, in {store.root}\n")
    rows = []
    for i in identities:
        state = ("REVOKED" if i.revoked else "EXPIRED" if i.expired
                 else f"{(i.not_after - today).days} days left")
        notes = [*(["default"] if i.name == default else []),
                 *(["local places"] if i.name == LOCAL_PLACE else [])]
        rows.append((i.name, ", ".join(i.roles), f"{i.not_after:%Y-%m-%d}", state,
                     ", ".join(i.addresses) or "-", ", ".join(notes)))
    table(("NAME", "ROLES", "UNTIL", "STATE", "ADDRESSES", "NOTE"), rows)


@trust.command()
@click.argument("name")
@_trust_dir_option
def revoke(name: str, trust_dir: Path | None) -> None:
    """Put identity NAME's certificate on the deny list.

    Places using this trust directory's deny list (the default; elsewhere copy the
    `revoked` file to --deny-list) reread it within seconds: they refuse NAME's new
    connections and close its open ones.
    """
    from ..trust import _certs

    store = _store(trust_dir)
    try:
        info = _certs.revoke(store, name)
    except TrustError as exc:
        fail(exc)
    click.echo(f"revoked {info.name} (certificate {info.serial}) in {store.revoked}")


#: Where identity_options keeps what the command line said (ctx.meta), option by option.
_CHOSEN = "tacoma.identity"


def chosen_identity() -> str | None:
    """The identity this command was told to meet as (--identity, $TACOMA_IDENTITY), if
    any: None for the default one."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_CHOSEN, {}).get("identity") if ctx is not None else None


def identity_options(f: CommandFunction) -> CommandFunction:
    """--identity and --insecure for the commands that meet places."""

    def use(ctx: click.Context, param: click.Parameter, value: object) -> object:
        import tacoma

        chosen = ctx.meta.setdefault(_CHOSEN, {})
        chosen[param.name] = value
        if len(chosen) == 2:  # both options seen: decide once
            identity, insecure = chosen["identity"], chosen["insecure"]
            if identity and insecure:
                raise click.UsageError("--identity and --insecure: give one or the other")
            if identity or insecure:
                tacoma.use_identity(identity, insecure=bool(insecure))
        return value

    f = click.option("--insecure", is_flag=True, envvar=INSECURE_ENV, expose_value=False,
                     callback=use,
                     help="Meet in plaintext, without TLS (a place started with --insecure, "
                          "on a closed test network only).")(f)
    return click.option("--identity", metavar="NAME|FILE", envvar=IDENTITY_ENV,
                        expose_value=False, callback=use,
                        help="The identity to meet places as: a name in the trust directory "
                             "or an identity file. [default: the trust directory's default]"
                        )(f)
