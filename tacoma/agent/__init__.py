"""The agent's worker image: what runs inside an agent's own OS process.

The zygote that forks workers, the sandbox each one enters, the blocking channel to its
place and the agent API every language adapter binds, and the `Interpreter` interface an
adapter implements. Standard library and msgpack only, no asyncio (a test checks): this is
the image every agent process starts from, and it must start fast.
"""

from ._interpreter import Build as Build
from ._interpreter import Interpreter as Interpreter

__all__ = ["Build", "Interpreter"]
