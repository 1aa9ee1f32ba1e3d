"""The config graph: a listener's whole configuration, route and filter-chain selection."""

from ._filter_chains import (
    Connection,
    FilterChainChoice,
    check_filter_chains,
    normalize_cidr,
    select_filter_chain,
    select_filter_chain_v2,
)
from ._routing import RouteChoice, WeightedTarget, select_route, select_virtual_host

__all__ = [
    "Connection",
    "FilterChainChoice",
    "RouteChoice",
    "WeightedTarget",
    "check_filter_chains",
    "normalize_cidr",
    "select_filter_chain",
    "select_filter_chain_v2",
    "select_route",
    "select_virtual_host",
]
