"""The cyclic collector is held off while a large response is applied, and always restored."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client import ResourceUpdated
from xds_client._gc import LARGE_RESPONSE, collector_paused
from xds_client.testing import ControlPlane

from .conftest import ClientProxy

MakeClient = Callable[..., ClientProxy]


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_inside_and_restored_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_when_the_apply_raises() -> None:
    with pytest.raises(ValueError, match="boom"), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_nested_and_concurrent_holders_restore_once_all_are_done() -> None:
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled(), "the other holder is still applying"
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_the_application_disabled_stays_disabled() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_large_push_is_delivered_and_the_collector_is_back_on(
    cp: ControlPlane, make_client: MakeClient, protocol: str
) -> None:
    n = LARGE_RESPONSE + 10
    clusters = {f"c{i}": Cluster(name=f"c{i}") for i in range(n)}
    cp.set_resources(Cluster, clusters, version="1")
    client = make_client(cp.address, protocol=protocol)
    with client.watch(Cluster, None) as watch:
        for _ in range(n):
            watch.next(ResourceUpdated)
        assert len(client.resources(Cluster)) == n
    assert gc.isenabled()


def test_objects_the_application_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            pass
        assert gc.get_freeze_count() == frozen
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_after_a_pause_the_allocations_do_not_start_a_young_pass() -> None:
    with collector_paused():
        kept = [[i] for i in range(50_000)]  # tracked objects that outlive the apply
    assert gc.get_count()[0] < 1000
    assert gc.get_freeze_count() == 0
    del kept
