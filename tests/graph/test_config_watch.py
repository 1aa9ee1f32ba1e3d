# Generated from tests/graph/test_async_config_watch.py by tools/gen_sync.py: do not edit.
"""ConfigWatch on XdsClient (generated from test_async_config_watch.py)."""

from __future__ import annotations

import time

import pytest

from xds_client import XdsClient
from xds_client.errors import ClientClosedError, WaitTimeoutError
from xds_client.graph import ConfigWatch, ResourceKey
from xds_client.resources import CLUSTER, ENDPOINT, ROUTE
from xds_client.testing import ControlPlane

from ._graph_resources import routes
from .test_watch_config import (
    MATRIX,
    NODE,
    check_first,
    dropped_all_but_c2,
    dropped_every_endpoint,
    first_config,
)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("protocol", "ads"), MATRIX)
def test_watch_config_follows_the_graph(protocol: str, ads: bool) -> None:
    with ControlPlane() as cp:
        first_config(cp)
        client = XdsClient(
            cp.address,
            node=NODE,
            protocol=protocol,  # type: ignore[arg-type]
            ads=ads,
            does_not_exist_timeout=0.5,
        )
        with client, client.watch_config("L1") as watch:
            assert isinstance(watch, ConfigWatch)
            snapshot = watch.get(timeout=10)
            check_first(snapshot)
            with client.watch_config("L1", authority="example.com") as narrow:
                assert (narrow.get(timeout=10)).ok
            # Routes drop every cluster but c2: the rest is unsubscribed.
            cp.set_resources(ROUTE, [routes("R1", "c2")], version="2")
            second = watch.get(timeout=10)
            assert set(second.clusters) == {"c2"}
            route_key = ResourceKey("rds", "R1")
            assert second.versions[route_key] != snapshot.versions[route_key]
            assert watch.subscribed == {
                ResourceKey("lds", "L1"),
                ResourceKey("rds", "R1"),
                ResourceKey("cds", "c2"),
            }
            cp.wait_for_request(CLUSTER, dropped_all_but_c2, timeout=10)
            cp.wait_for_request(ENDPOINT, dropped_every_endpoint, timeout=10)
            # Does-not-exist completes the graph with an error rather than hanging.
            cp.set_resources(ROUTE, [routes("R1", "missing")], version="3")
            third = watch.get(timeout=10)
            assert dict(third.errors) == {"cds:missing": "does not exist"}
            assert watch.latest is not None
            assert watch.latest.generation >= third.generation
            assert "watching=" in repr(watch)


def test_get_times_out_clearly() -> None:
    with ControlPlane() as cp:
        client = XdsClient(cp.address, node=NODE, does_not_exist_timeout=None)
        with client, client.watch_config("L1") as watch:
            start = time.monotonic()
            with pytest.raises(WaitTimeoutError, match=r"'L1' within 0\.3s.*lds:L1"):
                watch.get(timeout=0.3)
            assert time.monotonic() - start < 2.0


def test_iteration_ends_when_the_client_closes() -> None:
    with ControlPlane() as cp:
        first_config(cp)
        client = XdsClient(cp.address, node=NODE)
        watch = client.watch_config("L1")
        check_first(watch.get(timeout=10))
        client.close()
        for snapshot in watch:  # ends instead of blocking
            raise AssertionError(f"a snapshot after the client closed: {snapshot}")
        with pytest.raises(ClientClosedError, match="closed"):
            watch.get(timeout=5)


def test_iteration_ends_when_the_watch_closes() -> None:
    with ControlPlane() as cp:
        first_config(cp)
        client = XdsClient(cp.address, node=NODE)
        with client:
            watch = client.watch_config("L1")
            for snapshot in watch:
                check_first(snapshot)
                watch.close()
            assert watch.subscribed  # the tracker keeps its last view
            with pytest.raises(ClientClosedError):
                watch.get(timeout=1)
