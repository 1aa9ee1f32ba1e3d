"""The state table by name: :class:`Status` and :class:`Input`, and the table keyed by them.

The core (``_state.py``) moves statuses as plain ints (its ``S`` and ``I``); these
``IntEnum``\\ s name the same ints for people: ``repr``, error messages, the docs'
table, tests. They are made on first use, through ``_state``'s names
(``_state.Status``, ``_state.TRANSITIONS`` ...): the two enums cost about 3 million
instructions to make, 7% of what the client's import line adds to ``import grpc``,
and neither an import nor a running client needs them.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from ._cache import ResourceStatus
from ._state import _CACHED, _IMPLICIT, _MOVES, _ROWS, _TIMING, CSDS_SHOWN, I, S

__all__ = [
    "CACHED",
    "CSDS_STATUS",
    "EVENT_TRIGGERED",
    "IMPLICIT",
    "TIMING",
    "TRANSITIONS",
    "Input",
    "Status",
]


class Status(IntEnum):
    """Where one resource stands. CSDS shows each as :data:`CSDS_STATUS` says."""

    REQUESTED = S.REQUESTED
    """Wanted, nothing known about it, no timer running (implicit: not cached, not stored)."""
    TIMING = S.TIMING
    """Requested on a connected stream; its does-not-exist timer runs."""
    DOES_NOT_EXIST = S.DOES_NOT_EXIST
    """The timer fired, or the server said it has no such resource."""
    TIMEOUT = S.TIMEOUT
    """The timer fired and the server's ``resource_timer_is_transient_error`` (A88) says: late."""
    TIMEOUT_TIMING = S.TIMEOUT_TIMING
    """``TIMEOUT``, requested again on a new stream: its timer runs again."""
    NACKED = S.NACKED
    """The last update of it was rejected and nothing is cached."""
    NACKED_TIMING = S.NACKED_TIMING
    """``NACKED``, requested again on a new stream: its timer runs (nothing cached)."""
    RECEIVED_ERROR = S.RECEIVED_ERROR
    """The server reported an error for it (TP3) and nothing is cached."""
    RECEIVED_ERROR_TIMING = S.RECEIVED_ERROR_TIMING
    """``RECEIVED_ERROR``, requested again on a new stream: its timer runs."""
    ACKED = S.ACKED
    """Cached, and the last update of it accepted (implicit: cached, not stored)."""
    CACHED_NACKED = S.CACHED_NACKED
    """Cached, but the last update of it was rejected; the cached value stays in use."""
    CACHED_ERROR = S.CACHED_ERROR
    """Cached, but the server reported an error for it (TP3); the cached value stays in use."""
    DELETION_IGNORED = S.DELETION_IGNORED
    """Cached; the server deleted it, but ``ignore_resource_deletion`` (A53) keeps it."""


class Input(IntEnum):
    """What can happen to one resource."""

    SUBSCRIBED = I.SUBSCRIBED
    """Subscribed by name (it may have been held through the wildcard)."""
    REQUEST_SENT = I.REQUEST_SENT
    """The first request naming it on this stream went out on a connected stream, timer on."""
    VALID_UPDATE = I.VALID_UPDATE
    """New bytes arrived and were accepted (also for a subscribed alias of the resource)."""
    SAME_BYTES = I.SAME_BYTES
    """The cached bytes again, or a heartbeat: accepted, nothing changed."""
    INVALID_UPDATE = I.INVALID_UPDATE
    """An update of it was rejected (NACK); any cached value is kept."""
    DATA_ERROR_DROP = I.DATA_ERROR_DROP
    """An update of a cached one was rejected and ``fail_on_data_errors`` (A88) drops the value."""
    REMOVED = I.REMOVED
    """The server says it has no such resource (delta removal, left out of full-state SotW,
    TP3 ``NOT_FOUND``, a delta body-less resource we do not hold) and it is wanted by name."""
    REMOVED_UNNAMED = I.REMOVED_UNNAMED
    """Same, for a resource wanted only through the wildcard (or a glob): it is forgotten."""
    REMOVAL_IGNORED = I.REMOVAL_IGNORED
    """The server deleted a cached one and ``ignore_resource_deletion`` (A53) keeps it."""
    ERROR_REPORTED = I.ERROR_REPORTED
    """The server reported a transient error for it (TP3: UNAVAILABLE, INTERNAL, ...)."""
    TIMER_FIRED = I.TIMER_FIRED
    """Its does-not-exist timer fired."""
    TIMER_FIRED_TRANSIENT = I.TIMER_FIRED_TRANSIENT
    """Its timer fired and the server has ``resource_timer_is_transient_error`` (A88)."""
    TTL_EXPIRED = I.TTL_EXPIRED
    """The cached value's TTL ran out: it is forgotten."""
    STREAM_FAILED = I.STREAM_FAILED
    """The stream ended while its timer ran."""
    SERVER_CHANGED = I.SERVER_CHANGED
    """The next stream goes to another server (A71 keeps the cache: nothing moves)."""
    UNNAMED = I.UNNAMED
    """Unsubscribed by name, but still wanted (the wildcard or a glob covers it)."""
    UNWANTED = I.UNWANTED
    """No longer wanted at all: any cached value is forgotten."""
    RESTORED = I.RESTORED
    """A value persisted earlier was put in the cache (``restore``)."""


TIMING: Final = frozenset(map(Status, _TIMING))
"""Statuses in which the does-not-exist timer runs (and only these)."""
CACHED: Final = frozenset(map(Status, _CACHED))
"""Statuses of a resource the cache holds (and only these)."""
IMPLICIT: Final = frozenset(map(Status, _IMPLICIT))
"""Statuses never stored: absent means ACKED when cached, REQUESTED otherwise."""

CSDS_STATUS: Final[dict[Status, ResourceStatus]] = {
    Status(status): shown for status, shown in CSDS_SHOWN.items()
}
"""What CSDS (``ClientResourceStatus``) shows for each status."""

EVENT_TRIGGERED: Final[dict[Status, dict[Input, Status]]] = {
    Status(status): {Input(given): Status(target) for given, target in row.items()}
    for status, row in _ROWS.items()
}
"""The table by status, as written in ``_state.py``; pairs left out cannot happen."""

TRANSITIONS: Final[dict[tuple[Status, Input], Status]] = {
    (Status(status), Input(given)): Status(target) for (status, given), target in _MOVES.items()
}
"""``(status, input) -> status``: the only thing that moves a resource's status."""
