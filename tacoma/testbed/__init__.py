"""A testbed of separate hosts on one machine, for trying places as a LAN would hold them.

    _netns   `Testbed`: N network namespaces (h1, h2, ...) on a bridge that the caller
             reaches too, with faults (`cut`, `lossy`); root, ip and nsenter (nft for loss)

    with Testbed(4) as bed:
        place = subprocess.Popen([*bed.prefix("h1"), "tacoma", "place", "--listen",
                                  f"{bed.address('h1')}:7707", "--insecure"])
        ...
        bed.cut("h1")          # its cable pulled
        bed.lossy("h2", 30)    # 30% of its packets dropped, each way

`tacoma testbed up|down|status` is the same testbed from the command line, left up between
commands. Standard library only: it runs ip, nft and nsenter, and imports nothing of the
place or the client.
"""

from ._netns import Testbed as Testbed
from ._netns import TestbedError as TestbedError

__all__ = ["Testbed", "TestbedError"]
