"""The place's stores: what it keeps on disk and in memory for its principals.

The state directory and how it is laid out (`_statedir`), cabinets (`_cabinets`: folders
kept per owner), lazy folders held here for other places to fetch (`_lazy`), and programs
named by hash (`_codes`). May import `wire` and the place's `_settings`; no other part of
the place (every other part may import it).
"""
