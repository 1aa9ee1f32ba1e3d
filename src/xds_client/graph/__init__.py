"""The config graph: a listener's whole configuration, route and filter-chain selection.

``client.watch_config(listener)`` follows LDS -> RDS -> CDS -> EDS and yields a
:class:`ConfigSnapshot` whenever the whole graph is complete; ``snapshot.route()``
and ``snapshot.filter_chain()`` answer where a request or a connection goes, as
Envoy would. See docs/graph.md.
"""

from ._async_watch import AsyncConfigWatch
from ._filter_chains import (
    Connection,
    FilterChainChoice,
    check_filter_chains,
    normalize_cidr,
    select_filter_chain,
    select_filter_chain_v2,
    validate_filter_chains,
)
from ._routing import (
    GENERATED_REQUEST_ID,
    RouteChoice,
    TlsFacts,
    WeightedTarget,
    check_routes,
    select_route,
    select_virtual_host,
    validate_routes,
)
from ._snapshot import (
    ConfigSnapshot,
    HttpManager,
    Node,
    ResourceKey,
    ResourceStatus,
    snapshot_to_svg,
    snapshot_to_text,
    snapshot_tree,
)
from ._tracker import MAX_AGGREGATE_DEPTH, ConfigTracker, TrackerUpdate
from ._watch import ConfigWatch

__all__ = [
    "GENERATED_REQUEST_ID",
    "MAX_AGGREGATE_DEPTH",
    "AsyncConfigWatch",
    "ConfigSnapshot",
    "ConfigTracker",
    "ConfigWatch",
    "Connection",
    "FilterChainChoice",
    "HttpManager",
    "Node",
    "ResourceKey",
    "ResourceStatus",
    "RouteChoice",
    "TlsFacts",
    "TrackerUpdate",
    "WeightedTarget",
    "check_filter_chains",
    "check_routes",
    "normalize_cidr",
    "select_filter_chain",
    "select_filter_chain_v2",
    "select_route",
    "select_virtual_host",
    "snapshot_to_svg",
    "snapshot_to_text",
    "snapshot_tree",
    "validate_filter_chains",
    "validate_routes",
]
