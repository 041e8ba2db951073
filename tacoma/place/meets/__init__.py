"""The meets a place holds, as data: what each is, where it goes, what state it is in.

A meet's record and the book of all of them (`_meet`: RunningMeet, Meets, admission
against --max-meets), the router's tables (`_route`: a meet's route kinds, the one table
of (route, mode), the meet's states and their allowed transitions), trips as data
(`_trips`), who may meet what (`_access`), whom a meet is for when a place names a
principal not its own (`_passports`: agents' passports and the places' signed lines), and
resident agents' mailboxes (`_residents`). May import `stores`, `workers`, `_settings`
and `wire`; never `promises` or `taking`, which act on these records.
"""
