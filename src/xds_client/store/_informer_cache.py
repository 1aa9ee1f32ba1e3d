"""The informer's dict, indexes and handler dispatch, without threads or tasks.

:class:`InformerCache` applies watch events to the dict and keeps the indexes;
it returns the handler calls an event causes instead of making them, so
:class:`~xds_client.store.Informer` (a thread) and
:class:`~xds_client.store.AsyncInformer` (a task) can change the dict under their
lock and run the handlers outside it: a handler may then read the informer
(``get``, ``objects``, ``by_index``) without a deadlock. Both drivers are
generated from one source (``_async_informer.py``); this module is what they share.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar, overload

from xds_client._tables import objects_table
from xds_client.store._keys import ResourceKey, StoredObject
from xds_client.store._watch import (
    ADDED,
    BOOKMARK,
    DELETED,
    MODIFIED,
    RESYNCED,
    EventType,
    StoreWatchEvent,
)

__all__ = [
    "AddHandler",
    "DeleteHandler",
    "HandlerCalls",
    "IndexFunc",
    "InformerCache",
    "UpdateHandler",
    "label_index",
]

_log = logging.getLogger("xds_client.store")

AddHandler = Callable[[StoredObject], None]
UpdateHandler = Callable[[StoredObject, StoredObject], None]
DeleteHandler = Callable[[StoredObject], None]

HandlerCalls = Sequence[tuple[Callable[..., None], tuple[StoredObject, ...]]]
"""Handler calls still to make: (handler, arguments), in order."""

_NO_CALLS: HandlerCalls = ()

_T = TypeVar("_T")

AbstractLock = AbstractContextManager[object]
"""The informer's lock (a ``threading.RLock``): entered to read or change the cache."""

IndexFunc = Callable[[StoredObject], Iterable[str]]
"""Index values of an object (client-go's ``IndexFunc``)."""


def label_index(label: str) -> IndexFunc:
    """An index function by the value of one label (objects without it are not indexed)."""

    def values(obj: StoredObject) -> Iterable[str]:
        value = obj.labels.get(label)
        return () if value is None else (value,)

    return values


class ObjectTable(MutableMapping[ResourceKey, StoredObject]):
    """The informer's objects by key.

    Under a prefix that names its namespace, an object of that prefix is held by
    its name alone and its :class:`ResourceKey` is built when asked (a key per
    object is 64 bytes, a tenth of a typical dashboard); any other key is held
    as it is.
    """

    __slots__ = ("_by_key", "_by_name", "_prefix")

    def __init__(self, prefix: ResourceKey | None = None) -> None:
        self._prefix = prefix if prefix is not None and prefix.namespace else None
        self._by_name: dict[str, StoredObject] = {}
        self._by_key: dict[ResourceKey, StoredObject] = {}

    def _name(self, key: ResourceKey) -> str | None:
        p = self._prefix
        if (
            p is not None
            and key.namespace == p.namespace
            and key.resource == p.resource
            and key.group == p.group
        ):
            return key.name
        return None

    def make(self, resource_version: int, value: bytes, key: ResourceKey) -> StoredObject:
        """The object to keep for ``key`` (by name under the prefix)."""
        name = self._name(key)
        if name is None:
            return StoredObject(resource_version, value, key)
        obj = StoredObject(resource_version, value, None, self._prefix)
        obj._key = name  # the key is built from the prefix and the name when asked
        return obj

    def __getitem__(self, key: ResourceKey) -> StoredObject:
        name = self._name(key)
        return self._by_key[key] if name is None else self._by_name[name]

    @overload
    def get(self, key: ResourceKey) -> StoredObject | None: ...
    @overload
    def get(self, key: ResourceKey, default: StoredObject | _T) -> StoredObject | _T: ...
    def get(self, key: ResourceKey, default: Any = None) -> Any:
        """The object of ``key``, or ``default`` (no KeyError raised and caught per miss)."""
        name = self._name(key)
        return self._by_key.get(key, default) if name is None else self._by_name.get(name, default)

    def __setitem__(self, key: ResourceKey, obj: StoredObject) -> None:
        name = self._name(key)
        if name is None:
            self._by_key[key] = obj
        else:
            self._by_name[name] = obj

    def __delitem__(self, key: ResourceKey) -> None:
        name = self._name(key)
        if name is None:
            del self._by_key[key]
        else:
            del self._by_name[name]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, ResourceKey):
            return False
        name = self._name(key)
        return key in self._by_key if name is None else name in self._by_name

    def __iter__(self) -> Iterator[ResourceKey]:
        p = self._prefix
        if p is not None:
            for name in self._by_name:
                yield ResourceKey(p.group, p.resource, p.namespace, name)
        yield from self._by_key

    def __len__(self) -> int:
        return len(self._by_name) + len(self._by_key)

    def all(self) -> list[StoredObject]:
        """Every object (without building keys)."""
        return [*self._by_name.values(), *self._by_key.values()]

    def copy(self) -> ObjectTable:
        """A table of the same objects that later changes to this one do not reach."""
        out = ObjectTable(self._prefix)
        out._by_name = dict(self._by_name)
        out._by_key = dict(self._by_key)
        return out


class Snapshot(Mapping[ResourceKey, StoredObject]):
    """A read-only mapping of the informer's objects as they were when it was taken.

    Copy on write: it reads the informer's own dict (under the informer's lock, so
    a reader on another thread never sees a change half made) until the informer
    next changes, which first gives it a copy. Taking a snapshot of an unchanged
    informer thus costs nothing, however many objects it holds.
    """

    __slots__ = ("__weakref__", "_lock", "_objects")

    def __init__(self, objects: ObjectTable, lock: AbstractLock) -> None:
        self._objects = objects
        self._lock: AbstractLock | None = lock
        """The informer's lock while this reads the live dict; None once it has a copy."""

    def _detach(self) -> None:
        # Called under the informer's lock, before the live dict changes: the copy
        # is in place before the lock is dropped, so a reader that saw no lock
        # reads the copy.
        self._objects = self._objects.copy()
        self._lock = None

    def __getitem__(self, key: ResourceKey) -> StoredObject:
        lock = self._lock
        if lock is None:
            return self._objects[key]
        with lock:
            return self._objects[key]

    def __iter__(self) -> Iterator[ResourceKey]:
        lock = self._lock
        if lock is None:
            return iter(self._objects)
        with lock:  # the keys now: the live dict may change once the lock is dropped
            return iter(list(self._objects))

    def __len__(self) -> int:
        lock = self._lock
        if lock is None:
            return len(self._objects)
        with lock:
            return len(self._objects)

    def __contains__(self, key: object) -> bool:
        lock = self._lock
        if lock is None:
            return key in self._objects
        with lock:
            return key in self._objects

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)} objects>"

    def _repr_html_(self) -> str:
        return objects_table(self[key] for key in sorted(self, key=str))


class InformerCache:
    """The informer's dict, indexes and handlers; says which handler calls are due."""

    def __init__(
        self,
        on_add: AddHandler | None,
        on_update: UpdateHandler | None,
        on_delete: DeleteHandler | None,
        indexers: Mapping[str, IndexFunc] | None = None,
        prefix: ResourceKey | None = None,
    ) -> None:
        self.objects = ObjectTable(prefix)
        """The objects by key (by name under ``prefix`` when it names a namespace)."""
        self.synced = False
        self.handlers: list[
            tuple[AddHandler | None, UpdateHandler | None, DeleteHandler | None]
        ] = []
        """Every registered (on_add, on_update, on_delete), called in order."""
        if on_add or on_update or on_delete:
            self.handlers.append((on_add, on_update, on_delete))
        self._snapshot: weakref.ref[Snapshot] | None = None
        self.indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._indexes: dict[str, dict[str, set[ResourceKey]]] = {n: {} for n in self.indexers}

    def snapshot(self, lock: AbstractLock) -> Snapshot:
        """The objects as they are now; later changes do not reach it (copy on write).

        Call it under ``lock``, the lock every change to the cache is made under.
        """
        ref = self._snapshot
        snap = ref() if ref is not None else None
        if snap is None:
            snap = Snapshot(self.objects, lock)
            self._snapshot = weakref.ref(snap)
        return snap

    def _detach(self) -> None:
        # Before a change: a snapshot still reading the live dict gets its own copy.
        ref, self._snapshot = self._snapshot, None
        snap = ref() if ref is not None else None
        if snap is not None:
            snap._detach()

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> HandlerCalls:
        """Register more handlers; returns ``on_add`` calls for every cached object."""
        self.handlers.append((on_add, on_update, on_delete))
        if on_add is None:
            return _NO_CALLS
        return [(on_add, (obj,)) for obj in self.objects.all()]

    def by_index(self, name: str, value: str) -> list[StoredObject]:
        """The cached objects whose index ``name`` has ``value``."""
        if name not in self._indexes:
            raise KeyError(f"no index named {name!r}; indexes: {sorted(self._indexes)}")
        keys = self._indexes[name].get(value, ())
        return [self.objects[k] for k in sorted(keys, key=str)]

    def resync(self) -> HandlerCalls:
        """``on_update(obj, obj)`` calls for every cached object (client-go's resync)."""
        updates = [update for _add, update, _delete in self.handlers if update is not None]
        return [(update, (obj, obj)) for obj in self.objects.all() for update in updates]

    def _index(self, key: ResourceKey, old: StoredObject | None, new: StoredObject | None) -> None:
        for name, fn in self.indexers.items():
            index = self._indexes[name]
            for value in _safe_values(fn, old):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in _safe_values(fn, new):
                index.setdefault(value, set()).add(key)

    def apply(self, event: StoreWatchEvent) -> HandlerCalls:
        """Update the dict from one event; returns the handler calls it causes."""
        etype = event.type
        if etype == BOOKMARK:
            if event.initial_events_end:
                self.synced = True
            return _NO_CALLS
        if etype == RESYNCED:
            return self._replace(event)
        key = event.key
        if key is None:
            return _NO_CALLS
        if self._snapshot is not None:
            self._detach()
        if etype == DELETED:
            old = self.objects.pop(key, None)
            if old is not None:
                self._index(key, old, None)
            if old is None and event.previous is not None:
                old = StoredObject(event.resource_version, event.previous, key=key)
            if old is None or not self.handlers:
                return _NO_CALLS
            return [(delete, (old,)) for _a, _u, delete in self.handlers if delete is not None]
        if etype in (ADDED, MODIFIED) and event.value is not None:
            new = self.objects.make(event.resource_version, event.value, key)
            previous = self.objects.get(key)
            self.objects[key] = new
            if self.indexers:
                self._index(key, previous, new)
            if not self.handlers:
                return _NO_CALLS
            if previous is None:
                return [(add, (new,)) for add, _u, _d in self.handlers if add is not None]
            return [(upd, (previous, new)) for _a, upd, _d in self.handlers if upd is not None]
        return _NO_CALLS

    def _replace(self, event: StoreWatchEvent) -> HandlerCalls:
        # A resync carries the complete list: whatever the cache holds that is not
        # in it is gone (deleted during a gap), whatever differs is newer. After the
        # watch's own reconcile events nothing differs, and nothing is called.
        listed = event.objects
        if listed is None:
            return _NO_CALLS
        objects = self.objects
        gone = [k for k in objects if k not in listed]
        changed = [
            (k, o)
            for k, o in listed.items()
            if (had := objects.get(k)) is None or had.resource_version != o.resource_version
        ]
        calls: list[tuple[Callable[..., None], tuple[StoredObject, ...]]] = []
        rv = event.resource_version
        for k in gone:
            calls.extend(self.apply(_keyed(DELETED, rv, None, objects[k].value, k)))
        for k, o in changed:
            etype = MODIFIED if k in objects else ADDED
            calls.extend(self.apply(_keyed(etype, o.resource_version, o.value, None, k)))
        return calls

    @staticmethod
    def run(calls: HandlerCalls) -> None:
        """Make the calls; a raising handler is logged and the others still run."""
        for handler, args in calls:
            try:
                handler(*args)
            except Exception:
                # A broken handler must not stop the informer; the user sees the log.
                _log.exception("informer handler %r failed", handler)


def _keyed(
    etype: EventType, rv: int, value: bytes | None, previous: bytes | None, key: ResourceKey
) -> StoreWatchEvent:
    event = StoreWatchEvent(etype, rv, value, previous, key.prefix())
    event._key = key
    return event


def _safe_values(fn: IndexFunc, obj: StoredObject | None) -> tuple[str, ...]:
    if obj is None:
        return ()
    try:
        return tuple(fn(obj))
    except Exception:
        # A broken index function must not stop the informer; the user sees the log.
        _log.exception("informer index function %r failed", fn)
        return ()
