"""XdsClient and AsyncXdsClient with ``lazy_decode=True``: the cache keeps bytes only."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client import ResourceUpdated
from xds_client.testing import ControlPlane

from .conftest import ClientProxy

MakeClient = Callable[..., ClientProxy]


def _cluster(name: str, seconds: int) -> Cluster:
    c = Cluster(name=name)
    c.connect_timeout.seconds = seconds
    return c


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_lazy_decode_client(cp: ControlPlane, make_client: MakeClient, protocol: str) -> None:
    cp.set_resources(Cluster, {"a": _cluster("a", 1), "b": _cluster("b", 2)}, version="1")
    client = make_client(cp.address, protocol=protocol, lazy_decode=True)
    with client.watch(Cluster, None) as watch:
        got = {}
        for _ in range(2):
            event = watch.next(ResourceUpdated)
            got[event.name] = event.resource
        assert got == {"a": _cluster("a", 1), "b": _cluster("b", 2)}
        cp.update(Cluster, {"a": _cluster("a", 3)}, version="2")
        assert watch.next(ResourceUpdated).resource == _cluster("a", 3)
        cached = client.resources(Cluster)
        assert cached["a"].resource == _cluster("a", 3)
        assert cached["b"].raw == _cluster("b", 2).SerializeToString()
        assert cached["b"].resource is not cached["b"].resource  # decoded on each access
