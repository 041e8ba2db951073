"""Language adapters, one folder each; installed as tacoma.interpreters.

Each adapter exposes an `interpreter` (a tacoma.Interpreter) named in setup.cfg's
`tacoma.interpreters` entry points. The kernel imports none of them by name.
"""
