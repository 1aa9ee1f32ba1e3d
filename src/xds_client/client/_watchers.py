"""Watcher bookkeeping shared by both clients: events, coalescing buffers, refcounts.

Nothing here blocks or knows about threads versus asyncio: a buffer calls a
``wake`` function the driver gives it, and the driver decides how to wait.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeAlias, TypeVar, Union

from google.protobuf.message import Message

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import ResourceNotFoundError, TransportError, UsageError, XdsClientError
from xds_client.federation import glob_collection_of, is_glob_collection
from xds_client.protocol._events import (
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
    UpdateBatch,
)

__all__ = [
    "ConnectivityChanged",
    "EventBuffer",
    "Segment",
    "WatchEntry",
    "WatchEvent",
    "WatchRegistry",
    "describe_wait",
    "event_key",
    "matches",
]

M = TypeVar("M", bound=Message)


@dataclass(frozen=True, slots=True)
class ConnectivityChanged:
    """The stream carrying a watch's type went down or came back.

    Cached resources stay valid while disconnected; no deletion is implied.
    """

    connected: bool
    """True once a (re)opened stream delivered a response or its server answered a
    probe (a resumed delta stream may have nothing to send); False when it failed."""
    server: str
    """URI of the server the stream talks to (no credentials)."""
    type_urls: tuple[str, ...]
    """Types carried by the stream (every subscribed type for ADS)."""
    reason: str | None = None
    """Why the stream failed (disconnections only)."""


WatchEvent: TypeAlias = Union[  # noqa: UP007 - a runtime alias must work on Python 3.10
    ResourceUpdated[M],
    ResourceRemoved,
    ResourceDoesNotExist,
    ResourceDeletionIgnored,
    ResourceErrorReported,
    ResponseRejected,
    ConnectivityChanged,
]
"""What a watch yields; ``ResourceUpdated[M]`` carries the watched message type."""


def event_key(event: WatchEvent[Any]) -> Hashable:
    """Events with the same key supersede each other when a buffer coalesces."""
    if type(event) is ResourceUpdated:  # the common case first
        return ("resource", event.type_url, event.name)
    if isinstance(event, ConnectivityChanged):
        return ("connectivity",)
    if isinstance(event, ResponseRejected):
        return ("rejected", event.type_url)
    return ("resource", event.type_url, event.name)


_RUN = 128
"""How many events of a segment a pop builds at once (the next pops need no lock)."""


class Segment:
    """The part of an :class:`UpdateBatch` one watcher wants: every position, or
    ``index``. The buffer builds each :class:`ResourceUpdated` as it is taken."""

    __slots__ = ("batch", "dead", "end", "index", "pos")

    def __init__(self, batch: UpdateBatch, index: list[int] | None = None) -> None:
        self.batch = batch
        self.index = index
        self.pos = 0
        self.end = len(batch) if index is None else len(index)
        self.dead: set[int] | None = None
        """Positions (in the batch) superseded by a later event (folding)."""

    def live_names(self) -> list[str]:
        """The names still to be taken, in order."""
        names = self.batch.names
        index = self.index
        picked = names[self.pos :] if index is None else [names[i] for i in index[self.pos :]]
        dead = self.dead
        if dead:
            positions = self.batch.positions()
            picked = [n for n in picked if positions[n] not in dead]
        return picked


class EventBuffer:
    """A FIFO of events, bounded by folding.

    Up to ``maxsize`` events queue as they come. Past that, pending events are
    folded to the latest one per key (resource name, NACK, connectivity): an event
    superseded by a later one of the same key is dropped, and the later one keeps its
    place in the order of latest changes. Memory is then bounded by the number of
    distinct resources, and the latest state of each one is never lost. The updates
    of many resources of one response arrive as one :class:`Segment` (one object for
    them all, each event built when taken): a push of N distinct new names costs
    one item and is never folded, whatever N. ``wake`` is called after each put and
    on close.
    """

    def __init__(self, maxsize: int, wake: Callable[[], None] | None = None) -> None:
        self.maxsize = maxsize
        self._items: deque[Any] = deque()  # events and Segments, oldest first
        self._count = 0  # pending events (a segment counts its live positions)
        # Folding (past maxsize, until drained): where the pending event of each key is.
        # Resource events by type URL, then name (a segment for the ones in segments);
        # the other keys (NACK, connectivity) in ``_others``.
        self._index: dict[str, dict[str, Any]] | None = None
        self._others: dict[Hashable, Any] = {}
        self._dead: set[int] = set()  # ids of superseded single events still queued
        # The events of a segment's run, built in one go and handed to the reader:
        # the next pops take them without the lock. Pending, but no longer folded.
        self._ready: deque[WatchEvent[Any]] = deque()
        self._lock = threading.Lock()
        self.cond = threading.Condition(self._lock)
        self._blocked = 0  # threads in wait(): put_many notifies the condition only for them
        self._wake = wake
        self.closed = False
        self.coalesced = 0
        """How many events were dropped in favour of a later one (for tests and metrics)."""
        self.on_drained: Callable[[], None] | None = None
        """Called when a pop takes the last pending event, and on close (flow control)."""

    def set_wake(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` after every put and on close (set before events flow)."""
        self._wake = wake

    def put(self, event: WatchEvent[Any] | Segment) -> None:
        """Queue one event or segment (folding past ``maxsize``) and wake the consumer."""
        self.put_many((event,))

    def put_many(self, events: Iterable[WatchEvent[Any] | Segment]) -> None:
        """Queue events (and segments) in order under one lock, with a single wake-up."""
        with self._lock:
            if self.closed:
                return
            batch = events if isinstance(events, (list, tuple)) else list(events)
            added = 0
            for item in batch:
                added += item.end if type(item) is Segment else 1
            if self._index is not None:
                for item in batch:
                    self._fold_in(item)
                    self._items.append(item)
            else:
                self._items.extend(batch)
            self._count += added
            if self._index is None and self._count > self.maxsize:
                self._start_folding()
            if self._blocked:  # threads in wait() (the watches wait on their waiters)
                self.cond.notify_all()
        if self._wake is not None:
            self._wake()

    def _start_folding(self) -> None:
        """Past maxsize: index every pending event by key, dropping superseded ones."""
        self._index = {}
        for item in self._items:
            self._fold_in(item)

    def _fold_in(self, item: Any) -> None:
        """Index ``item`` (about to be, or already, queued after everything indexed),
        dropping the earlier pending event of each of its keys."""
        index = self._index
        assert index is not None
        if type(item) is Segment:
            names = item.live_names()
            sub = index.setdefault(item.batch.type_url, {})
            if sub:
                for name in sub.keys() & set(names):
                    self._supersede(sub[name], item.batch.type_url, name)
            sub.update(zip(names, itertools.repeat(item)))
            return
        if type(item) is ResourceUpdated or not isinstance(
            item, (ConnectivityChanged, ResponseRejected)
        ):
            sub = index.setdefault(item.type_url, {})
            old = sub.get(item.name)
            if old is not None:
                self._supersede(old, item.type_url, item.name)
            sub[item.name] = item
            return
        key = event_key(item)
        old = self._others.get(key)
        if old is not None:
            self._dead.add(id(old))
            self._count -= 1
            self.coalesced += 1
        self._others[key] = item

    def _supersede(self, old: Any, type_url: str, name: str) -> None:
        if type(old) is Segment:
            position = old.batch.positions()[name]
            index = old.index
            at = position
            if index is not None:
                from bisect import bisect_left  # folding an indexed segment: rare (~0.4 ms)

                at = bisect_left(index, position)
            if at < old.pos:
                return  # handed to the reader already (the index keeps a segment's names)
            if old.dead is None:
                old.dead = set()
            old.dead.add(position)
        else:
            self._dead.add(id(old))
        self._count -= 1
        self.coalesced += 1

    def pop(self) -> WatchEvent[Any] | None:
        """The oldest pending event, or None.

        The events of a segment are built a run at a time (:data:`_RUN`) under the
        lock; the next pops take them without it. Taking the last pending event calls
        :attr:`on_drained` (flow control), if set.
        """
        ready = self._ready
        if ready:
            try:
                event = ready.popleft()
            except IndexError:  # another reader thread took the last one
                pass
            else:
                if not ready and self.on_drained is not None:
                    self._drained()
                return event
        with self._lock:
            taken = self._take()
            if taken is None:
                return None
            drained = self._count == 0
            if drained and self._index is not None:
                self._index = None  # drained: back to a plain FIFO
                self._others.clear()
                self._dead.clear()
            drained = drained and not ready
        if drained and self.on_drained is not None:
            self.on_drained()
        return taken

    def _drained(self) -> None:
        with self._lock:
            empty = self._count == 0 and not self._ready
        if empty and self.on_drained is not None:
            self.on_drained()

    def _take(self) -> WatchEvent[Any] | None:
        """The next pending event (a segment's next run goes to ``_ready``), under the lock."""
        items = self._items
        while items:
            head = items[0]
            if type(head) is Segment:
                start = head.pos
                stop = head.pos = min(head.end, start + _RUN)
                if stop >= head.end:
                    items.popleft()
                index = head.index
                positions: Any = range(start, stop) if index is None else index[start:stop]
                dead = head.dead
                if dead:
                    positions = [i for i in positions if i not in dead]
                if not positions:
                    continue
                self._count -= len(positions)
                built = head.batch.events(positions)
                if len(built) > 1:
                    self._ready.extend(built[1:])
                return built[0]
            items.popleft()
            if self._dead and id(head) in self._dead:
                self._dead.discard(id(head))
                continue
            self._count -= 1
            if self._index is not None:
                self._unindex(head)
            event: WatchEvent[Any] = head
            return event
        return None

    def _unindex(self, event: WatchEvent[Any]) -> None:
        if isinstance(event, (ConnectivityChanged, ResponseRejected)):
            key = event_key(event)
            if self._others.get(key) is event:
                del self._others[key]
            return
        assert self._index is not None
        sub = self._index.get(event.type_url)
        if sub is not None and sub.get(event.name) is event:
            del sub[event.name]

    def __len__(self) -> int:
        with self._lock:
            return self._count + len(self._ready)

    def close(self) -> None:
        """No more events; waiters wake up. Pending events can still be popped."""
        with self._lock:
            self.closed = True
            self.cond.notify_all()
        if self._wake is not None:
            self._wake()
        if self.on_drained is not None:
            self.on_drained()

    def wait(self, timeout: float | None) -> bool:
        """Block the calling thread until an event is pending or the buffer closes."""
        with self.cond:
            self._blocked += 1
            try:
                return self.cond.wait_for(
                    lambda: self._count > 0 or bool(self._ready) or self.closed, timeout
                )
            finally:
                self._blocked -= 1


_ids = itertools.count(1)


class WatchEntry(Generic[M]):
    """One watcher: what it watches and where its events go."""

    type_url: str
    names: frozenset[str] | None
    """Watched names; None for a wildcard watch (every resource of the type)."""
    buffer: EventBuffer
    callback: Callable[[WatchEvent[M]], object] | None
    id: int
    closed: bool
    has_globs: bool
    """Whether a watched name is an ``xdstp://.../*`` glob collection (TP1)."""

    def __init__(
        self,
        type_url: str,
        names: frozenset[str] | None,
        buffer: EventBuffer,
        callback: Callable[[WatchEvent[M]], object] | None = None,
    ) -> None:
        self.type_url = type_url
        self.names = names
        self.buffer = buffer
        self.callback = callback
        self.id = next(_ids)
        self.closed = False
        self.has_globs = names is not None and any(is_glob_collection(n) for n in names)

    def wants(self, name: str, aliases: Iterable[str] = ()) -> bool:
        """True when an event about ``name`` (or one of its aliases) concerns this watch."""
        if self.names is None:
            return True
        if name in self.names or any(a in self.names for a in aliases):
            return True
        return self.has_globs and glob_collection_of(name) in self.names


class WatchRegistry:
    """Watch entries by type, and subscription refcounts per name.

    :meth:`add` and :meth:`remove` report which names need (un)subscribing, so
    several watchers of one resource share one subscription and the last one
    to close ends it.
    """

    def __init__(self) -> None:
        self._entries: dict[str, list[WatchEntry[Any]]] = {}
        self._names: dict[str, Counter[str]] = {}
        self._wildcards: Counter[str] = Counter()

    def add(self, entry: WatchEntry[Any]) -> tuple[list[str], bool]:
        """Register; returns (names newly subscribed, wildcard newly subscribed)."""
        self._entries.setdefault(entry.type_url, []).append(entry)
        if entry.names is None:
            self._wildcards[entry.type_url] += 1
            return [], self._wildcards[entry.type_url] == 1
        counts = self._names.setdefault(entry.type_url, Counter())
        new = [n for n in sorted(entry.names) if counts[n] == 0]
        counts.update(entry.names)
        return new, False

    def remove(self, entry: WatchEntry[Any]) -> tuple[list[str], bool]:
        """Unregister; returns (names no longer watched, wildcard no longer watched)."""
        entries = self._entries.get(entry.type_url, [])
        if entry not in entries:
            return [], False
        entries.remove(entry)
        if entry.names is None:
            self._wildcards[entry.type_url] -= 1
            if self._wildcards[entry.type_url] == 0:
                del self._wildcards[entry.type_url]
                return [], True
            return [], False
        counts = self._names[entry.type_url]
        counts.subtract(entry.names)
        gone = sorted(n for n in entry.names if counts[n] <= 0)
        for name in gone:
            del counts[name]
        return gone, False

    def entries(self, type_url: str) -> list[WatchEntry[Any]]:
        """Live entries watching a type."""
        return list(self._entries.get(type_url, ()))

    def all_entries(self) -> list[WatchEntry[Any]]:
        """Every live entry."""
        return [e for entries in self._entries.values() for e in entries]

    def watched_names(self, type_url: str) -> set[str]:
        """Names with at least one watcher."""
        return set(self._names.get(type_url, ()))

    def has_wildcard(self, type_url: str) -> bool:
        """True when a wildcard watch of the type is open."""
        return self._wildcards[type_url] > 0

    def type_urls(self) -> set[str]:
        """Types with at least one watcher."""
        return {t for t, entries in self._entries.items() if entries}


def matches(
    event: WatchEvent[Any],
    name: str,
    version: str | None,
    predicate: Callable[[Any], bool] | None,
) -> bool:
    """True when ``event`` is an update of ``name`` meeting ``version`` and ``predicate``."""
    if not isinstance(event, ResourceUpdated) or event.name != name:
        return False
    if version is not None and event.version != version:
        return False
    return predicate is None or bool(predicate(event.resource))


RUNNING: weakref.WeakSet[Any] = weakref.WeakSet()
"""Clients whose threads or tasks run (started, not yet closed): the pytest plugin's leak check."""


def check_wait_name(name: object) -> None:
    """``wait_for`` waits for one named resource: a non-empty string."""
    if not isinstance(name, str) or not name:
        raise UsageError(
            f"wait_for needs one resource name (a non-empty str), got {name!r}; "
            "use watch() for several or every resource"
        )


# Failures that retrying the same server will not cure within a wait: nothing listens
# there, the name does not resolve, or the peer is not an xDS server.
_HOPELESS = (
    "connection refused",
    "failed to connect to all addresses",
    "dns resolution failed",
    "unimplemented",
)


def wait_stopper(
    event: WatchEvent[Any], name: str, *, answered: bool, last_server: str
) -> XdsClientError | None:
    """The error that ends a ``wait_for`` before its timeout, or None to keep waiting.

    ``answered``: the client holds resources of the type (a server has answered).
    ``last_server``: the last fallback; a failure of an earlier one moves to the next.
    """
    if isinstance(event, ResourceDoesNotExist) and event.name == name:
        # Held from before the wait or just reported: either way the server said so.
        return ResourceNotFoundError(
            f"{event.type_url} {name!r} does not exist: the server says so"
        )
    if (
        isinstance(event, ConnectivityChanged)
        and not event.connected
        and not answered
        and event.server == last_server
        and any(marker in (event.reason or "").lower() for marker in _HOPELESS)
    ):
        # A refused port or a peer that is not xDS will not turn into an answer within a
        # wait; the reason names it, where a timeout would not.
        return TransportError(f"cannot reach xDS server {event.server}: {event.reason}")
    return None


def describe_wait(
    type_url: str, name: str, version: str | None, timeout: float, last: WatchEvent[Any] | None
) -> str:
    """The message of a :class:`WaitTimeoutError` from ``wait_for``: what was last seen."""
    want = f"{type_url} {name!r}" + (f" at version {version!r}" if version is not None else "")
    if last is None:
        seen = "nothing arrived"
    elif isinstance(last, ResourceUpdated):
        seen = f"last seen version {last.version!r}"
    elif isinstance(last, ConnectivityChanged):
        state = "connected to" if last.connected else "disconnected from"
        seen = f"{state} {last.server}" + (f": {last.reason}" if last.reason else "")
    else:
        seen = f"last event {type(last).__name__}"
    return f"timed out after {timeout}s waiting for {want}: {seen}"
