"""AsyncConfigWatch on AsyncXdsClient; ``tools/gen_sync.py`` makes the ConfigWatch twin."""

from __future__ import annotations

import time

import pytest

from tests._twin_support import run_async  # async-only
from xds_client import AsyncXdsClient
from xds_client.errors import ClientClosedError, WaitTimeoutError
from xds_client.graph import AsyncConfigWatch, ResourceKey
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
@run_async  # async-only
async def test_watch_config_follows_the_graph(protocol: str, ads: bool) -> None:
    with ControlPlane() as cp:
        first_config(cp)
        client = AsyncXdsClient(
            cp.address,
            node=NODE,
            protocol=protocol,  # type: ignore[arg-type]
            ads=ads,
            does_not_exist_timeout=0.5,
        )
        async with client, client.watch_config("L1") as watch:
            assert isinstance(watch, AsyncConfigWatch)
            snapshot = await watch.get(timeout=10)
            check_first(snapshot)
            async with client.watch_config("L1", authority="example.com") as narrow:
                assert (await narrow.get(timeout=10)).ok
            # Routes drop every cluster but c2: the rest is unsubscribed.
            cp.set_resources(ROUTE, [routes("R1", "c2")], version="2")
            second = await watch.get(timeout=10)
            assert set(second.clusters) == {"c2"}
            route_key = ResourceKey("rds", "R1")
            assert second.versions[route_key] != snapshot.versions[route_key]
            assert watch.subscribed == {
                ResourceKey("lds", "L1"),
                ResourceKey("rds", "R1"),
                ResourceKey("cds", "c2"),
            }
            await cp.wait_for_request_async(CLUSTER, dropped_all_but_c2, timeout=10)
            await cp.wait_for_request_async(ENDPOINT, dropped_every_endpoint, timeout=10)
            # Does-not-exist completes the graph with an error rather than hanging.
            cp.set_resources(ROUTE, [routes("R1", "missing")], version="3")
            third = await watch.get(timeout=10)
            assert dict(third.errors) == {"cds:missing": "does not exist"}
            assert watch.latest is not None
            assert watch.latest.generation >= third.generation
            assert "watching=" in repr(watch)


@run_async  # async-only
async def test_get_times_out_clearly() -> None:
    with ControlPlane() as cp:
        client = AsyncXdsClient(cp.address, node=NODE, does_not_exist_timeout=None)
        async with client, client.watch_config("L1") as watch:
            start = time.monotonic()
            with pytest.raises(WaitTimeoutError, match=r"'L1' within 0\.3s.*lds:L1"):
                await watch.get(timeout=0.3)
            assert time.monotonic() - start < 2.0


@run_async  # async-only
async def test_iteration_ends_when_the_client_closes() -> None:
    with ControlPlane() as cp:
        first_config(cp)
        client = AsyncXdsClient(cp.address, node=NODE)
        watch = client.watch_config("L1")
        check_first(await watch.get(timeout=10))
        await client.aclose()
        async for snapshot in watch:  # ends instead of blocking
            raise AssertionError(f"a snapshot after the client closed: {snapshot}")
        with pytest.raises(ClientClosedError, match="closed"):
            await watch.get(timeout=5)


@run_async  # async-only
async def test_iteration_ends_when_the_watch_closes() -> None:
    with ControlPlane() as cp:
        first_config(cp)
        client = AsyncXdsClient(cp.address, node=NODE)
        async with client:
            watch = client.watch_config("L1")
            async for snapshot in watch:
                check_first(snapshot)
                await watch.aclose()
            assert watch.subscribed  # the tracker keeps its last view
            with pytest.raises(ClientClosedError):
                await watch.get(timeout=1)
