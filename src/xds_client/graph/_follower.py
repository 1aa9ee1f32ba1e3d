"""What feeds :class:`ConfigTracker`: client watches opened and closed as the tracker says.

Both config watches (:mod:`._async_watch`, and :mod:`._watch` generated from it) use the
clients' public ``watch(type, name, on_event=...)``: the sync client runs the callbacks
on its dispatcher thread, the async client on its loop, so the tracker is fed from one
place at a time (a lock guards it anyway for the sync client). Nothing here imports
asyncio.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, Protocol

from xds_client.protocol._events import (
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)

from ._snapshot import ConfigSnapshot, ResourceKey
from ._tracker import ConfigTracker, TrackerUpdate

__all__ = ["_Follower", "_WatchingClient"]


class _ClientWatch(Protocol):
    """What the follower uses of a client's watch (``Watch`` and ``AsyncWatch`` have it)."""

    @property
    def pending(self) -> int:
        """Events queued behind the one being handled (a burst)."""

    def close(self) -> None: ...


class _WatchingClient(Protocol):
    """What the follower uses of a client (``XdsClient`` and ``AsyncXdsClient`` have it)."""

    @property
    def closed(self) -> bool: ...

    def watch(self, resource: Any, names: Any = ..., *, on_event: Any = ...) -> _ClientWatch: ...


class _Group:
    """One client watch for several names of one type (opened together)."""

    def __init__(self, kind: str, names: set[str]) -> None:
        self.kind = kind
        self.names = names
        self.watch: _ClientWatch | None = None


class _Follower:
    """The tracker and the watches it asks for; ``deliver`` gets each snapshot.

    The names a tracker update subscribes to together share one client watch: a
    watch costs the client about the same for one name as for a thousand (measured:
    3 s for 1,000 one-name watches, 9 ms for one watch of 1,000 names). When some
    names of a group are dropped, the rest move to a new watch, opened before the old
    one closes so that they stay subscribed on the wire.
    """

    def __init__(
        self, client: _WatchingClient, listener: str, max_aggregate_depth: int,
        deliver: Callable[[ConfigSnapshot], None], authority: str | None = None,
    ) -> None:  # fmt: skip
        self._client = client
        self._deliver = deliver
        self._lock = threading.RLock()
        self._group_of: dict[ResourceKey, _Group] = {}
        self._to_open: dict[str, set[str]] = {}
        self._defer = False
        self._closed = False
        self.tracker = ConfigTracker(
            listener, max_aggregate_depth=max_aggregate_depth, authority=authority
        )
        with self._lock:
            self._apply(self.tracker.start())

    def _open(self, kind: str, names: set[str]) -> None:
        group = _Group(kind, names)
        for name in names:
            self._group_of[ResourceKey(kind, name)] = group  # type: ignore[arg-type]
        # Cached state may come back at once, through on_event, re-entering _on_event.
        group.watch = self._client.watch(
            kind, sorted(names), on_event=lambda event: self._on_event(group, event)
        )

    def _apply(self, update: TrackerUpdate) -> None:
        shrunk: dict[int, _Group] = {}
        for key in update.unsubscribe:
            group = self._group_of.pop(key, None)
            if group is not None:
                group.names.discard(key.name)
                shrunk[id(group)] = group
        for group in shrunk.values():
            if group.names:
                self._open(group.kind, set(group.names))
            if group.watch is not None:
                group.watch.close()  # its queued events will not come: no burst to wait for
        if shrunk and update.snapshot is None:
            update = dataclasses.replace(update, snapshot=self.tracker.flush().snapshot)
        if update.snapshot is not None:
            self._deliver(update.snapshot)
        for key in update.unsubscribe:
            self._to_open.get(key.kind, set()).discard(key.name)
        for key in update.subscribe:
            self._to_open.setdefault(key.kind, set()).add(key.name)
        if shrunk or not self._defer:
            self._flush()

    def _flush(self) -> None:
        """Open the watches asked for so far, one per type."""
        to_open, self._to_open = self._to_open, {}
        for kind, names in to_open.items():
            if names:
                self._open(kind, names)

    def _on_event(self, group: _Group, event: object) -> None:
        with self._lock:
            if self._closed:
                return
            # While more events of this watch are queued (a burst: every cluster of a
            # response), new subscriptions wait and go out as one watch at its end,
            # and the snapshot is built once, at its end too.
            self._defer = group.watch is not None and group.watch.pending > 0
            try:
                for key in self._keys_of(group, event):
                    if self._group_of.get(key) is group:  # not a stale group's late event
                        self._apply(self.tracker.receive(key, event, defer=True))
            finally:
                self._defer = False
            if not (group.watch is not None and group.watch.pending):
                self._apply(self.tracker.flush())

    @staticmethod
    def _keys_of(group: _Group, event: object) -> list[ResourceKey]:
        """The subscribed names an event is about (a NACK may name several)."""
        if isinstance(event, ResponseRejected):
            names = [n for n in group.names if n in event.errors]
        elif isinstance(event, ResourceUpdated | ResourceRemoved):
            names = [n for n in (event.name, *event.aliases) if n in group.names][:1]
        elif isinstance(
            event, ResourceDoesNotExist | ResourceErrorReported | ResourceDeletionIgnored
        ):
            names = [event.name] if event.name in group.names else []
        else:  # ConnectivityChanged, ResponseAccepted: about no one resource
            names = []
        return [ResourceKey(group.kind, n) for n in names]  # type: ignore[arg-type]

    def client_closed(self) -> bool:
        """True once the client is closed: no snapshot can come any more."""
        return self._client.closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            groups = {id(g): g for g in self._group_of.values()}
            self._group_of = {}
        for group in groups.values():
            if group.watch is not None:
                group.watch.close()
