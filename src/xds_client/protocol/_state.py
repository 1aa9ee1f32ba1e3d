"""The one table of per-resource states: everything that moves a resource's status.

In the manner of h11's ``_state.py``: a resource's status changes only through
:data:`TRANSITIONS`, a ``(status, input) -> status`` dict, applied by
:meth:`ResourceStates.fire`. An input the table has no entry for, for the
status the resource is in, is a bug in the core and raises
:class:`InternalStateError`; an input that changes nothing is in the table as a
no-op. The does-not-exist timer follows the status: entering a *timing*
status arms it, leaving one cancels it, so gRFC A57's rules (start on the
completed send, cancel on any arrival of the name, valid or NACKed, and on
stream failure, restart on the next stream only for names with nothing cached)
are rows of the table, not code spread over the protocol.

Two statuses are implicit, to keep the hot path free: a name absent from
:attr:`ResourceStates.status` is ``ACKED`` when the cache holds it and
``REQUESTED`` otherwise. A large response of new, valid resources therefore
writes nothing here (their rows for ``VALID_UPDATE`` lead to ``ACKED``, which is
"absent"), and a cached resource costs no second per-name object. Whoever
fires an input that empties or fills the cache fires it *before* changing the
cache, so the implicit status read is the one the resource had.

What is not per-resource stays where it was: the subscription (``Subscription``),
the cached values and their TTL timers (``TypeCache``; a TTL belongs to the
value), and which names this stream has already requested (one
``REQUEST_SENT`` per name per stream).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Final

from xds_client._prebuilt_dataclasses import dataclass

from ._cache import ResourceStatus
from ._timers import DeadlineQueue

__all__ = [
    "CACHED",
    "DNE_TIMER",
    "EVENT_TRIGGERED",
    "CSDS_SHOWN",
    "CSDS_STATUS",
    "IMPLICIT",
    "I",
    "TIMING",
    "TRANSITIONS",
    "broken_invariants",
    "Detail",
    "Input",
    "InternalStateError",
    "ResourceStates",
    "S",
    "Status",
    "transitions_markdown",
]


class InternalStateError(AssertionError):
    """The core fed a resource an input its status has no row for (a bug, not a user error)."""


class S:
    """The statuses as the core moves them: plain ints, the values of :class:`Status`
    (the ``IntEnum`` that names them for people: ``repr``, errors, the docs' table)."""

    __slots__ = ()
    REQUESTED: Final = 0
    TIMING: Final = 1
    DOES_NOT_EXIST: Final = 2
    TIMEOUT: Final = 3
    TIMEOUT_TIMING: Final = 4
    NACKED: Final = 5
    NACKED_TIMING: Final = 6
    RECEIVED_ERROR: Final = 7
    RECEIVED_ERROR_TIMING: Final = 8
    ACKED: Final = 9
    CACHED_NACKED: Final = 10
    CACHED_ERROR: Final = 11
    DELETION_IGNORED: Final = 12


class I:  # noqa: E742 - short, like h11's tables
    """The inputs as the core fires them: plain ints, the values of :class:`Input`."""

    __slots__ = ()
    SUBSCRIBED: Final = 0
    REQUEST_SENT: Final = 1
    VALID_UPDATE: Final = 2
    SAME_BYTES: Final = 3
    INVALID_UPDATE: Final = 4
    DATA_ERROR_DROP: Final = 5
    REMOVED: Final = 6
    REMOVED_UNNAMED: Final = 7
    REMOVAL_IGNORED: Final = 8
    ERROR_REPORTED: Final = 9
    TIMER_FIRED: Final = 10
    TIMER_FIRED_TRANSIENT: Final = 11
    TTL_EXPIRED: Final = 12
    STREAM_FAILED: Final = 13
    SERVER_CHANGED: Final = 14
    UNNAMED: Final = 15
    UNWANTED: Final = 16
    RESTORED: Final = 17


DNE_TIMER: Final = "dne"
"""Kind of the does-not-exist timer keys ``(DNE_TIMER, type_url, name)`` in the core's queue."""

_TIMING: Final = frozenset({S.TIMING, S.TIMEOUT_TIMING, S.NACKED_TIMING, S.RECEIVED_ERROR_TIMING})
"""Statuses in which the does-not-exist timer runs (and only these)."""
_CACHED: Final = frozenset({S.ACKED, S.CACHED_NACKED, S.CACHED_ERROR, S.DELETION_IGNORED})
"""Statuses of a resource the cache holds (and only these)."""
_IMPLICIT: Final = frozenset({S.REQUESTED, S.ACKED})
"""Statuses never stored: absent means ACKED when cached, REQUESTED otherwise."""

CSDS_SHOWN: Final[dict[int, ResourceStatus]] = {
    S.REQUESTED: "REQUESTED",
    S.TIMING: "REQUESTED",
    S.DOES_NOT_EXIST: "DOES_NOT_EXIST",
    S.TIMEOUT: "TIMEOUT",
    S.TIMEOUT_TIMING: "TIMEOUT",
    S.NACKED: "NACKED",
    S.NACKED_TIMING: "NACKED",
    S.RECEIVED_ERROR: "RECEIVED_ERROR",
    S.RECEIVED_ERROR_TIMING: "RECEIVED_ERROR",
    S.ACKED: "ACKED",
    S.CACHED_NACKED: "NACKED",
    S.CACHED_ERROR: "RECEIVED_ERROR",
    S.DELETION_IGNORED: "ACKED",
}
"""What CSDS (``ClientResourceStatus``) shows for each status (:data:`CSDS_STATUS` by name)."""

# Rows every status without a cached value shares; a status overrides some below.
_UNCACHED: Final[dict[int, int]] = {
    I.VALID_UPDATE: S.ACKED,
    I.INVALID_UPDATE: S.NACKED,
    I.REMOVED: S.DOES_NOT_EXIST,
    I.ERROR_REPORTED: S.RECEIVED_ERROR,
    I.UNNAMED: S.REQUESTED,
    I.UNWANTED: S.REQUESTED,
    I.RESTORED: S.ACKED,
}
# A timer running: it fires, or the stream fails (the next stream restarts it).
_TIMER: Final[dict[int, int]] = {
    I.TIMER_FIRED: S.DOES_NOT_EXIST,
    I.TIMER_FIRED_TRANSIENT: S.TIMEOUT,
}
# Rows every cached status shares.
_HELD: Final[dict[int, int]] = {
    I.SUBSCRIBED: S.ACKED,
    I.REQUEST_SENT: S.ACKED,
    I.VALID_UPDATE: S.ACKED,
    I.SAME_BYTES: S.ACKED,
    I.INVALID_UPDATE: S.CACHED_NACKED,
    I.DATA_ERROR_DROP: S.NACKED,
    I.REMOVED: S.DOES_NOT_EXIST,
    I.REMOVED_UNNAMED: S.REQUESTED,
    I.REMOVAL_IGNORED: S.DELETION_IGNORED,
    I.ERROR_REPORTED: S.CACHED_ERROR,
    I.TTL_EXPIRED: S.REQUESTED,
    I.SERVER_CHANGED: S.ACKED,
    I.UNNAMED: S.ACKED,
    I.UNWANTED: S.REQUESTED,
}


def _same(status: int, *inputs: int) -> dict[int, int]:
    return dict.fromkeys(inputs, status)


_ROWS: Final[dict[int, dict[int, int]]] = {
    S.REQUESTED: {
        **_UNCACHED,
        **_same(S.REQUESTED, I.SUBSCRIBED, I.REMOVED_UNNAMED, I.SERVER_CHANGED),
        I.REQUEST_SENT: S.TIMING,
    },
    S.TIMING: {
        **_UNCACHED,
        **_TIMER,
        I.STREAM_FAILED: S.REQUESTED,
    },
    S.DOES_NOT_EXIST: {
        **_UNCACHED,
        **_same(S.DOES_NOT_EXIST, I.REQUEST_SENT, I.REMOVED, I.SERVER_CHANGED),
    },
    S.TIMEOUT: {
        **_UNCACHED,
        **_same(S.TIMEOUT, I.SERVER_CHANGED),
        I.REQUEST_SENT: S.TIMEOUT_TIMING,
    },
    S.TIMEOUT_TIMING: {
        **_UNCACHED,
        I.TIMER_FIRED_TRANSIENT: S.TIMEOUT,
        I.STREAM_FAILED: S.TIMEOUT,
    },
    S.NACKED: {
        **_UNCACHED,
        **_same(S.NACKED, I.SUBSCRIBED, I.SERVER_CHANGED, I.UNNAMED),
        I.REQUEST_SENT: S.NACKED_TIMING,
        I.REMOVED_UNNAMED: S.REQUESTED,
        I.RESTORED: S.CACHED_NACKED,
    },
    S.NACKED_TIMING: {
        **_UNCACHED,
        **_TIMER,
        I.STREAM_FAILED: S.NACKED,
        I.UNNAMED: S.NACKED,
        I.RESTORED: S.CACHED_NACKED,
    },
    S.RECEIVED_ERROR: {
        **_UNCACHED,
        **_same(S.RECEIVED_ERROR, I.SUBSCRIBED, I.SERVER_CHANGED),
        I.REQUEST_SENT: S.RECEIVED_ERROR_TIMING,
        I.REMOVED_UNNAMED: S.REQUESTED,
        I.RESTORED: S.CACHED_ERROR,
    },
    S.RECEIVED_ERROR_TIMING: {
        **_UNCACHED,
        **_TIMER,
        I.STREAM_FAILED: S.RECEIVED_ERROR,
        I.RESTORED: S.CACHED_ERROR,
    },
    S.ACKED: dict(_HELD),
    S.CACHED_NACKED: {
        **_HELD,
        **_same(S.CACHED_NACKED, I.SUBSCRIBED, I.REQUEST_SENT, I.SERVER_CHANGED, I.UNNAMED),
    },
    S.CACHED_ERROR: {
        **_HELD,
        **_same(S.CACHED_ERROR, I.SUBSCRIBED, I.REQUEST_SENT, I.SERVER_CHANGED),
    },
    S.DELETION_IGNORED: {
        **{i: s for i, s in _HELD.items() if i not in (I.REMOVED, I.REMOVED_UNNAMED)},
        **_same(S.DELETION_IGNORED, I.SUBSCRIBED, I.REQUEST_SENT, I.SERVER_CHANGED, I.UNNAMED),
        I.REMOVAL_IGNORED: S.DELETION_IGNORED,
    },
}
"""The table by status, as written (:data:`EVENT_TRIGGERED` by name); pairs left out
cannot happen (see :data:`TRANSITIONS`).

Left out on purpose: a timer input for a status without a timer, ``STREAM_FAILED``
without one (only timing names are told), ``SAME_BYTES``, ``TTL_EXPIRED``,
``DATA_ERROR_DROP`` and ``REMOVAL_IGNORED`` for what is not cached, ``RESTORED``
for what is (restore skips cached names), ``REQUEST_SENT`` while the timer runs
(one per name per stream), ``SUBSCRIBED``/``REMOVED_UNNAMED`` for statuses only a
name subscribed by name has, ``SERVER_CHANGED`` while a timer runs (it comes
between streams), ``TIMER_FIRED`` for ``TIMEOUT_TIMING`` (only with A88's
feature), and ``REMOVED`` for ``DELETION_IGNORED`` (with A53 on, a deletion of
something cached is ``REMOVAL_IGNORED``).
"""

_MOVES: Final[dict[tuple[int, int], int]] = {
    (status, given): target for status, row in _ROWS.items() for given, target in row.items()
}
"""``(status, input) -> status``: the only thing that moves a resource's status
(:data:`TRANSITIONS` is the same table by name)."""


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


def broken_invariants(moves: dict[tuple[int, int], int]) -> list[str]:
    """What in ``moves`` breaks the invariants the rest of the core relies on: only an
    arrival fills the cache, and no input moves a timing status to a timing status.

    ``tests/protocol/test_state_table.py`` holds :data:`_MOVES` to it: the table is
    constant, so it is checked by the tests, not at import.
    """
    broken = []
    for (old, given), new in moves.items():
        pair = f"{Status(old).name} + {Input(given).name}"
        if new in _CACHED and given not in (I.VALID_UPDATE, I.RESTORED) and old not in _CACHED:
            broken.append(f"{pair}: only an arrival fills the cache")
        if old in _TIMING and new in _TIMING:
            broken.append(f"{pair}: timing to timing")
    return broken


@dataclass(slots=True)
class Detail:
    """Why a resource is in an exceptional status (CSDS ``error_state`` and timestamps)."""

    reason: str
    version: str
    at: float


class ResourceStates:
    """The status of every resource of one type: one dict of small ints, plus details.

    ``resolve`` tells whether a name is cached (by name or alias) for the two
    implicit statuses; ``timers`` is the core's deadline queue, shared by types.
    """

    __slots__ = ("_resolve", "_timeout", "_timers", "detail", "held", "status", "type_url")

    def __init__(
        self,
        type_url: str,
        resolve: Callable[[str], object | None],
        timers: DeadlineQueue[tuple[str, str, str]],
        timeout: float | None,
    ) -> None:
        self.type_url = type_url
        self._resolve = resolve
        self._timers = timers
        self._timeout = timeout
        self.status: dict[str, int] = {}
        """Every name in an explicit status; empty in the steady state of a large config."""
        self.detail: dict[str, Detail] = {}
        """Reason, version and time of the exceptional statuses."""
        self.held = 0
        """How many stored statuses are of cached resources (NACKED, error, A53): while 0,
        a same-bytes resend has nothing to clear."""

    def __bool__(self) -> bool:
        return bool(self.status)

    def code(self, name: str) -> int:
        """The status of ``name`` as the core's int (implicit ones included)."""
        stored = self.status.get(name)
        if stored is not None:
            return stored
        return S.REQUESTED if self._resolve(name) is None else S.ACKED

    def get(self, name: str) -> Status:
        """The status of ``name`` (implicit ones included), by name."""
        return Status(self.code(name))

    def fire(
        self, name: str, given: int, now: float, detail: Detail | None = None
    ) -> tuple[int, int]:
        """Apply ``given`` to ``name``; returns ``(old, new)``.

        ``detail`` replaces the stored reason (a NACK, a server error, a
        timeout); entering ``DOES_NOT_EXIST`` records ``now``. Entering a timing
        status arms the does-not-exist timer, leaving one cancels it.
        """
        old = self.code(name)
        new = _MOVES.get((old, given))
        if new is None:
            raise InternalStateError(
                f"{self.type_url} {name!r}: no transition for {Input(given).name}"
                f" in status {Status(old).name}"
            )
        if new != old:
            if new in _IMPLICIT:
                self.status.pop(name, None)
                self.detail.pop(name, None)
            else:
                self.status[name] = new
                if detail is None and new == S.DOES_NOT_EXIST:
                    detail = Detail("", "", now)
            if old in _TIMING:
                self._timers.cancel((DNE_TIMER, self.type_url, name))
            elif new in _TIMING:
                assert self._timeout is not None
                self._timers.arm((DNE_TIMER, self.type_url, name), now + self._timeout)
            self.held += (new in _CACHED and new != S.ACKED) - (old in _CACHED and old != S.ACKED)
        if detail is not None and new not in _IMPLICIT:
            self.detail[name] = detail
        return old, new

    def fire_stored(self, given: int, now: float) -> None:
        """Apply ``given`` to every stored status (for inputs whose implicit rows are no-ops)."""
        for name in list(self.status):
            self.fire(name, given, now)

    def clear(self, now: float) -> None:
        """Nothing of the type is wanted any more: every stored status is ``UNWANTED``."""
        self.fire_stored(I.UNWANTED, now)


def transitions_markdown() -> str:
    """The table as Markdown, one row per status (``docs/protocol.md`` embeds it)."""
    inputs = list(Input)
    head = "| status (CSDS) | " + " | ".join(i.name for i in inputs) + " |"
    rule = "|---|" + "---|" * len(inputs)
    rows = [head, rule]
    for status in Status:
        cells = []
        for given in inputs:
            target = TRANSITIONS.get((status, given))
            cells.append("" if target is None else ("=" if target is status else target.name))
        label = f"{status.name} ({CSDS_STATUS[status]})"
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
