"""Running agents: the worker processes and everything that confines them.

What a name finds (`_agents`: a built-in, a trusted agent, a pooled one), pools of
pre-started workers (`_pool`) forked by each language's zygote (`_zygotes`), workers kept
warm for later meets of one principal's program (`_warm`), the sandbox
plan each worker is started with (an `agent._plan.SandboxPlan`, built by `_containment`),
and what the plan is made of: containment (`_containment`: uids, cgroups, the confined
runner), `_cgroups`, `_uids`, `_seccomp`, the read-only layers (`_layers`), compiled builds
(`_builds`), trusted agents run in the place's own process (`_trusted`), and workers that
are threads of the place, for languages whose meets are fresh instances of their runtime
on a place run with --instances-in-place (`_threads`). May import
`stores`, `_settings`, `wire`, `agent` and `transport`; never `meets`, `promises` or
`taking` (a worker knows its meet only through the narrow `HandedMeet`).
"""
