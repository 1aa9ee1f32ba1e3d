"""InformerCache's copy-on-write snapshot, without a server."""

from __future__ import annotations

import threading

import pytest

from xds_client.store._informer_cache import InformerCache
from xds_client.store._keys import ResourceKey, StoredObject
from xds_client.store._watch import ADDED, DELETED, RESYNCED, StoreWatchEvent

PREFIX = ResourceKey("g", "things", "ns")


def event(etype: str, name: str, rv: int) -> StoreWatchEvent:
    body = b'{"metadata":{"name":"%s","namespace":"ns"}}' % name.encode()
    if etype == DELETED:
        return StoreWatchEvent(DELETED, rv, None, body, PREFIX)
    return StoreWatchEvent(ADDED, rv, body, None, PREFIX)


@pytest.mark.parametrize("by_name", [True, False], ids=["by-name", "by-key"])
def test_a_snapshot_keeps_its_objects_while_the_cache_changes(by_name: bool) -> None:
    lock = threading.Lock()
    cache = InformerCache(None, None, None, prefix=PREFIX if by_name else None)
    for i, name in enumerate(("a", "b", "c")):
        cache.apply(event(ADDED, name, i + 1))
    with lock:
        snap = cache.snapshot(lock)
    assert cache.snapshot(lock) is snap  # unchanged: the same snapshot
    keys = iter(snap)
    first = next(keys)
    with lock:
        cache.apply(event(ADDED, "d", 4))
        cache.apply(event(DELETED, "a", 5))
    # An iteration begun before the change goes on over the old keys, without
    # "dictionary changed size during iteration".
    assert {first, *keys} == {PREFIX.with_name(n) for n in "abc"}
    assert sorted(k.name for k in snap) == ["a", "b", "c"]
    assert snap[PREFIX.with_name("a")].resource_version == 1
    assert PREFIX.with_name("d") not in snap
    assert len(snap) == 3
    with lock:
        now = cache.snapshot(lock)
    assert now is not snap
    assert sorted(k.name for k in now) == ["b", "c", "d"]


def test_objects_held_by_name_still_answer_their_key() -> None:
    cache = InformerCache(None, None, None, prefix=PREFIX)
    cache.apply(event(ADDED, "a", 1))
    other = ResourceKey("g", "things", "elsewhere", "x")
    body = b'{"metadata":{"name":"x","namespace":"elsewhere"}}'
    cache.apply(StoreWatchEvent(ADDED, 2, body, None, PREFIX))
    a = cache.objects[PREFIX.with_name("a")]
    assert a.key == PREFIX.with_name("a")
    assert cache.objects[other].key == other
    assert set(cache.objects) == {PREFIX.with_name("a"), other}
    assert PREFIX.with_name("a") in cache.objects
    assert ResourceKey("g", "other", "ns", "a") not in cache.objects
    cache.apply(event(DELETED, "a", 3))
    assert set(cache.objects) == {other}


def test_a_resync_replaces_the_cache_and_reports_what_vanished() -> None:
    # A resynced event carries the complete list: an object deleted during a gap
    # that no event reported (a ghost) is dropped, and on_delete hears of it.
    deleted: list[str] = []
    added: list[str] = []
    updated: list[str] = []
    cache = InformerCache(
        lambda o: added.append(o.key.name),
        lambda old, new: updated.append(new.key.name),
        lambda o: deleted.append(o.key.name),
        prefix=PREFIX,
    )
    for i, name in enumerate(("a", "b", "c")):
        cache.run(cache.apply(event(ADDED, name, i + 1)))
    added.clear()
    body = b'{"metadata":{"name":"%s","namespace":"ns"}}'
    listed = {
        PREFIX.with_name("a"): StoredObject(1, body % b"a", PREFIX.with_name("a")),
        PREFIX.with_name("c"): StoredObject(7, body % b"c", PREFIX.with_name("c")),
        PREFIX.with_name("d"): StoredObject(8, body % b"d", PREFIX.with_name("d")),
    }
    resync = StoreWatchEvent(RESYNCED, 9, None, None, PREFIX, objects=listed)
    cache.run(cache.apply(resync))
    assert (deleted, updated, added) == (["b"], ["c"], ["d"])
    assert {k.name: o.resource_version for k, o in cache.objects.items()} == {
        "a": 1,
        "c": 7,
        "d": 8,
    }
    # The same list again (what the watch hands an informer after its own
    # reconcile events): nothing to do.
    assert cache.apply(resync) == []
