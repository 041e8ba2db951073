"""Taking a meet: a client's connection, the one router, and the place's own agents.

A `Session` (`_sessions`) is one client connection's I/O: it reads meets and cancels and
sends replies, and hands every meet to the `Router` (`_router`), which resolves it once
into a route and runs it through the one table in `meets._route`, whoever made it (a
client, or an agent here). An agent run in a worker is run by `_pooled`, which does that
and nothing else; the place's own agents (ag_status, ag_cabinet, ...) are `_builtins`.
May import every other part of the place.
"""
