"""Keeping the place's promises across failures: what outlives a crash or a lost link.

The journal (`_journal`: async meets and trips survive a restart of the place), async
meets kept, queued and run again after a restart, and the outcomes callers ask for by id
(`_async`), the place's side of trips (`_hops`: hand-overs, hops run here, rear guards,
recovery), and connections to the places agents name (`_reach`). May import `meets`, `workers`,
`stores`, `_settings`, `wire` and `client`; never `taking` (the router hands them what
they run, as callables).
"""
