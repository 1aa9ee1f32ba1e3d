"""The life of a session's streams, in one table (sans-I/O, like ``protocol/_state.py``).

A session slot (one for ADS, or one per type and server group) has a stream of its
own and, while a fallback server serves it, a second one that keeps trying the
primary (gRFC A71, the *candidate*). Each is a :class:`Stream`: a :class:`Role`, a
:class:`Phase`, and the attempt number the driver knows its stream by. A phase
changes only through :data:`TRANSITIONS`, a ``(phase, input) -> phase`` dict;
an input the table has no row for is a bug in the session and raises
:class:`StreamStateError`. Where the next stream goes after a failure, and what
watchers hear of it, is decided in one function, :func:`after_failure`.

It lives under ``client/`` rather than ``protocol/``: servers, fallback and backoff
are the client's business (a protocol core only hears ``connected``,
``disconnected`` and ``server_changed``), but it is as pure: no I/O, no clock, no
lock. The :class:`~xds_client.client._session.Session` holds the lock and feeds it.
"""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Final

from xds_client._backoff import BackoffState
from xds_client._prebuilt_dataclasses import dataclass
from xds_client.protocol import DeltaProtocol, SotwProtocol
from xds_client.transport import Request

__all__ = [
    "OPEN_PHASES",
    "TRANSITIONS",
    "Input",
    "Phase",
    "Reconnect",
    "Role",
    "Stream",
    "StreamStateError",
    "after_failure",
    "transition",
]


class StreamStateError(AssertionError):
    """The session fed a stream an input its phase has no row for (a bug, not a user error)."""


class Phase(enum.Enum):
    """Where one stream stands."""

    BACKOFF = "backoff"
    """No stream: the next opens at ``Stream.retry_at`` (None: not before it is set)."""
    OPENING = "opening"
    """Opened (the driver got ``OpenStream``); no response yet. Requests written on it
    start their does-not-exist timers (gRFC A57, as gRPC C-core and grpc-go do)."""
    LIVE = "live"
    """A response arrived: the stream works, and its backoff starts over (gRFC A57)."""
    CLOSED = "closed"
    """Closed for good: the session closed, or the stream was dropped or taken over."""


class Input(enum.Enum):
    """What can happen to a stream."""

    OPEN = "open"
    """Its backoff ran out and the session opens a stream."""
    RESPONSE = "response"
    """A response arrived on it."""
    FAILURE = "failure"
    """It failed, or the server ended it."""
    CLOSE = "close"
    """The session ends it: closing, a candidate no longer needed, or one promoted."""


class Role(enum.Enum):
    """What a stream is for (gRFC A71)."""

    PRIMARY = "primary"
    """The slot's stream, to the first server of its group."""
    FALLBACK = "fallback"
    """The slot's stream, to a later server of its group (an earlier one failed)."""
    CANDIDATE = "candidate"
    """While a fallback serves: the stream trying the primary. Nothing it hears reaches
    watchers; its first response makes it the slot's stream (role ``PRIMARY``)."""


_ALIVE = (Phase.OPENING, Phase.LIVE)

TRANSITIONS: Final[dict[tuple[Phase, Input], Phase]] = {
    (Phase.BACKOFF, Input.OPEN): Phase.OPENING,
    (Phase.OPENING, Input.RESPONSE): Phase.LIVE,
    (Phase.LIVE, Input.RESPONSE): Phase.LIVE,
    **{(phase, Input.FAILURE): Phase.BACKOFF for phase in _ALIVE},
    **{(phase, Input.CLOSE): Phase.CLOSED for phase in (Phase.BACKOFF, *_ALIVE)},
    (Phase.CLOSED, Input.CLOSE): Phase.CLOSED,
}
"""Every move a stream can make; anything else raises :class:`StreamStateError`."""

OPEN_PHASES: Final = frozenset(_ALIVE)
"""The phases in which the driver holds a stream."""


def transition(phase: Phase, given: Input) -> Phase:
    """The phase after ``given``: the table's row, or :class:`StreamStateError`."""
    try:
        return TRANSITIONS[phase, given]
    except KeyError:
        raise StreamStateError(f"a {phase.value} stream cannot take {given.value!r}") from None


@dataclass(slots=True, eq=False, kw_only=True)
class Stream:
    """One stream of a slot: its role, phase and attempt, and what it has in flight."""

    key: str
    """The driver's key for this stream (a candidate's differs from its slot's stream)."""
    role: Role
    backoff: BackoffState
    """Spaces out attempts that fail; a response resets it (gRFC A57)."""
    retry_at: float | None = None
    """In ``BACKOFF``: when to open the next stream."""
    server: int = 0
    """Position in the slot's server group of the server this stream goes to."""
    phase: Phase = Phase.BACKOFF
    open: bool = False
    """The driver holds a stream for it: the phase is one of :data:`OPEN_PHASES` (kept
    by :meth:`move`, read on every response and write confirmation)."""
    attempt: int = 0
    """The driver's attempt number of the stream now open (unique within the slot)."""
    core: SotwProtocol | DeltaProtocol | None = None
    """A candidate's own protocol core, fresh for each attempt (its cache is thrown away);
    None for the slot's stream, which speaks for the slot's core."""
    in_flight: list[Request | None] = field(default_factory=list)
    """Requests handed to the driver whose write is not confirmed yet, oldest first; None
    for an ACK/NACK, which starts no timer. Each attempt gets a new list (never cleared
    in place): ``Session.on_written`` pops it without the session lock."""
    holding: bool = False
    """Flow control: the last response's watchers have not taken its events yet, so its
    ACK (and the next read) waits until ``Session.release``."""

    def move(self, given: Input) -> Phase:
        """Apply one input through :data:`TRANSITIONS`."""
        self.phase = phase = transition(self.phase, given)
        self.open = phase in OPEN_PHASES
        return phase

    def opened(self, attempt: int) -> None:
        """Its stream is now attempt ``attempt``: nothing of the last one carries over."""
        self.move(Input.OPEN)
        self.attempt = attempt
        self.retry_at = None
        self.in_flight = []  # a new list after ``attempt``: see Session.on_written
        self.holding = False

    def ended(self, given: Input) -> None:
        """Its stream failed (``FAILURE``) or is closed (``CLOSE``): nothing is in flight."""
        self.move(given)
        self.in_flight = []  # a new list after the phase: see Session.on_written
        self.holding = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconnect:
    """What follows a stream's failure: :func:`after_failure`'s answer."""

    server: int
    """Where the slot's next stream goes (a position in its group)."""
    at_once: bool
    """Open it now, or after the backoff's next delay."""
    switch: str | None
    """``"fallback"`` or ``"retry"`` (back to the primary after every server failed), as
    ``Metrics.server_switch`` is told; None: the same server."""
    report_down: bool
    """Watchers hear ``ConnectivityChanged(False)``."""
    candidate: bool
    """A candidate stream tries the primary alongside (gRFC A71)."""


def after_failure(
    stream: Stream, was: Phase, *, servers: int, all_cached: bool, polled: bool,
    reported: bool | None,
) -> Reconnect:  # fmt: skip
    """The reconnection and fallback rules, for ``stream`` that failed in phase ``was``.

    ``servers`` is the size of the slot's group, ``all_cached`` whether every watched
    resource has a cached value to go on with, ``polled`` whether the "stream" is a
    poller's (many polls: a failed poll is a real outage), ``reported`` the
    connectivity watchers last heard (None: nothing yet).
    """
    if stream.role is Role.CANDIDATE:
        # A71: a primary not serving yet moves nothing; it is tried again, spaced out.
        return Reconnect(server=0, at_once=False, switch=None, report_down=False, candidate=True)
    if was is Phase.LIVE:
        # A57: a stream that worked restarts at once, and is no error to watchers.
        server, at_once, switch = stream.server, True, None
    elif stream.server + 1 < servers and not all_cached:
        # A71: a server that fails before any response is skipped at once, but only
        # when some watched resource has no cached value to go on with.
        server, at_once, switch = stream.server + 1, True, "fallback"
    else:
        server, at_once = 0, False
        switch = "retry" if stream.server != 0 else None
    return Reconnect(
        server=server, at_once=at_once, switch=switch,
        report_down=reported is not False and (was is not Phase.LIVE or polled),
        candidate=server != 0,
    )  # fmt: skip
