"""Informers: a local dict of objects kept current by list+watch.

:class:`InformerCache` applies watch events to the dict and says which
handler to call; :class:`Informer` (a thread) and :class:`AsyncInformer` (a
task) only move events into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from xds_client.errors import WaitTimeoutError
from xds_client.store._keys import ResourceKey, StoredObject
from xds_client.store._watch import ADDED, BOOKMARK, DELETED, MODIFIED, WatchEvent

__all__ = ["Informer", "AsyncInformer", "InformerCache"]

_log = logging.getLogger("xds_client.store")

AddHandler = Callable[[StoredObject], None]
UpdateHandler = Callable[[StoredObject, StoredObject], None]
DeleteHandler = Callable[[StoredObject], None]


class _Closable(Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True)
class HandlerCall:
    """One handler to call with the objects an event produced."""

    handler: Callable[..., None]
    args: tuple[StoredObject, ...]


class InformerCache:
    """The informer's dict and handler dispatch, without threads or tasks."""

    def __init__(
        self,
        on_add: AddHandler | None,
        on_update: UpdateHandler | None,
        on_delete: DeleteHandler | None,
    ) -> None:
        self.objects: dict[ResourceKey, StoredObject] = {}
        self.synced = False
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete

    def apply(self, event: WatchEvent) -> HandlerCall | None:
        """Update the dict from one event; returns the handler call to make, if any.

        The caller runs it with :meth:`notify` after releasing any lock it holds, so a
        handler may read the informer (``get()``, ``objects``) without deadlocking.
        """
        etype = event.type
        if etype == BOOKMARK:
            if event.initial_events_end:
                self.synced = True
            return None
        key = event.key
        if key is None:
            return None
        if etype == DELETED:
            old = self.objects.pop(key, None)
            if old is None and event.previous is not None:
                old = StoredObject(event.resource_version, event.previous, key=key)
            if old is not None and self.on_delete is not None:
                return HandlerCall(self.on_delete, (old,))
            return None
        if etype in (ADDED, MODIFIED) and event.value is not None:
            new = StoredObject(event.resource_version, event.value, key=key)
            previous = self.objects.get(key)
            self.objects[key] = new
            if previous is None:
                return None if self.on_add is None else HandlerCall(self.on_add, (new,))
            if self.on_update is not None:
                return HandlerCall(self.on_update, (previous, new))
        return None

    @staticmethod
    def notify(call: HandlerCall | None) -> None:
        """Run a handler call from :meth:`apply`; a raising handler is logged only."""
        if call is None:
            return
        try:
            call.handler(*call.args)
        except Exception:
            # A broken handler must not stop the informer; the user sees the log.
            _log.exception("informer handler %r failed", call.handler)


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
    ) -> None:
        self._open_watch = open_watch
        self._cache = InformerCache(on_add, on_update, on_delete)
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: _Closable | None = None
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
        """Start the background thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="store-informer", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and join the thread."""
        self._stopping = True
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

    def _run(self) -> None:
        try:
            watch = self._open_watch()
        except Exception as exc:
            self.error = exc
            return
        self._watch = watch
        if self._stopping:
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


class AsyncInformer:
    """The asyncio twin of :class:`Informer`: a task instead of a thread."""

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
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Any = None
        self.error: BaseException | None = None
        """The error that stopped the informer, if any."""

    @property
    def objects(self) -> Mapping[ResourceKey, StoredObject]:
        """A snapshot of the cached objects."""
        return dict(self._cache.objects)

    def get(self, key: ResourceKey) -> StoredObject | None:
        """The cached object of ``key``, or None."""
        return self._cache.objects.get(key)

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

    async def _run(self) -> None:
        try:
            watch = self._open_watch()
        except Exception as exc:
            self.error = exc
            return
        self._watch = watch
        events: AsyncIterator[WatchEvent] = watch
        try:
            async for event in events:
                self._cache.notify(self._cache.apply(event))
                if self._cache.synced:
                    self._synced.set()
        except Exception as exc:
            self.error = exc
            _log.error("informer stopped: %s", exc)
        finally:
            await watch.aclose()
