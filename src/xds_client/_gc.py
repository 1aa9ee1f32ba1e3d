"""The cyclic garbage collector held off while one large response is applied, and
while the client's modules are imported.

Applying a SotW push of 100,000 clusters allocates several objects per resource
(the decoded message, its cache entry, its event) that all outlive the apply.
Each allocation counts towards the collector's next young-generation pass, and
each pass walks the objects allocated since the last one and promotes them, so
a large apply pays for many passes over objects that are never garbage (about
0.4 s of a 3 s push of 100,000 clusters, most of it full collections). Held off,
and the objects then moved to the oldest generation without a pass (see
``__exit__``), the apply pays nothing and the next full collection sees them, as
it would after they survived two passes anyway. The cost: young garbage cycles
of other threads made during the apply also wait for that full collection.

Only responses of at least :data:`LARGE_RESPONSE` resources take this path, so
the usual small updates never touch the collector. The lazy names of ``xds_client``
(``from xds_client import XdsClient, AsyncXdsClient, Node``) load their modules
the same way: importing them makes tens of thousands of objects (functions,
classes, their dicts and tuples) that live as long as the process, and the
passes the collector made over them were about 3% of the cold import. It is restored when the last
apply in the process ends, also on an exception, and a collector that the
application itself disabled stays disabled.
"""

from __future__ import annotations

import gc
import threading
from types import TracebackType

__all__ = ["LARGE_RESPONSE", "collector_paused"]

LARGE_RESPONSE = 1000
"""Responses with at least this many resources are applied with the collector held off."""

_lock = threading.Lock()
_holders = 0
_we_disabled = False


class collector_paused:  # noqa: N801 - used like a function: ``with collector_paused():``
    """Hold the collector off for the ``with`` body (reentrant, shared across threads)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _holders, _we_disabled  # noqa: PLW0603 - one collector per process
        with _lock:
            if _holders == 0 and gc.isenabled():
                gc.disable()
                _we_disabled = True
            _holders += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _holders, _we_disabled  # noqa: PLW0603 - one collector per process
        with _lock:
            _holders -= 1
            if _holders == 0 and _we_disabled:
                _we_disabled = False
                if gc.get_freeze_count() == 0:
                    # Freezing and unfreezing moves every tracked object to the oldest
                    # generation without a pass over them (two list splices) and zeroes
                    # the young count, so re-enabling does not start with a pass over all
                    # that the apply allocated. Skipped when the application froze objects
                    # itself: unfreezing would undo that.
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()
