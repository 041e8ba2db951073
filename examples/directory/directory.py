"""A directory of services, kept in the place's memory: a trusted agent.

    tacoma install examples/directory/directory.py --trusted

Installed with --trusted, it runs in the place's own process: the place runs this module
once and calls `meet` for each meet with `directory`, so `ENTRIES` lasts between meets and
a lookup costs no process. It has the place's whole power and nothing stops it: it does
little, quickly, and never blocks.

    OP=register NAME=... WHERE=...   note where a service is (yours to change only)
    OP=lookup NAME=...               WHERE: where it is (MeetError if nobody registered it)
    OP=list                          NAME: every name registered, sorted
"""

#: name -> (where, who registered it)
ENTRIES: dict[str, tuple[bytes, str]] = {}


def meet(bc, principal):
    op = bc.text("OP")[0] if "OP" in bc else "list"
    if op == "register":
        name = bc.text("NAME")[0]
        owner = ENTRIES.get(name, (b"", principal))[1]
        if owner != principal:
            raise NotAllowed(f"{name} was registered by {owner or 'anonymous'}, not you")
        ENTRIES[name] = (bc["WHERE"][0], principal)
        return Briefcase(OK=[name])
    if op == "lookup":
        name = bc.text("NAME")[0]
        if name not in ENTRIES:
            raise MeetError(f"no service {name!r} in the directory at {place}")
        return Briefcase(NAME=[name], WHERE=[ENTRIES[name][0]])
    if op == "list":
        return Briefcase(NAME=sorted(ENTRIES))
    raise MeetError(f"OP must be register, lookup or list, not {op!r}")
