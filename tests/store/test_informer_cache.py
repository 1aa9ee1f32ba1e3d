"""InformerCache's copy-on-write snapshot, without a server."""

from __future__ import annotations

import threading

from xds_client.store._informer_cache import InformerCache
from xds_client.store._keys import ResourceKey
from xds_client.store._watch import ADDED, DELETED, StoreWatchEvent

PREFIX = ResourceKey("g", "things", "ns")


def event(etype: str, name: str, rv: int) -> StoreWatchEvent:
    body = b'{"metadata":{"name":"%s","namespace":"ns"}}' % name.encode()
    if etype == DELETED:
        return StoreWatchEvent(DELETED, rv, None, body, PREFIX)
    return StoreWatchEvent(ADDED, rv, body, None, PREFIX)


def test_a_snapshot_keeps_its_objects_while_the_cache_changes() -> None:
    lock = threading.Lock()
    cache = InformerCache(None, None, None)
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
