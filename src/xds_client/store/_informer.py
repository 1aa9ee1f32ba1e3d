# Generated from xds_client/store/_async_informer.py by tools/gen_sync.py: do not edit.
"""Informer: a local dict of objects kept current by list+watch, on a thread.

Generated from ``_async_informer.py``; the dict and the handler rules are in
:class:`~xds_client.store._informer_cache.InformerCache`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from xds_client._backends.threads import Event, Worker, spawn
from xds_client.errors import WaitTimeoutError
from xds_client.store._informer_cache import (
    AddHandler,
    DeleteHandler,
    HandlerCall,
    InformerCache,
    UpdateHandler,
)
from xds_client.store._keys import ResourceKey, StoredObject
from xds_client.store._watch import WatchEvent

__all__ = ["Informer", "HandlerCall", "InformerCache"]

_log = logging.getLogger("xds_client.store")


class Informer:
    """A thread keeping :attr:`objects` current through list+watch.

    Create it with ``ResourceStoreClient.informer``; use ``with`` or
    ``start()``/``stop()``. Handlers run outside the informer's lock, so
    they may call :meth:`get` or read :attr:`objects`.
    """

    def __init__(
        self,
        open_watch: Callable[[], Any],
        *,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        self._open_watch = open_watch
        self._cache = InformerCache(on_add, on_update, on_delete)
        # A plain lock: readers on other threads see whole updates (nothing awaits under it).
        self._lock = threading.Lock()
        self._synced = Event()
        self._worker: Worker | None = None
        self._watch: Any = None
        self._stopping = False
        self.error: BaseException | None = None
        """The error that stopped the informer, if any."""

    @property
    def objects(self) -> Mapping[ResourceKey, StoredObject]:
        """A snapshot of the cached objects."""
        with self._lock:
            return dict(self._cache.objects)

    def get(self, key: ResourceKey) -> StoredObject | None:
        """The cached object of ``key``, or None."""
        with self._lock:
            return self._cache.objects.get(key)

    @property
    def has_synced(self) -> bool:
        """Whether the initial list has been applied."""
        return self._synced.is_set()

    def start(self) -> Informer:
        """Start the background worker (once; an async one needs a running loop)."""
        if self._worker is None:
            self._worker = spawn(self._run, name="store-informer")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and wait (up to ``timeout`` seconds) for the worker to end."""
        self._stopping = True
        watch = self._watch
        if watch is not None:
            watch.close()
        worker, self._worker = self._worker, None
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

    def _run(self) -> None:
        try:
            watch = self._open_watch()
        except Exception as exc:
            self.error = exc
            return
        self._watch = watch
        if self._stopping:  # stop() came while the watch was opening
            watch.close()
        events: Iterator[WatchEvent] = watch
        try:
            for event in events:
                with self._lock:
                    call = self._cache.apply(event)
                self._cache.notify(call)  # outside the lock: a handler may read the informer
                if self._cache.synced:
                    self._synced.set()
        except Exception as exc:
            self.error = exc
            _log.error("informer stopped: %s", exc)
        finally:
            watch.close()
