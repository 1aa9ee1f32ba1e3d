"""Informers: a local dict of objects kept current by list+watch.

:class:`InformerCache` applies watch events to the dict, keeps the indexes
and calls the handlers; :class:`Informer` (a thread) and
:class:`AsyncInformer` (a task) only move events into it. Like client-go's
reflector they never give up: after any error they wait
(:class:`~xds_client.store._reflector.ReflectorBackoff`), list again (the
differences reach the handlers) and watch on. Only ``stop()`` or a closed
client ends them; :attr:`Informer.error` keeps the last error seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from xds_client.errors import ClientClosedError, WaitTimeoutError
from xds_client.store._keys import ResourceKey, StoredObject
from xds_client.store._reflector import ReflectorBackoff
from xds_client.store._watch import ADDED, BOOKMARK, DELETED, MODIFIED, WatchEvent

__all__ = ["Informer", "AsyncInformer", "InformerCache"]

_log = logging.getLogger("xds_client.store")

AddHandler = Callable[[StoredObject], None]
UpdateHandler = Callable[[StoredObject, StoredObject], None]
DeleteHandler = Callable[[StoredObject], None]


class _Closable(Protocol):
    def close(self) -> None: ...


IndexFunc = Callable[[StoredObject], Iterable[str]]
"""Index values of an object (client-go's ``IndexFunc``)."""


def label_index(label: str) -> IndexFunc:
    """An index function by the value of one label (objects without it are not indexed)."""

    def values(obj: StoredObject) -> Iterable[str]:
        value = obj.labels.get(label)
        return () if value is None else (value,)

    return values


class InformerCache:
    """The informer's dict, indexes and handler dispatch, without threads or tasks."""

    def __init__(
        self,
        on_add: AddHandler | None,
        on_update: UpdateHandler | None,
        on_delete: DeleteHandler | None,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> None:
        self.objects: dict[ResourceKey, StoredObject] = {}
        self.synced = False
        self.handlers: list[
            tuple[AddHandler | None, UpdateHandler | None, DeleteHandler | None]
        ] = []
        """Every registered (on_add, on_update, on_delete), called in order."""
        if on_add or on_update or on_delete:
            self.handlers.append((on_add, on_update, on_delete))
        self.indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._indexes: dict[str, dict[str, set[ResourceKey]]] = {n: {} for n in self.indexers}

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Register more handlers; ``on_add`` is called at once for every cached object."""
        self.handlers.append((on_add, on_update, on_delete))
        for obj in list(self.objects.values()):
            self._call(on_add, obj)

    def by_index(self, name: str, value: str) -> list[StoredObject]:
        """The cached objects whose index ``name`` has ``value``."""
        if name not in self._indexes:
            raise KeyError(f"no index named {name!r}; indexes: {sorted(self._indexes)}")
        keys = self._indexes[name].get(value, ())
        return [self.objects[k] for k in sorted(keys, key=str)]

    def resync(self) -> None:
        """Call ``on_update(obj, obj)`` for every cached object (client-go's resync)."""
        for obj in list(self.objects.values()):
            for _add, update, _delete in self.handlers:
                self._call(update, obj, obj)

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

    def apply(self, event: WatchEvent) -> None:
        """Update the dict from one event and call the matching handler."""
        etype = event.type
        if etype == BOOKMARK:
            if event.initial_events_end:
                self.synced = True
            return
        key = event.key
        if key is None:
            return
        if etype == DELETED:
            old = self.objects.pop(key, None)
            if old is not None:
                self._index(key, old, None)
            if old is None and event.previous is not None:
                old = StoredObject(event.resource_version, event.previous, key=key)
            if old is not None:
                for _add, _update, delete in self.handlers:
                    self._call(delete, old)
            return
        if etype in (ADDED, MODIFIED) and event.value is not None:
            new = StoredObject(event.resource_version, event.value, key=key)
            previous = self.objects.get(key)
            self.objects[key] = new
            if self.indexers:
                self._index(key, previous, new)
            for add, update, _delete in self.handlers:
                if previous is None:
                    self._call(add, new)
                else:
                    self._call(update, previous, new)

    @staticmethod
    def _call(handler: Callable[..., None] | None, *args: StoredObject) -> None:
        if handler is None:
            return
        try:
            handler(*args)
        except Exception:
            # A broken handler must not stop the informer; the user sees the log.
            _log.exception("informer handler %r failed", handler)


def _safe_values(fn: IndexFunc, obj: StoredObject | None) -> tuple[str, ...]:
    if obj is None:
        return ()
    try:
        return tuple(fn(obj))
    except Exception:
        # A broken index function must not stop the informer; the user sees the log.
        _log.exception("informer index function %r failed", fn)
        return ()


class Informer:
    """A thread keeping :attr:`objects` current through list+watch.

    Create it with ``ResourceStoreClient.informer``; use ``with`` or
    ``start()``/``stop()``.
    """

    def __init__(
        self,
        open_watch: Callable[[], Any],
        *,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        resync_period: float | None = None,
        backoff: ReflectorBackoff | None = None,
    ) -> None:
        self._open_watch = open_watch
        self._cache = InformerCache(on_add, on_update, on_delete, indexers)
        self.resync_period = resync_period
        """Seconds between resyncs (``on_update(obj, obj)`` for every object); None: never."""
        self.backoff = backoff if backoff is not None else ReflectorBackoff()
        """Delays between relists after failures (800 ms to 30 s, as client-go)."""
        self.restarts = 0
        """How many times the informer listed again after an error."""
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: _Closable | None = None
        self._stopping = False
        self._stop_event = threading.Event()
        self.error: BaseException | None = None
        """The last error the informer recovered from (or that stopped it: a closed client)."""

    @property
    def objects(self) -> Mapping[ResourceKey, StoredObject]:
        """A snapshot of the cached objects."""
        with self._lock:
            return dict(self._cache.objects)

    def get(self, key: ResourceKey) -> StoredObject | None:
        """The cached object of ``key``, or None."""
        with self._lock:
            return self._cache.objects.get(key)

    def by_index(self, name: str, value: str) -> list[StoredObject]:
        """The cached objects whose index ``name`` (see ``indexers``) has ``value``."""
        with self._lock:
            return self._cache.by_index(name, value)

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Register more handlers; ``on_add`` runs at once for the objects already cached."""
        with self._lock:
            self._cache.add_handler(on_add, on_update, on_delete)

    @property
    def has_synced(self) -> bool:
        """Whether the initial list has been applied."""
        return self._synced.is_set()

    def start(self) -> Informer:
        """Start the background thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="store-informer", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and join the thread."""
        self._stopping = True
        self._stop_event.set()
        watch = self._watch
        if watch is not None:
            watch.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_synced(self, timeout: float | None = 10.0) -> None:
        """Block until the initial list is applied; :class:`WaitTimeoutError` on timeout."""
        if not self._synced.wait(timeout):
            if self.error is not None:
                raise WaitTimeoutError(f"informer failed: {self.error}") from self.error
            raise WaitTimeoutError(f"informer did not sync within {timeout} s")

    def __enter__(self) -> Informer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _resync_loop(self, period: float) -> None:
        while not self._stop_event.wait(period):
            with self._lock:
                self._cache.resync()

    def _run(self) -> None:
        if self.resync_period:
            threading.Thread(
                target=self._resync_loop,
                args=(self.resync_period,),
                name="store-informer-resync",
                daemon=True,
            ).start()
        while not self._stopping:
            try:
                watch = self._open_watch()
            except Exception as exc:  # the client is closed: nothing to retry
                self.error = exc
                return
            self._watch = watch
            if self._stopping:
                watch.close()
                return
            events: Iterator[WatchEvent] = watch
            try:
                for event in events:
                    with self._lock:
                        self._cache.apply(event)
                    if self._cache.synced:
                        self._synced.set()
            except ClientClosedError as exc:
                self.error = exc
                return
            except Exception as exc:
                self.error = exc
                delay = self.backoff.failure(time.monotonic())
                _log.warning("informer: %s; listing again in %.1f s", exc, delay)
                self._stop_event.wait(delay)
                watch.state.relist()
                self.restarts += 1
            finally:
                watch.close()


class AsyncInformer:
    """The asyncio twin of :class:`Informer`: a task instead of a thread."""

    def __init__(
        self,
        open_watch: Callable[[], Any],
        *,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        resync_period: float | None = None,
        backoff: ReflectorBackoff | None = None,
    ) -> None:
        self._open_watch = open_watch
        self._cache = InformerCache(on_add, on_update, on_delete, indexers)
        self.resync_period = resync_period
        """Seconds between resyncs (``on_update(obj, obj)`` for every object); None: never."""
        self.backoff = backoff if backoff is not None else ReflectorBackoff()
        """Delays between relists after failures (800 ms to 30 s, as client-go)."""
        self.restarts = 0
        """How many times the informer listed again after an error."""
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Any = None
        self.error: BaseException | None = None
        """The last error the informer recovered from (or that stopped it: a closed client)."""

    @property
    def objects(self) -> Mapping[ResourceKey, StoredObject]:
        """A snapshot of the cached objects."""
        return dict(self._cache.objects)

    def get(self, key: ResourceKey) -> StoredObject | None:
        """The cached object of ``key``, or None."""
        return self._cache.objects.get(key)

    def by_index(self, name: str, value: str) -> list[StoredObject]:
        """The cached objects whose index ``name`` (see ``indexers``) has ``value``."""
        return self._cache.by_index(name, value)

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Register more handlers; ``on_add`` runs at once for the objects already cached."""
        self._cache.add_handler(on_add, on_update, on_delete)

    @property
    def has_synced(self) -> bool:
        """Whether the initial list has been applied."""
        return self._synced.is_set()

    def start(self) -> AsyncInformer:
        """Start the background task (once; needs a running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def stop(self) -> None:
        """Stop the watch and wait for the task."""
        task, self._task = self._task, None
        if self._watch is not None:
            await self._watch.aclose()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_synced(self, timeout: float | None = 10.0) -> None:
        """Wait until the initial list is applied; :class:`WaitTimeoutError` on timeout."""
        try:
            await asyncio.wait_for(self._synced.wait(), timeout)
        except asyncio.TimeoutError:
            if self.error is not None:
                raise WaitTimeoutError(f"informer failed: {self.error}") from self.error
            raise WaitTimeoutError(f"informer did not sync within {timeout} s") from None

    async def __aenter__(self) -> AsyncInformer:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _resync_loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            self._cache.resync()

    async def _run(self) -> None:
        resync = None
        if self.resync_period:
            resync = asyncio.get_running_loop().create_task(self._resync_loop(self.resync_period))
        try:
            await self._run_watches()
        finally:
            if resync is not None:
                resync.cancel()

    async def _run_watches(self) -> None:
        while True:
            try:
                watch = self._open_watch()
            except Exception as exc:  # the client is closed: nothing to retry
                self.error = exc
                return
            self._watch = watch
            events: AsyncIterator[WatchEvent] = watch
            try:
                async for event in events:
                    self._cache.apply(event)
                    if self._cache.synced:
                        self._synced.set()
            except ClientClosedError as exc:
                self.error = exc
                return
            except Exception as exc:
                self.error = exc
                delay = self.backoff.failure(time.monotonic())
                _log.warning("informer: %s; listing again in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                watch.state.relist()
                self.restarts += 1
            finally:
                await watch.aclose()
