# Generated from xds_client/store/_async_informer.py by tools/gen_sync.py: do not edit.
"""Informer: a local dict of objects kept current by list+watch, on a thread.

Generated from ``_async_informer.py``; the dict, the indexes and the handler rules
are in :class:`~xds_client.store._informer_cache.InformerCache`. Handlers run on
the informer's thread, outside its lock, so they may read the informer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from xds_client._backends.threads import Event, Worker, spawn
from xds_client.errors import ClientClosedError, WaitTimeoutError
from xds_client.store._informer_cache import (
    AddHandler,
    DeleteHandler,
    IndexFunc,
    InformerCache,
    UpdateHandler,
)
from xds_client.store._keys import ResourceKey, StoredObject
from xds_client.store._reflector import ReflectorBackoff
from xds_client.store._watch import StoreWatchEvent

__all__ = ["Informer"]

_log = logging.getLogger("xds_client.store")


class Informer:
    """A thread keeping :attr:`objects` current through list+watch.

    Create it with ``ResourceStoreClient.informer``; use ``with`` or
    ``start()``/``stop()``. Handlers run outside the informer's lock, so they may
    call :meth:`get`, :meth:`by_index` or read :attr:`objects`.
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
        prefix: ResourceKey | None = None,
    ) -> None:
        self._open_watch = open_watch
        # With the listed prefix the cache holds each object by name, not by a key.
        self._cache = InformerCache(on_add, on_update, on_delete, indexers, prefix)
        self.resync_period = resync_period
        """Seconds between resyncs (``on_update(obj, obj)`` for every object); None: never."""
        self.backoff = backoff if backoff is not None else ReflectorBackoff()
        """Delays between relists after failures (800 ms to 30 s, as client-go)."""
        self.restarts = 0
        """How many times the informer listed again after an error."""
        # Readers on other threads see whole updates (nothing awaits under it); reentrant,
        # because index functions run under it and may read the informer themselves.
        self._lock = threading.RLock()
        self._synced = Event()
        self._worker: Worker | None = None
        self._watch: Any = None
        self._stopping = False
        self._stop_event = Event()
        self.error: BaseException | None = None
        """The last error the informer recovered from (or that stopped it: a closed client)."""

    def __repr__(self) -> str:
        state = "synced" if self.has_synced else "syncing"
        if self._stopping:
            state = "stopped"
        return f"<{type(self).__name__} {state}, {len(self._cache.objects)} objects>"

    @property
    def objects(self) -> Mapping[ResourceKey, StoredObject]:
        """A read-only snapshot of the cached objects (later changes do not reach it).

        Copy on write: taking it is free; the informer's next change copies the dict
        for the snapshots still alive.
        """
        with self._lock:
            return self._cache.snapshot(self._lock)

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
            calls = self._cache.add_handler(on_add, on_update, on_delete)
        self._cache.run(calls)

    @property
    def has_synced(self) -> bool:
        """Whether the initial list has been applied."""
        return self._synced.is_set()

    def start(self) -> Informer:
        """Start the background thread (once)."""
        if self._worker is None:
            self._worker = spawn(self._run, name="store-informer")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and wait (up to ``timeout`` seconds) for the thread to end."""
        self._stopping = True
        self._stop_event.set()
        watch = self._watch
        if watch is not None:
            watch.close()
        worker = self._worker
        if worker is not None:
            worker.join(timeout)

    def close(self) -> None:
        """The same as :meth:`stop` (one spelling of closing for every object)."""
        self.stop()

    def wait_synced(self, timeout: float | None = 10.0) -> None:
        """Wait until the initial list is applied; :class:`WaitTimeoutError` on timeout."""
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
                calls = self._cache.resync()
            self._cache.run(calls)

    def _run(self) -> None:
        resync = None
        if self.resync_period:
            resync = spawn(self._resync_loop, self.resync_period, name="store-informer-resync")
        try:
            self._run_watches()
        finally:
            if resync is not None:
                resync.cancel()

    def _run_watches(self) -> None:
        cache, lock = self._cache, self._lock
        while not self._stopping:
            try:
                watch = self._open_watch()
            except Exception as exc:  # the client is closed: nothing to retry
                self.error = exc
                return
            self._watch = watch
            if self._stopping:  # stop() came while the watch was opening
                watch.close()
                return
            events: Iterator[StoreWatchEvent] = watch
            try:
                for event in events:
                    with lock:
                        calls = cache.apply(event)
                    if calls:
                        cache.run(calls)  # outside the lock: a handler may read the informer
                    if cache.synced:
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
