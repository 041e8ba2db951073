"""The agent's worker image: what runs inside an agent's own OS process.

The zygote that forks workers, the sandbox each one enters and the plan it enters by
(`_plan`: the place builds it, this image reads it), the blocking channel to its place,
the agent API as one table that every language adapter binds (`API`, in _api), and the
`Interpreter` interface an adapter implements. Standard library and msgpack only, no
asyncio (a test checks): this is the image every agent process starts from, and it must
start fast.
"""

from ._api import API as API
from ._api import CALLS as CALLS
from ._api import Call as Call
from ._api import Param as Param
from ._api import spell as spell
from ._interpreter import Build as Build
from ._interpreter import Interpreter as Interpreter

__all__ = ["API", "CALLS", "Build", "Call", "Interpreter", "Param", "spell"]
