"""The public clients: :class:`XdsClient` (threads) and :class:`AsyncXdsClient` (asyncio).

Both are thin drivers of one shared session (``_session``): every decision
(subscriptions, reconnection, fallback, caching, CSDS, metrics) is made there
once, so the two cannot drift.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._authorities import Authority
from ._options import Backoff, ClientArgs, ClientOptions
from ._sync import Watch, XdsClient
from ._watchers import ConnectivityChanged, WatchEvent

if TYPE_CHECKING:
    from ._async import AsyncWatch, AsyncXdsClient
    from ._bootstrap import Bootstrap, load_bootstrap, parse_bootstrap
    from ._csds import redact
    from ._metrics import (
        AuthorityMetrics,
        CountingMetrics,
        Metrics,
        ResourceUpdateMetrics,
        ResponseMetrics,
        ServerSwitchMetrics,
        StreamMetrics,
    )
    from ._persist import ResourceRestored
    from ._protojson import to_dict, to_json

__all__ = [
    "XdsClient",
    "AsyncXdsClient",
    "Watch",
    "AsyncWatch",
    "WatchEvent",
    "ConnectivityChanged",
    "Backoff",
    "ClientArgs",
    "ClientOptions",
    "Metrics",
    "CountingMetrics",
    "AuthorityMetrics",
    "ResponseMetrics",
    "ServerSwitchMetrics",
    "ResourceUpdateMetrics",
    "StreamMetrics",
    "Bootstrap",
    "load_bootstrap",
    "parse_bootstrap",
    "redact",
    "Authority",
    "ResourceRestored",
    "to_dict",
    "to_json",
]

_METRICS = (
    "Metrics",
    "CountingMetrics",
    "AuthorityMetrics",
    "ResponseMetrics",
    "ServerSwitchMetrics",
    "ResourceUpdateMetrics",
    "StreamMetrics",
)


def __getattr__(name: str) -> Any:
    # The CSDS protos (about 7 ms of imports) load only when a dump, a redaction or a
    # JSON view is needed.
    # The asyncio driver loads with the first use of AsyncXdsClient, so a threaded
    # program does not import it.
    value: Any
    if name in ("AsyncXdsClient", "AsyncWatch"):
        from . import _async

        value = getattr(_async, name)
    elif name in ("Bootstrap", "load_bootstrap", "parse_bootstrap"):
        # The bootstrap parser loads with its first use (from_bootstrap, load_bootstrap).
        from . import _bootstrap

        value = getattr(_bootstrap, name)
    elif name == "ResourceRestored":  # with the cache directory's code (cache_dir)
        from . import _persist

        value = _persist.ResourceRestored
    elif name in _METRICS:
        from . import _metrics

        value = getattr(_metrics, name)
    elif name == "redact":
        from ._csds import redact as value
    elif name in ("to_dict", "to_json"):
        from . import _protojson

        value = getattr(_protojson, name)
    else:
        raise AttributeError(f"module 'xds_client.client' has no attribute {name!r}")
    globals()[name] = value
    return value
