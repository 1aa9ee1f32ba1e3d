"""The public clients: :class:`XdsClient` (threads) and :class:`AsyncXdsClient` (asyncio).

Both are thin drivers of one shared session (``_session``): every decision
(subscriptions, reconnection, fallback, caching, CSDS, metrics) is made there
once, so the two cannot drift.
"""

from __future__ import annotations

from ._async import AsyncWatch, AsyncXdsClient
from ._bootstrap import Bootstrap, load_bootstrap, parse_bootstrap
from ._csds import redact
from ._metrics import CountingMetrics, Metrics
from ._options import Backoff
from ._protojson import to_dict, to_json
from ._sync import Watch, XdsClient
from ._watchers import ConnectivityChanged, WatchEvent

__all__ = [
    "XdsClient",
    "AsyncXdsClient",
    "Watch",
    "AsyncWatch",
    "WatchEvent",
    "ConnectivityChanged",
    "Backoff",
    "Metrics",
    "CountingMetrics",
    "Bootstrap",
    "load_bootstrap",
    "parse_bootstrap",
    "redact",
    "to_dict",
    "to_json",
]
