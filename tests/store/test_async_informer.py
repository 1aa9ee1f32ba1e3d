"""AsyncInformer against the in-process store; ``tools/gen_sync.py`` makes the Informer twin.

The informer never gives up (client-go's reflector): it relists after any error and
reports the differences. Handlers may read the informer they belong to: the sync
informer used to call them under its non-reentrant lock, so ``informer.get()`` in a
handler deadlocked.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
import pytest

from tests._twin_support import run_async  # async-only
from xds_client._backends.asyncio import AsyncEvent, run_blocking
from xds_client.store import (
    AsyncResourceStoreClient,
    ReflectorBackoff,
    ResourceKey,
    StoredObject,
    label_index,
)
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key, until

pytestmark = pytest.mark.timeout(60)

QUICK = ReflectorBackoff(initial=0.01, maximum=0.05)


def connect(server: ResourceStoreServer) -> AsyncResourceStoreClient:
    return AsyncResourceStoreClient(server.address, retry=FAST, timeout=10)


@run_async  # async-only
async def test_handlers_may_read_the_informer(server: ResourceStoreServer) -> None:
    server.put(key("a"), doc("A", team="x"))
    seen: list[tuple[str, bool, int, int]] = []
    done = AsyncEvent()

    def on_add(obj: StoredObject) -> None:
        got = informer.get(obj.key) is not None
        seen.append((obj.key.name, got, len(informer.objects), len(informer.by_index("t", "x"))))
        if obj.key.name == "b":
            done.set()

    async with connect(server) as client:
        informer = client.informer(PREFIX, on_add=on_add, indexers={"t": label_index("team")})
        async with informer:
            await informer.wait_synced(5)
            await client.create(key("b"), doc("B", team="x"))
            assert await done.wait(5), f"the handler did not complete; saw {seen}"
            informer.add_handler(on_add=lambda o: seen.append((o.key.name, True, -1, -1)))
    assert seen == [("a", True, 1, 1), ("b", True, 2, 2), ("a", True, -1, -1), ("b", True, -1, -1)]


@run_async  # async-only
async def test_index_functions_may_read_the_informer(server: ResourceStoreServer) -> None:
    # Index functions run under the informer's lock; reading the informer there
    # (an older ``objects`` snapshot included) re-enters it instead of deadlocking.
    server.put(key("a"), doc("A", team="x"))
    seen: list[int] = []
    held: list[Mapping[ResourceKey, StoredObject]] = []

    def team(obj: StoredObject) -> list[str]:
        if held:
            seen.append(len(list(held[0])) + len(informer.objects))
        return list(label_index("team")(obj))

    async with connect(server) as client:
        informer = client.informer(PREFIX, indexers={"t": team})
        async with informer:
            await informer.wait_synced(5)
            held.append(informer.objects)
            await client.create(key("b"), doc("B", team="x"))
            await run_blocking(until(lambda: len(informer.by_index("t", "x")) == 2, "b indexed"))
    assert seen, "the index function never ran after the snapshot was taken"


@run_async  # async-only
async def test_informer_keeps_a_current_dict(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i), app="web")) for i in range(5)])
    server.put(key("other"), doc(app="db"))
    log: list[tuple[str, str]] = []
    async with connect(server) as client:
        informer = client.informer(
            PREFIX,
            "app=web",
            on_add=lambda o: log.append(("add", o.key.name)),
            on_update=lambda old, new: log.append(("update", new.key.name)),
            on_delete=lambda o: log.append(("delete", o.key.name)),
        )
        assert "syncing" in repr(informer)
        async with informer:
            await informer.wait_synced(10)
            assert informer.has_synced
            assert sorted(k.name for k in informer.objects) == [f"a{i}" for i in range(5)]
            await client.update(key("a1"), doc("changed", app="web"), resource_version=0)
            await client.delete(key("a2"))
            await client.create(key("a9"), doc(app="web"))
            await run_blocking(until(lambda: ("add", "a9") in log, "the informer to see a9"))
            obj = informer.get(key("a1"))
            assert obj is not None
            assert obj.json()["spec"]["title"] == "changed"
            assert informer.get(key("a2")) is None
        assert informer.error is None
        assert "stopped" in repr(informer)
    assert log[5:] == [("update", "a1"), ("delete", "a2"), ("add", "a9")]


@run_async  # async-only
async def test_informer_relists_after_a_non_retryable_error(server: ResourceStoreServer) -> None:
    # Before: the informer stopped for good on the first 403.
    server.put(key("a"), doc("a", t="1"))
    server.fail_next(2, grpc.StatusCode.PERMISSION_DENIED, methods=["List"])
    async with connect(server) as client:
        informer = client.informer(PREFIX, backoff=QUICK, indexers={"t": label_index("t")})
        async with informer:
            await informer.wait_synced(10)
            assert set(informer.objects) == {key("a")}
            assert informer.restarts == 2
            assert informer.error is not None
            assert informer.error.code == 403  # type: ignore[attr-defined]
            assert [o.key.name for o in informer.by_index("t", "1")] == ["a"]


@run_async  # async-only
async def test_informer_relists_when_the_watch_fails_and_reports_the_differences(
    server: ResourceStoreServer,
) -> None:
    deleted: list[str] = []
    server.put_many([(key(n), doc(n)) for n in "abc"])
    async with connect(server) as client:
        informer = client.informer(
            PREFIX, backoff=QUICK, on_delete=lambda o: deleted.append(o.key.name)
        )
        async with informer:
            await informer.wait_synced(10)
            await run_blocking(lambda: server.wait_for_watchers(1))
            # A watch failure that is not retryable (403), while "b" goes away.
            server.fail_next(1, 403, methods=["Watch"])
            server.remove(key("b"))
            server.drop_watches()
            await run_blocking(until(lambda: informer.restarts >= 1, "a relist"))
            await run_blocking(until(lambda: key("b") not in informer.objects, "b removed"))
            server.put(key("d"), doc("d"))
            await run_blocking(until(lambda: key("d") in informer.objects, "d added"))
    assert deleted == ["b"]


@run_async  # async-only
async def test_informer_disconnected_past_compaction_converges(
    server: ResourceStoreServer,
) -> None:
    # The watch breaks, "b" goes and the history with it: the watch resumes into a
    # 410, lists again, and the informer (its view, its handlers) equals the server.
    deleted: list[str] = []
    server.put_many([(key(n), doc(n)) for n in "abc"])
    async with connect(server) as client:
        informer = client.informer(
            PREFIX, backoff=QUICK, on_delete=lambda o: deleted.append(o.key.name)
        )
        async with informer:
            await informer.wait_synced(10)
            await run_blocking(lambda: server.wait_for_watchers(1))
            server.fail_next(1, grpc.StatusCode.UNAVAILABLE, methods=["Watch"])
            server.drop_watches()
            server.remove(key("b"))
            server.put(key("c"), doc("C"))
            server.compact()
            await run_blocking(until(lambda: key("b") not in informer.objects, "b removed"))
            current = {o.key: o.value async for o in client.list(PREFIX)}
            await run_blocking(
                until(
                    lambda: {k: o.value for k, o in informer.objects.items()} == current,
                    "the informer equals the server",
                )
            )
    assert deleted == ["b"]


@run_async  # async-only
async def test_several_handlers_indexes_and_resync(server: ResourceStoreServer) -> None:
    log: list[tuple[str, str]] = []
    server.put(key("a"), doc("a", team="x"))
    server.put(key("b"), doc("b", team="y"))
    resynced = AsyncEvent()

    def on_update(old: StoredObject, new: StoredObject) -> None:
        if old is new:
            resynced.set()

    async with connect(server) as client:
        informer = client.informer(
            PREFIX,
            on_add=lambda o: log.append(("first", o.key.name)),
            indexers={"team": label_index("team")},
            resync_period=0.05,
        )
        async with informer:
            await informer.wait_synced(10)
            informer.add_handler(on_add=lambda o: log.append(("second", o.key.name)))
            informer.add_handler(on_update=on_update)
            assert sorted(log) == [("first", "a"), ("first", "b"), ("second", "a"), ("second", "b")]
            assert [o.key.name for o in informer.by_index("team", "x")] == ["a"]
            server.put(key("a"), doc("a", team="y"))
            await run_blocking(until(lambda: len(informer.by_index("team", "y")) == 2, "reindex"))
            assert informer.by_index("team", "x") == []
            server.remove(key("b"))
            await run_blocking(until(lambda: len(informer.by_index("team", "y")) == 1, "unindex"))
            assert await resynced.wait(10)
        with pytest.raises(KeyError, match="team"):
            informer.by_index("owner", "me")


@run_async  # async-only
async def test_a_closed_client_stops_the_informer(server: ResourceStoreServer) -> None:
    client = connect(server)
    informer = client.informer(PREFIX, backoff=QUICK)
    await client.aclose()
    async with informer:
        await run_blocking(until(lambda: informer.error is not None, "the informer to give up"))
    assert "closed" in str(informer.error)
    assert not informer.has_synced


@run_async  # async-only
async def test_objects_is_a_snapshot_that_later_changes_do_not_reach(
    server: ResourceStoreServer,
) -> None:
    server.put(key("a"), doc("A"))
    async with connect(server) as client, client.informer(PREFIX) as informer:
        await informer.wait_synced(5)
        before = informer.objects
        assert informer.objects == before  # unchanged: an equal snapshot
        await client.create(key("b"), doc("B"))
        await run_blocking(until(lambda: key("b") in informer.objects, "b added"))
        assert set(before) == {key("a")}
        assert len(before) == 1
        assert before[key("a")].key == key("a")
        assert set(informer.objects) == {key("a"), key("b")}
