"""The informer's dict and handler dispatch, without threads or tasks.

:class:`InformerCache` applies watch events to the dict and says which handler
to call; :class:`~xds_client.store.Informer` (a thread) and
:class:`~xds_client.store.AsyncInformer` (a task) only move events into it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from xds_client.store._keys import ResourceKey, StoredObject
from xds_client.store._watch import ADDED, BOOKMARK, DELETED, MODIFIED, WatchEvent

__all__ = ["AddHandler", "DeleteHandler", "HandlerCall", "InformerCache", "UpdateHandler"]

_log = logging.getLogger("xds_client.store")

AddHandler = Callable[[StoredObject], None]
UpdateHandler = Callable[[StoredObject, StoredObject], None]
DeleteHandler = Callable[[StoredObject], None]


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
