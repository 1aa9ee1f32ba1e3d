"""Watcher bookkeeping shared by both clients: events, coalescing buffers, refcounts.

Nothing here blocks or knows about threads versus asyncio: a buffer calls a
``wake`` function the driver gives it, and the driver decides how to wait.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar, Union

from google.protobuf.message import Message

from xds_client.federation import glob_collection_of, is_glob_collection
from xds_client.protocol._events import (
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceErrorReported,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)

__all__ = [
    "ConnectivityChanged",
    "EventBuffer",
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


class EventBuffer:
    """A FIFO of events, bounded by coalescing.

    Up to ``maxsize`` events queue as they come. Past that, pending events are
    folded to the latest one per key (resource name, NACK, connectivity), so
    memory is bounded by the number of distinct resources and the latest state
    of each one is never lost. ``wake`` is called after each put and on close.
    """

    def __init__(self, maxsize: int, wake: Callable[[], None] | None = None) -> None:
        self.maxsize = maxsize
        self._events: deque[WatchEvent[Any]] = deque()
        # Events the consumer took in one go (one lock for a whole batch): older than
        # every event in ``_events``, popped first, without the lock.
        self._taken: deque[WatchEvent[Any]] = deque()
        # Past maxsize the buffer switches to one slot per key (O(1) per put) until drained.
        self._latest: OrderedDict[Hashable, WatchEvent[Any]] | None = None
        # A plain lock under the condition: ``with self._lock`` is entered in C, where
        # ``with self.cond`` goes through Python-level __enter__/__exit__ (per event popped).
        self._lock = threading.Lock()
        self.cond = threading.Condition(self._lock)
        self._wake = wake
        self.closed = False
        self.coalesced = 0
        """How many events were dropped in favour of a later one (for tests and metrics)."""
        self.on_drained: Callable[[], None] | None = None
        """Called when a pop takes the last pending event, and on close (flow control)."""

    def set_wake(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` after every put and on close (set before events flow)."""
        self._wake = wake

    def put(self, event: WatchEvent[Any]) -> None:
        """Queue one event (coalescing past ``maxsize``) and wake the consumer."""
        self.put_many((event,))

    def put_many(self, events: Iterable[WatchEvent[Any]]) -> None:
        """Queue events in order under one lock, with a single wake-up."""
        with self._lock:
            if self.closed:
                return
            queued = self._events
            batch = events if isinstance(events, (list, tuple)) else list(events)
            if self._latest is None:
                room = max(self.maxsize - len(queued) - len(self._taken), 0)
                queued.extend(batch[:room])  # the common case: one C call for the batch
                batch = batch[room:] if len(batch) > room else ()
            for event in batch:
                latest = self._latest
                if latest is not None:
                    if type(event) is ResourceUpdated:  # event_key() inlined
                        key: Hashable = ("resource", event.type_url, event.name)
                    else:
                        key = event_key(event)
                    if latest.pop(key, None) is not None:
                        self.coalesced += 1
                    latest[key] = event  # at the end: keep the order of latest changes
                else:
                    queued.append(event)
                    if len(queued) + len(self._taken) > self.maxsize:
                        self._coalesce()
            self.cond.notify_all()
        if self._wake is not None:
            self._wake()

    def _coalesce(self) -> None:
        latest: OrderedDict[Hashable, WatchEvent[Any]] = OrderedDict()
        taken = self._taken
        older: list[WatchEvent[Any]] = []
        while taken:  # popleft, not iteration: the consumer may pop them meanwhile
            try:
                older.append(taken.popleft())
            except IndexError:
                break
        for event in itertools.chain(older, self._events):
            key = event_key(event)
            if latest.pop(key, None) is not None:
                self.coalesced += 1
            latest[key] = event
        self._events.clear()
        self._latest = latest

    def pop(self) -> WatchEvent[Any] | None:
        """The oldest pending event, or None.

        The first pop after a put takes every queued event under one lock; the
        next ones are served from them without it (cheap per event). Taking the
        last pending event calls :attr:`on_drained` (flow control), if set.
        """
        taken = self._taken
        if taken:
            try:
                event = taken.popleft()
            except IndexError:  # another consumer thread took the last one
                pass
            else:
                if not taken and self.on_drained is not None:
                    self._drained()
                return event
        with self._lock:
            if self._taken:
                event = self._taken.popleft()
            elif self._events:
                # Swap the queues: the consumer now owns every queued event.
                self._taken, self._events = self._events, self._taken
                event = self._taken.popleft()
            elif self._latest:
                event = self._latest.popitem(last=False)[1]
                if not self._latest:
                    self._latest = None  # drained: back to plain FIFO
            else:
                return None
            drained = self.on_drained is not None and not (
                self._taken or self._events or self._latest
            )
        if drained and self.on_drained is not None:
            self.on_drained()
        return event

    def _drained(self) -> None:
        with self._lock:
            empty = not (self._taken or self._events or self._latest)
        if empty and self.on_drained is not None:
            self.on_drained()

    def __len__(self) -> int:
        with self._lock:
            pending = len(self._taken) + len(self._events)
            return pending + (len(self._latest) if self._latest is not None else 0)

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
            return self.cond.wait_for(
                lambda: bool(self._taken or self._events or self._latest) or self.closed, timeout
            )


_ids = itertools.count(1)


@dataclass(eq=False)
class WatchEntry(Generic[M]):
    """One watcher: what it watches and where its events go."""

    type_url: str
    names: frozenset[str] | None
    """Watched names; None for a wildcard watch (every resource of the type)."""
    buffer: EventBuffer
    callback: Callable[[WatchEvent[M]], object] | None = None
    id: int = field(default_factory=lambda: next(_ids))
    closed: bool = False
    has_globs: bool = field(init=False, default=False)
    """Whether a watched name is an ``xdstp://.../*`` glob collection (TP1)."""

    def __post_init__(self) -> None:
        if self.names is not None:
            self.has_globs = any(is_glob_collection(n) for n in self.names)

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


def describe_wait(
    type_url: str, name: str, version: str | None, timeout: float, last: WatchEvent[Any] | None
) -> str:
    """The message of a :class:`WaitTimeoutError` from ``wait_for``: what was last seen."""
    want = f"{type_url} {name!r}" + (f" at version {version!r}" if version is not None else "")
    if last is None:
        seen = "nothing arrived"
    elif isinstance(last, ResourceUpdated):
        seen = f"last seen version {last.version!r}"
    else:
        seen = f"last event {type(last).__name__}"
    return f"timed out after {timeout}s waiting for {want}: {seen}"
