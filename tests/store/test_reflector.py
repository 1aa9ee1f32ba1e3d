"""The informer never gives up (client-go's reflector): backoff, relist, handlers, indexes."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from xds_client.store import (
    AsyncResourceStoreClient,
    ReflectorBackoff,
    ResourceStoreClient,
    StoredObject,
    label_index,
)
from xds_client.store._reflector import MIN_WATCH_TIMEOUT, watch_timeout
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key, wait_until

pytestmark = pytest.mark.timeout(60)

QUICK = ReflectorBackoff(initial=0.01, maximum=0.05)


def test_backoff_doubles_from_800_ms_to_30_s_and_resets_after_a_quiet_period() -> None:
    backoff = ReflectorBackoff(rand=lambda: 0.0)
    delays = [backoff.failure(float(t)) for t in range(8)]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    assert backoff.failure(8.0 + 120.0) == 0.8  # two minutes without a failure
    jittery = ReflectorBackoff(rand=lambda: 1.0)
    assert jittery.failure(0.0) == pytest.approx(1.6)  # up to twice the delay, as client-go


def test_watch_timeout_is_5_to_10_minutes() -> None:
    assert watch_timeout(lambda: 0.0) == MIN_WATCH_TIMEOUT == 300.0
    assert watch_timeout(lambda: 1.0) == 600.0


def test_informer_relists_after_a_non_retryable_error() -> None:
    # Before: the informer stopped for good on the first 403.
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        srv.put(key("a"), doc("a"))
        srv.fail_next(2, 403, methods=["List"])
        with client.informer(PREFIX, backoff=QUICK) as informer:
            informer.wait_synced(10)
            assert set(informer.objects) == {key("a")}
            assert informer.restarts == 2
            assert informer.error is not None
            assert informer.error.code == 403  # type: ignore[attr-defined]


def test_informer_relists_when_the_watch_fails_and_reports_the_differences() -> None:
    deleted: list[str] = []
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        srv.put_many([(key(n), doc(n)) for n in "abc"])
        with client.informer(
            PREFIX, backoff=QUICK, on_delete=lambda o: deleted.append(o.key.name)
        ) as informer:
            informer.wait_synced(10)
            srv.wait_for_watchers(1)
            # A watch failure that is not retryable (403), while "b" goes away.
            srv.fail_next(1, 403, methods=["Watch"])
            srv.remove(key("b"))
            srv.drop_watches()
            wait_until(lambda: informer.restarts >= 1, what="a relist")
            wait_until(lambda: key("b") not in informer.objects, what="b removed")
            srv.put(key("d"), doc("d"))
            wait_until(lambda: key("d") in informer.objects, what="d added")
        assert deleted == ["b"]


def test_several_handlers_indexes_and_resync() -> None:
    log: list[tuple[str, str]] = []
    with ResourceStoreServer() as srv, ResourceStoreClient(srv.address, retry=FAST) as client:
        srv.put(key("a"), doc("a", team="x"))
        srv.put(key("b"), doc("b", team="y"))
        informer = client.informer(
            PREFIX,
            on_add=lambda o: log.append(("first", o.key.name)),
            indexers={"team": label_index("team")},
            resync_period=0.05,
        )
        resynced = threading.Event()

        def on_update(old: StoredObject, new: StoredObject) -> None:
            if old is new:
                resynced.set()

        with informer:
            informer.wait_synced(10)
            informer.add_handler(on_add=lambda o: log.append(("second", o.key.name)))
            informer.add_handler(on_update=on_update)
            assert sorted(log) == [("first", "a"), ("first", "b"), ("second", "a"), ("second", "b")]
            assert [o.key.name for o in informer.by_index("team", "x")] == ["a"]
            srv.put(key("a"), doc("a", team="y"))
            wait_until(lambda: len(informer.by_index("team", "y")) == 2, what="reindex")
            assert informer.by_index("team", "x") == []
            srv.remove(key("b"))
            wait_until(lambda: len(informer.by_index("team", "y")) == 1, what="unindex")
            assert resynced.wait(10)
        with pytest.raises(KeyError, match="team"):
            informer.by_index("owner", "me")


def test_async_informer_relists_after_a_non_retryable_error() -> None:
    async def body(srv: ResourceStoreServer) -> None:
        async with AsyncResourceStoreClient(srv.address, retry=FAST) as client:
            informer = client.informer(PREFIX, backoff=QUICK, indexers={"t": label_index("t")})
            async with informer:
                await informer.wait_synced(10)
                assert set(informer.objects) == {key("a")}
                assert informer.restarts == 1
                assert [o.key.name for o in informer.by_index("t", "1")] == ["a"]

    with ResourceStoreServer() as srv:
        srv.put(key("a"), doc("a", t="1"))
        srv.fail_next(1, grpc.StatusCode.PERMISSION_DENIED, methods=["List"])
        asyncio.run(body(srv))
