"""Load reporting (LRS, ``envoy.service.load_stats.v3``): tell the control plane how
much traffic each cluster and locality carried, as Envoy and gRPC do.

- :class:`LoadStore`: where the application records requests started, finished (with
  or without an error), dropped, and named load metrics; any thread may record.
- :class:`LrsClient` (threads) and :class:`AsyncLrsClient` (asyncio): stream the node,
  take the server's plan (clusters or all of them, and the interval) and send a
  report every interval, reconnecting with backoff.
- :class:`LoadReporter`: the sans-I/O core both clients drive (``now`` in, requests out).

The in-process :class:`~xds_client.testing.ControlPlane` serves LRS and records the
reports it receives (``set_load_reporting``, ``load_reports``, ``wait_for_load_report``).
"""

from __future__ import annotations

from ._async_client import AsyncLrsClient
from ._client import LrsClient
from ._load import ClusterCounts, ClusterLoad, LoadStore, LocalityCounts, LocalityLoad
from ._reporter import SEND_ALL_CLUSTERS, LoadReporter, ReportPlan

__all__ = [
    "LrsClient",
    "AsyncLrsClient",
    "LoadStore",
    "ClusterLoad",
    "LocalityLoad",
    "ClusterCounts",
    "LocalityCounts",
    "LoadReporter",
    "ReportPlan",
    "SEND_ALL_CLUSTERS",
]
