# Generated from tests/store/test_async_informer.py by tools/gen_sync.py: do not edit.
"""Informer against the in-process store (generated from test_async_informer.py).

The informer never gives up (client-go's reflector): it relists after any error and
reports the differences. Handlers may read the informer they belong to: the sync
informer used to call them under its non-reentrant lock, so ``informer.get()`` in a
handler deadlocked.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
import pytest

from xds_client._backends.threads import Event, run_blocking
from xds_client.store import (
    ReflectorBackoff,
    ResourceKey,
    ResourceStoreClient,
    StoredObject,
    label_index,
)
from xds_client.testing import ResourceStoreServer

from ._store_support import FAST, PREFIX, doc, key, until

pytestmark = pytest.mark.timeout(60)

QUICK = ReflectorBackoff(initial=0.01, maximum=0.05)


def connect(server: ResourceStoreServer) -> ResourceStoreClient:
    return ResourceStoreClient(server.address, retry=FAST, timeout=10)


def test_handlers_may_read_the_informer(server: ResourceStoreServer) -> None:
    server.put(key("a"), doc("A", team="x"))
    seen: list[tuple[str, bool, int, int]] = []
    done = Event()

    def on_add(obj: StoredObject) -> None:
        got = informer.get(obj.key) is not None
        seen.append((obj.key.name, got, len(informer.objects), len(informer.by_index("t", "x"))))
        if obj.key.name == "b":
            done.set()

    with connect(server) as client:
        informer = client.informer(PREFIX, on_add=on_add, indexers={"t": label_index("team")})
        with informer:
            informer.wait_synced(5)
            client.create(key("b"), doc("B", team="x"))
            assert done.wait(5), f"the handler did not complete; saw {seen}"
            informer.add_handler(on_add=lambda o: seen.append((o.key.name, True, -1, -1)))
    assert seen == [("a", True, 1, 1), ("b", True, 2, 2), ("a", True, -1, -1), ("b", True, -1, -1)]


def test_index_functions_may_read_the_informer(server: ResourceStoreServer) -> None:
    # Index functions run under the informer's lock; reading the informer there
    # (an older ``objects`` snapshot included) re-enters it instead of deadlocking.
    server.put(key("a"), doc("A", team="x"))
    seen: list[int] = []
    held: list[Mapping[ResourceKey, StoredObject]] = []

    def team(obj: StoredObject) -> list[str]:
        if held:
            seen.append(len(list(held[0])) + len(informer.objects))
        return list(label_index("team")(obj))

    with connect(server) as client:
        informer = client.informer(PREFIX, indexers={"t": team})
        with informer:
            informer.wait_synced(5)
            held.append(informer.objects)
            client.create(key("b"), doc("B", team="x"))
            run_blocking(until(lambda: len(informer.by_index("t", "x")) == 2, "b indexed"))
    assert seen, "the index function never ran after the snapshot was taken"


def test_informer_keeps_a_current_dict(server: ResourceStoreServer) -> None:
    server.put_many([(key(f"a{i}"), doc(str(i), app="web")) for i in range(5)])
    server.put(key("other"), doc(app="db"))
    log: list[tuple[str, str]] = []
    with connect(server) as client:
        informer = client.informer(
            PREFIX,
            "app=web",
            on_add=lambda o: log.append(("add", o.key.name)),
            on_update=lambda old, new: log.append(("update", new.key.name)),
            on_delete=lambda o: log.append(("delete", o.key.name)),
        )
        assert "syncing" in repr(informer)
        with informer:
            informer.wait_synced(10)
            assert informer.has_synced
            assert sorted(k.name for k in informer.objects) == [f"a{i}" for i in range(5)]
            client.update(key("a1"), doc("changed", app="web"), resource_version=0)
            client.delete(key("a2"))
            client.create(key("a9"), doc(app="web"))
            run_blocking(until(lambda: ("add", "a9") in log, "the informer to see a9"))
            obj = informer.get(key("a1"))
            assert obj is not None
            assert obj.json()["spec"]["title"] == "changed"
            assert informer.get(key("a2")) is None
        assert informer.error is None
        assert "stopped" in repr(informer)
    assert log[5:] == [("update", "a1"), ("delete", "a2"), ("add", "a9")]


def test_informer_relists_after_a_non_retryable_error(server: ResourceStoreServer) -> None:
    # Before: the informer stopped for good on the first 403.
    server.put(key("a"), doc("a", t="1"))
    server.fail_next(2, grpc.StatusCode.PERMISSION_DENIED, methods=["List"])
    with connect(server) as client:
        informer = client.informer(PREFIX, backoff=QUICK, indexers={"t": label_index("t")})
        with informer:
            informer.wait_synced(10)
            assert set(informer.objects) == {key("a")}
            assert informer.restarts == 2
            assert informer.error is not None
            assert informer.error.code == 403  # type: ignore[attr-defined]
            assert [o.key.name for o in informer.by_index("t", "1")] == ["a"]


def test_informer_relists_when_the_watch_fails_and_reports_the_differences(
    server: ResourceStoreServer,
) -> None:
    deleted: list[str] = []
    server.put_many([(key(n), doc(n)) for n in "abc"])
    with connect(server) as client:
        informer = client.informer(
            PREFIX, backoff=QUICK, on_delete=lambda o: deleted.append(o.key.name)
        )
        with informer:
            informer.wait_synced(10)
            run_blocking(lambda: server.wait_for_watchers(1))
            # A watch failure that is not retryable (403), while "b" goes away.
            server.fail_next(1, 403, methods=["Watch"])
            server.remove(key("b"))
            server.drop_watches()
            run_blocking(until(lambda: informer.restarts >= 1, "a relist"))
            run_blocking(until(lambda: key("b") not in informer.objects, "b removed"))
            server.put(key("d"), doc("d"))
            run_blocking(until(lambda: key("d") in informer.objects, "d added"))
    assert deleted == ["b"]


def test_informer_disconnected_past_compaction_converges(
    server: ResourceStoreServer,
) -> None:
    # The watch breaks, "b" goes and the history with it: the watch resumes into a
    # 410, lists again, and the informer (its view, its handlers) equals the server.
    deleted: list[str] = []
    server.put_many([(key(n), doc(n)) for n in "abc"])
    with connect(server) as client:
        informer = client.informer(
            PREFIX, backoff=QUICK, on_delete=lambda o: deleted.append(o.key.name)
        )
        with informer:
            informer.wait_synced(10)
            run_blocking(lambda: server.wait_for_watchers(1))
            server.fail_next(1, grpc.StatusCode.UNAVAILABLE, methods=["Watch"])
            server.drop_watches()
            server.remove(key("b"))
            server.put(key("c"), doc("C"))
            server.compact()
            run_blocking(until(lambda: key("b") not in informer.objects, "b removed"))
            current = {o.key: o.value for o in client.list(PREFIX)}
            run_blocking(
                until(
                    lambda: {k: o.value for k, o in informer.objects.items()} == current,
                    "the informer equals the server",
                )
            )
    assert deleted == ["b"]


def test_several_handlers_indexes_and_resync(server: ResourceStoreServer) -> None:
    log: list[tuple[str, str]] = []
    server.put(key("a"), doc("a", team="x"))
    server.put(key("b"), doc("b", team="y"))
    resynced = Event()

    def on_update(old: StoredObject, new: StoredObject) -> None:
        if old is new:
            resynced.set()

    with connect(server) as client:
        informer = client.informer(
            PREFIX,
            on_add=lambda o: log.append(("first", o.key.name)),
            indexers={"team": label_index("team")},
            resync_period=0.05,
        )
        with informer:
            informer.wait_synced(10)
            informer.add_handler(on_add=lambda o: log.append(("second", o.key.name)))
            informer.add_handler(on_update=on_update)
            assert sorted(log) == [("first", "a"), ("first", "b"), ("second", "a"), ("second", "b")]
            assert [o.key.name for o in informer.by_index("team", "x")] == ["a"]
            server.put(key("a"), doc("a", team="y"))
            run_blocking(until(lambda: len(informer.by_index("team", "y")) == 2, "reindex"))
            assert informer.by_index("team", "x") == []
            server.remove(key("b"))
            run_blocking(until(lambda: len(informer.by_index("team", "y")) == 1, "unindex"))
            assert resynced.wait(10)
        with pytest.raises(KeyError, match="team"):
            informer.by_index("owner", "me")


def test_a_closed_client_stops_the_informer(server: ResourceStoreServer) -> None:
    client = connect(server)
    informer = client.informer(PREFIX, backoff=QUICK)
    client.close()
    with informer:
        run_blocking(until(lambda: informer.error is not None, "the informer to give up"))
    assert "closed" in str(informer.error)
    assert not informer.has_synced


def test_objects_is_a_snapshot_that_later_changes_do_not_reach(
    server: ResourceStoreServer,
) -> None:
    server.put(key("a"), doc("A"))
    with connect(server) as client, client.informer(PREFIX) as informer:
        informer.wait_synced(5)
        before = informer.objects
        assert informer.objects == before  # unchanged: an equal snapshot
        client.create(key("b"), doc("B"))
        run_blocking(until(lambda: key("b") in informer.objects, "b added"))
        assert set(before) == {key("a")}
        assert len(before) == 1
        assert before[key("a")].key == key("a")
        assert set(informer.objects) == {key("a"), key("b")}
