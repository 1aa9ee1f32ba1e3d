"""Sans-I/O state of a resumable watch, shared by the sync and async clients.

The state decides what the driver does next (anchor, list, watch), builds
each watch request from what it has seen, turns wire events into
:class:`StoreWatchEvent` values, drops repeats (resource version not newer than
the last one seen) and, after a 410, reconciles a fresh list against what
the consumer has seen so its view converges.

Steps of a driver::

    ANCHOR   learn the current resource version (a one-item list) when the
             watch starts "from now", so a drop before the first event loses nothing
    LIST     list every page, feed items to list_item(), then list_done(rv)
    WATCH    open a stream with watch_request(), feed events to on_event(),
             and call stream_ended(error) when it ends; sleep the returned delay

The state remembers every object's version and bytes (needed to report
deletions after a relist). Without a label selector it records events and
decodes their JSON only when it needs the keys, so a plain watch pays no JSON
work per event.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping, MutableMapping
from enum import Enum
from types import MappingProxyType
from typing import Any, Literal

from xds_client.store._errors import (
    ExpiredError,
    InvalidResponseError,
    ResourceStoreError,
    from_status_json,
)
from xds_client.store._keys import _UNSET, ResourceKey, StoredObject, key_from_doc, labels_of
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._retry import RetryPolicy, retryable_stream
from xds_client.store._selector import Requirement, fields_match, matches

__all__ = ["StoreWatchEvent", "EventType", "WatchState", "Step"]

EventType = Literal["added", "modified", "deleted", "bookmark", "resynced"]

ADDED: EventType = "added"
MODIFIED: EventType = "modified"
DELETED: EventType = "deleted"
BOOKMARK: EventType = "bookmark"
RESYNCED: EventType = "resynced"

_ADDED, _MODIFIED, _DELETED, _BOOKMARK, _ERROR = (
    pb.WatchEvent.ADDED,
    pb.WatchEvent.MODIFIED,
    pb.WatchEvent.DELETED,
    pb.WatchEvent.BOOKMARK,
    pb.WatchEvent.ERROR,
)


class StoreWatchEvent:
    """One change seen by a watch; an immutable value.

    ``type`` is ``"added"``, ``"modified"``, ``"deleted"``, ``"bookmark"`` or
    ``"resynced"``. A deleted event carries the object in ``previous`` and no
    ``value``; bookmark and resynced events carry neither, only a version. A
    resynced event carries the complete list in :attr:`objects`.
    """

    __slots__ = (
        "_doc",
        "_end",
        "_key",
        "_objects",
        "_prefix",
        "_previous",
        "_rv",
        "_type",
        "_value",
    )

    def __init__(
        self,
        type: EventType,
        resource_version: int,
        value: bytes | None,
        previous: bytes | None,
        prefix: ResourceKey,
        *,
        initial_events_end: bool = False,
        objects: Mapping[ResourceKey, StoredObject] | None = None,
    ) -> None:
        # Plain slots behind read-only properties: cheaper to build than a frozen
        # dataclass, which matters at thousands of events per second.
        self._type = type
        self._rv = resource_version
        self._value = value
        self._previous = previous
        self._end = initial_events_end
        self._objects = objects
        self._prefix = prefix
        self._key: ResourceKey | None = None
        self._doc: Any = _UNSET

    @property
    def type(self) -> EventType:
        """What happened."""
        return self._type

    @property
    def resource_version(self) -> int:
        """The version of this change (for bookmarks: how far the stream got)."""
        return self._rv

    @property
    def value(self) -> bytes | None:
        """The object after the change (None for deleted, bookmark and resynced)."""
        return self._value

    @property
    def previous(self) -> bytes | None:
        """The object before the change when known; the removed object for deletions."""
        return self._previous

    @property
    def initial_events_end(self) -> bool:
        """True on the bookmark that ends the initial events (``send_initial_events``)."""
        return self._end

    @property
    def objects(self) -> Mapping[ResourceKey, StoredObject] | None:
        """On ``resynced``: every object the watch selects at ``resource_version``, by key.

        The complete list the watch resynchronised from (read-only). A consumer
        that keeps a view replaces it with this mapping: that also drops objects
        deleted during the gap that the watch never knew of (it cannot report
        them as ``deleted``). None on every other event.
        """
        return self._objects

    def json(self) -> Any:
        """The decoded object: ``value``, or ``previous`` for deletions (cached)."""
        doc = self._doc
        if doc is _UNSET:
            raw = self.value if self.value is not None else self.previous
            doc = self._doc = json.loads(raw) if raw else None
        return doc

    def previous_json(self) -> Any:
        """The decoded ``previous`` object, or None."""
        return json.loads(self.previous) if self.previous else None

    @property
    def key(self) -> ResourceKey | None:
        """The object's key (from its ``metadata``); None for bookmark and resynced."""
        key = self._key
        if key is None and self.type not in (BOOKMARK, RESYNCED):
            key = self._key = key_from_doc(self._prefix, self.json())
        return key

    def __repr__(self) -> str:
        key = f" {self.key}" if self.key is not None else ""
        return f"StoreWatchEvent({self.type}{key} @{self.resource_version})"


class DeletedWithoutObjectError(InvalidResponseError):
    """A DELETED event carried neither the object nor ``previous``: the key is unknown.

    The watch does not guess: it lists again, which reports the deletion.
    """


def server_behind(error: BaseException | None) -> bool:
    """Whether the server says our version is ahead of it (restored from a backup)."""
    if not isinstance(error, ResourceStoreError):
        return False
    if any(c.reason == "ResourceVersionTooLarge" for c in error.causes):
        return True
    return "too large resource version" in error.message.lower()


def needs_relist(error: BaseException | None) -> bool:
    """Whether a failed stream means our view is stale and only a fresh list repairs it.

    410 Expired (our version is older than the kept history), Kubernetes'
    "Too large resource version" (the server is behind us, e.g. restored from a
    backup), and a deletion we cannot place.
    """
    if isinstance(error, ExpiredError | DeletedWithoutObjectError):
        return True
    return server_behind(error)


class Step(Enum):
    """What the driver must do next."""

    ANCHOR = "anchor"
    LIST = "list"
    WATCH = "watch"


_FOLD_AT = 16384


class WatchState:
    """Everything a resumable watch decides, without any I/O."""

    def __init__(
        self,
        prefix: ResourceKey,
        requirements: tuple[Requirement, ...],
        *,
        since: int = 0,
        initial: Literal["none", "server", "list"] = "none",
        policy: RetryPolicy,
        known: Iterable[StoredObject] = (),
        fields: tuple[Requirement, ...] = (),
        store: MutableMapping[ResourceKey, StoredObject] | None = None,
    ) -> None:
        self.prefix = prefix.prefix()
        self.requirements = requirements
        self.fields = fields
        """Field requirements (``metadata.name=a``), applied on the client like labels."""
        self._filtered = bool(requirements or fields)
        self.policy = policy
        self.last_rv = since
        """The newest resource version seen; the next stream resumes after it."""
        if initial == "list":
            self.step = Step.LIST
        elif initial == "server":
            self.step = Step.WATCH
        else:
            self.step = Step.WATCH if since > 0 else Step.ANCHOR
        self.initial_pending = initial != "none"
        """True until the initial state has been delivered."""
        self.in_initial = initial == "server"
        self.resyncing = False
        self.failures = 0
        """Consecutive failed streams without progress (drives the backoff)."""
        self.streams = 0
        """How many streams were opened."""
        self.resyncs = 0
        """How many times a 410 forced a relist."""
        self.pending: deque[StoreWatchEvent] = deque()
        """Events to hand out before reading more from the wire."""
        self._progress = False
        # What the consumer holds, by key. With ``store`` (an informer's dict) the
        # consumer keeps it current by applying every event this state emits, and
        # the state only reads it: one dict and one object per resource, not two.
        self._external = store is not None
        self._known: MutableMapping[ResourceKey, StoredObject] = {} if store is None else store
        # What the consumer already holds (e.g. the list that gave ``since``): a
        # relist after a 410 then also reports deletions of those objects.
        for obj in known:
            self._known[self._key_of(obj.json())] = obj
        self._unfolded: list[StoreWatchEvent] = []
        self._seen: set[ResourceKey] | None = None
        self._reconciling = False
        """Between the start and the end of a reconcile (a list or the initial events)."""
        self._list_after_anchor = False
        """A relist with a field selector learns the store's version first (see stream_ended)."""
        self._rewind = False
        """The server is behind our version: the next list's version replaces ours."""

    # ------------------------------------------------------------ requests

    def watch_request(self) -> pb.WatchRequest:
        """The request of the next stream, rebuilt from what was seen so far."""
        opts = pb.ListOptions(
            key=self.prefix.to_proto(),
            labels=[r.to_proto() for r in self.requirements],
            fields=[r.to_proto() for r in self.fields],
        )
        if self.in_initial:
            return pb.WatchRequest(
                options=opts, send_initial_events=True, allow_watch_bookmarks=True
            )
        return pb.WatchRequest(since=self.last_rv, options=opts, allow_watch_bookmarks=True)

    def stream_opened(self) -> None:
        """A new stream was opened with :meth:`watch_request`."""
        self.streams += 1
        self._progress = False
        if self.in_initial:
            self._begin_reconcile()

    def anchored(self, resource_version: int) -> None:
        """The driver learned the current resource version (step ANCHOR)."""
        self.last_rv = resource_version if self._rewind else max(self.last_rv, resource_version)
        self._rewind = False  # the list that follows moves on from the store's version
        self.step = Step.LIST if self._list_after_anchor else Step.WATCH
        self._list_after_anchor = False

    # ------------------------------------------------------------ events

    def on_event(self, event: pb.WatchEvent) -> StoreWatchEvent | None:
        """Turn a wire event into a consumer event, or None to skip it.

        Extra events (e.g. the deletions that end a reconcile) go to
        :attr:`pending`. An ERROR event raises the typed error.
        """
        etype = event.type
        if etype == _BOOKMARK:
            return self._bookmark(event.resource.version)
        if etype == _ERROR:
            raise from_status_json(event.resource.value)
        res = event.resource
        rv = res.version
        if self.in_initial:
            if etype == _ADDED:
                self._progress = True
                return self._reconcile_item(rv, res.value)
            # A server that mixes live events into the initial ones: end the
            # initial phase here, as a bookmark at the previous version would.
            self._end_initial(self.last_rv)
        if rv <= self.last_rv:
            return None  # a repeat after resuming
        if etype == _DELETED and not res.value and not event.previous.value:
            raise DeletedWithoutObjectError(
                f"the server sent a DELETED event at version {rv} without the object"
            )
        self.last_rv = rv
        self._progress = True
        reqs = self._filtered
        # Each access to a sub-message or bytes field allocates: read each once.
        prev = event.previous.value or None if event.HasField("previous") else None
        if etype == _DELETED:
            removed = prev if prev is not None else res.value
            if reqs:
                return self._selected_delete(rv, removed)
            out = StoreWatchEvent(DELETED, rv, None, removed, self.prefix)
        else:
            if reqs:
                return self._selected_change(rv, res.value, prev)
            out = StoreWatchEvent(
                MODIFIED if etype == _MODIFIED else ADDED, rv, res.value, prev, self.prefix
            )
        if not self._external:
            unfolded = self._unfolded
            unfolded.append(out)
            if len(unfolded) >= _FOLD_AT:
                self._fold()
        return out

    def _bookmark(self, rv: int) -> StoreWatchEvent | None:
        if self.in_initial:
            self._progress = True
            self._end_initial(rv)
            return None
        if rv <= self.last_rv:
            return None
        self.last_rv = rv
        self._progress = True
        return StoreWatchEvent(BOOKMARK, rv, None, None, self.prefix)

    def _end_initial(self, rv: int) -> None:
        self.in_initial = False
        self.pending.extend(self._end_reconcile(rv))
        if self.initial_pending:
            self.initial_pending = False
            self.pending.append(
                StoreWatchEvent(BOOKMARK, rv, None, None, self.prefix, initial_events_end=True)
            )

    def _selected_change(self, rv: int, value: bytes, prev: bytes | None) -> StoreWatchEvent | None:
        # Label selectors see an object leave (deleted) or enter (added) the selection.
        doc = json.loads(value)
        k = self._key_of(doc)
        now = self._selects(doc)
        known = self._known.get(k)
        if known is not None and rv <= known.resource_version:
            return None  # already listed (a watch from before a relist's list)
        before = self._selects(json.loads(prev)) if prev is not None else known is not None
        if now:
            if not self._external:
                self._known[k] = StoredObject(rv, value, k)
            etype = MODIFIED if before else ADDED
            return self._keyed(StoreWatchEvent(etype, rv, value, prev, self.prefix), k, doc)
        if before:
            if not self._external:
                self._known.pop(k, None)
            old = prev if prev is not None else (known.value if known else None)
            return self._keyed(StoreWatchEvent(DELETED, rv, None, old, self.prefix), k, None)
        return None

    def _selected_delete(self, rv: int, removed: bytes) -> StoreWatchEvent | None:
        doc = json.loads(removed)
        k = self._key_of(doc)
        known = self._known.get(k) if self._external else self._known.pop(k, None)
        if known is None and not self._selects(doc):
            return None
        return self._keyed(StoreWatchEvent(DELETED, rv, None, removed, self.prefix), k, doc)

    # ------------------------------------------------------------ lists

    def list_started(self) -> None:
        """The driver starts the full list of step LIST."""
        self._begin_reconcile()

    def list_item(self, resource_version: int, value: bytes) -> StoreWatchEvent | None:
        """One listed object (already filtered by the selector or not)."""
        return self._reconcile_item(resource_version, value)

    def list_done(self, resource_version: int) -> None:
        """The list is complete at ``resource_version``; events go to :attr:`pending`."""
        self.pending.extend(self._end_reconcile(resource_version))
        # Never backwards (unless the server said it is behind us): Grafana's
        # ``metadata.name`` shortcut answers a list at the object's version, which
        # may be older than where the watch was.
        if self._rewind:
            self._rewind = False
            self.last_rv = resource_version
        else:
            self.last_rv = max(self.last_rv, resource_version)
        if self.resyncing:
            self.resyncing = False
            self.pending.append(
                StoreWatchEvent(
                    RESYNCED, self.last_rv, None, None, self.prefix, objects=self._complete()
                )
            )
        elif self.initial_pending:
            self.initial_pending = False
            self.pending.append(
                StoreWatchEvent(
                    BOOKMARK, self.last_rv, None, None, self.prefix, initial_events_end=True
                )
            )
        # The failure count stays: only a stream that makes progress resets it, so
        # a list followed by the same failure waits longer each time.
        self.step = Step.WATCH

    def _complete(self) -> Mapping[ResourceKey, StoredObject]:
        # The informer's dict is current once it applied the events before this
        # one: hand out a view of it. A plain watch's own record is copied.
        if self._external:
            return MappingProxyType(self._known)
        self._fold()
        return MappingProxyType(dict(self._known))

    # ------------------------------------------------------------ failures

    def stream_ended(self, error: BaseException | None) -> float:
        """A stream ended (``error`` None: cleanly). Returns the delay before the next step.

        Raises ``error`` when it is not worth retrying.
        """
        if self._progress:
            self.failures = 0
        self._progress = False
        if needs_relist(error):
            # Our version is older than the server's history (or newer than the
            # server's, or an event cannot be placed): list again.
            self.resyncs += 1
            self.resyncing = True
            self.in_initial = False
            self.step = Step.LIST
            self._rewind = server_behind(error)
            if self.fields:
                # Grafana answers a ``metadata.name`` list at the object's version,
                # not the store's: a watch from there is 410 again. Learn the store's
                # version first (a list without the field selector); changes between
                # that and the list come again and are dropped by version.
                self.step = Step.ANCHOR
                self._list_after_anchor = True
            self.failures += 1
            return 0.0 if self.failures == 1 else self.policy.delay_for(self.failures - 1, error)
        if error is not None and not retryable_stream(error):
            raise error
        self.failures += 1
        return self.policy.delay_for(self.failures, error)

    def relist(self) -> None:
        """Start again from a full list (the informer after any error).

        The list is reconciled against what was delivered, so the consumer sees
        the differences (deletions included) and then a ``resynced`` event.
        """
        self.in_initial = False
        self.resyncs += 1
        self.resyncing = not self.initial_pending
        self.step = Step.LIST
        self.failures = 0
        self._progress = False

    def list_failed(self, error: BaseException) -> float:
        """A list (ANCHOR or LIST step) failed; returns the delay or raises."""
        if not isinstance(error, ResourceStoreError) or not (
            retryable_stream(error) or needs_relist(error)
        ):
            raise error
        self.failures += 1
        return self.policy.delay_for(self.failures, error)

    # ------------------------------------------------------------ known objects

    def _selects(self, doc: Any) -> bool:
        return matches(self.requirements, labels_of(doc)) and fields_match(self.fields, doc)

    def _key_of(self, doc: Any) -> ResourceKey:
        return key_from_doc(self.prefix, doc)

    def _keyed(self, event: StoreWatchEvent, key: ResourceKey, doc: Any) -> StoreWatchEvent:
        event._key = key
        # An informer keeps only the bytes: a page of decoded documents would
        # outlive the key extraction for nothing. A plain watch hands out the
        # decoded document with the event, so ``json()`` does not decode again.
        if doc is not None and not self._external:
            event._doc = doc
        return event

    def _fold(self) -> None:
        known = self._known
        for ev in self._unfolded:
            k = ev.key
            if k is None:
                continue
            if ev.type == DELETED:
                known.pop(k, None)
            elif ev.value is not None:
                known[k] = StoredObject(ev.resource_version, ev.value, k)
        self._unfolded.clear()

    def _begin_reconcile(self) -> None:
        self._fold()
        # Nothing known yet (a first list): nothing can be deleted, so the keys
        # seen need not be collected (a set of every key, at the peak of the list).
        self._seen = set() if self._known else None
        self._reconciling = True

    def _reconcile_item(self, rv: int, value: bytes) -> StoreWatchEvent | None:
        doc = json.loads(value)
        if self._filtered and not self._selects(doc):
            return None
        k = self._key_of(doc)
        if self._seen is not None:
            self._seen.add(k)
        known = self._known.get(k)
        if not self._external:
            self._known[k] = StoredObject(rv, value, k)
        if known is None:
            return self._keyed(StoreWatchEvent(ADDED, rv, value, None, self.prefix), k, doc)
        if known.resource_version != rv:
            event = StoreWatchEvent(MODIFIED, rv, value, known.value, self.prefix)
            return self._keyed(event, k, doc)
        return None

    def _end_reconcile(self, rv: int) -> list[StoreWatchEvent]:
        seen, self._seen = self._seen, None
        if not self._reconciling:
            return []
        self._reconciling = False
        self.last_rv = max(self.last_rv, rv)
        if seen is None:
            return []
        gone = [k for k in self._known if k not in seen]
        out = []
        for k in gone:
            old = self._known[k] if self._external else self._known.pop(k)
            event = StoreWatchEvent(DELETED, rv, None, old.value, self.prefix)
            out.append(self._keyed(event, k, None))
        return out

    def known_count(self) -> int:
        """How many objects the state currently knows (folds pending events)."""
        self._fold()
        return len(self._known)
