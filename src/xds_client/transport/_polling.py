"""Polling that looks like a SotW stream: shared by unary ``Fetch*`` and REST-JSON.

The client's driver treats every transport as a stream: it sends the protocol
core's requests (the first subscription, then one ACK or NACK after each
response) and receives responses. A polling transport has no stream, so this
module keeps what the stream would: the latest request per type URL.

- A request whose ``resource_names`` differ from the previous one (or a new
  type) is polled right away; an ACK or NACK only replaces the stored request,
  so the next scheduled poll carries its ``version_info`` and ``error_detail``.
- Every type is polled every ``interval`` seconds, spread by ``jitter``.
- Unchanged answers produce nothing: ``None`` from the poster (REST 304, 404)
  or the same ``version_info`` for the same names as the last delivered
  response.
- Failures back off with a tenacity wait strategy; a non-retryable failure,
  ``failures_before_error`` retryable ones in a row, or any failure before the
  stream's first successful poll, fail the stream with a
  :class:`~xds_client.errors.TransportError` so the driver reconnects (and
  falls back to another server, gRFC A71).

:class:`PollScheduler` holds that state and does no I/O; :class:`PollingStream`
(threads) and :class:`AsyncPollingStream` (asyncio) are thin loops around it
that call a transport's poster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    DiscoveryResponse,
)
from tenacity import RetryCallState, Retrying, wait_random_exponential
from tenacity.wait import wait_base

from xds_client.errors import TransportError, UsageError
from xds_client.transport._base import Request

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "PollPolicy",
    "PollError",
    "PollCall",
    "PollScheduler",
    "PollingStream",
    "AsyncPollingStream",
    "Poster",
    "AsyncPoster",
]

_log = logging.getLogger("xds_client.transport.polling")

DEFAULT_POLL_INTERVAL = 30.0
"""Seconds between polls of one type, like Envoy's default ``refresh_delay``."""

WILDCARD = "*"


@dataclass(frozen=True)
class PollPolicy:
    """How often to poll and how to react to failures. Immutable; copy with ``with_*``."""

    interval: float = DEFAULT_POLL_INTERVAL
    """Seconds between polls of one type."""
    jitter: float = 0.1
    """Each interval is multiplied by a random factor in ``[1 - jitter, 1 + jitter]``."""
    request_timeout: float = 10.0
    """Seconds one poll (connect, send, answer) may take before it counts as failed."""
    backoff: wait_base = field(
        default_factory=lambda: wait_random_exponential(multiplier=0.5, max=30.0)
    )
    """tenacity wait strategy giving the delay after the n-th failure in a row."""
    failures_before_error: int = 3
    """Retryable failures in a row after which the stream fails (driver reconnects)."""

    def __post_init__(self) -> None:
        if not (self.interval > 0 and math.isfinite(self.interval)):
            raise UsageError(f"poll interval must be a positive number, got {self.interval!r}")
        if not 0 <= self.jitter < 1:
            raise UsageError(f"poll jitter must be in [0, 1), got {self.jitter!r}")
        if not self.request_timeout > 0:
            raise UsageError(f"request timeout must be positive, got {self.request_timeout!r}")
        if self.failures_before_error < 1:
            raise UsageError("failures_before_error must be at least 1")

    def with_interval(self, interval: float) -> PollPolicy:
        """A copy polling every ``interval`` seconds."""
        return replace(self, interval=interval)

    def with_request_timeout(self, timeout: float) -> PollPolicy:
        """A copy whose polls time out after ``timeout`` seconds."""
        return replace(self, request_timeout=timeout)

    def with_backoff(
        self, backoff: wait_base, failures_before_error: int | None = None
    ) -> PollPolicy:
        """A copy with another tenacity wait strategy (and failure threshold)."""
        if failures_before_error is None:
            failures_before_error = self.failures_before_error
        return replace(self, backoff=backoff, failures_before_error=failures_before_error)

    def backoff_delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failed polls (tenacity decides)."""
        state = RetryCallState(Retrying(), None, (), {})
        state.attempt_number = max(1, failures)
        return float(self.backoff(state))


class PollError(TransportError):
    """One poll failed. ``retryable`` says whether polling again may help.

    The HTTP or gRPC status travels as ``__cause__`` (and ``status``).
    """

    def __init__(self, message: str, *, retryable: bool, status: object = None) -> None:
        self.retryable = retryable
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class PollCall:
    """One poll to perform: the type and the exact request to post."""

    type_url: str
    request: DiscoveryRequest
    names: frozenset[str]
    """The subscription this poll asks for (empty: wildcard)."""
    full: bool = False
    """True when the request carries no version, to get every requested resource."""


@dataclass
class _TypeState:
    request: DiscoveryRequest
    names: frozenset[str]
    due: float
    named: bool = False  # the last request listed names ("*" counts): [] then unsubscribes
    active: bool = True  # False after an unsubscribe: not polled
    in_flight: bool = False
    repoll: bool = False  # the subscription changed while a poll was in flight
    force_full: bool = False  # names were added: ask without a version (see _call_for)
    failures: int = 0
    delivered: tuple[str, frozenset[str]] | None = None  # (version_info, names) last handed out


def _names(request: DiscoveryRequest) -> frozenset[str]:
    names = frozenset(request.resource_names)
    # Polling has no per-stream subscription state, so the explicit wildcard is
    # sent as the legacy one (no names): it already covers every named resource.
    return frozenset() if WILDCARD in names else names


class PollScheduler:
    """The state of a polling "stream": latest request, due time and failures per type.

    Sans-I/O: every method takes ``now`` (monotonic seconds) and nothing here
    sleeps or reads a clock. Not thread-safe; the streams lock around it.
    """

    def __init__(self, policy: PollPolicy, *, rng: random.Random | None = None) -> None:
        self.policy = policy
        self._rng = rng or random.Random()
        self._types: dict[str, _TypeState] = {}
        self._node: Node | None = None
        self._worked = False  # some poll of this stream succeeded

    def submit(self, request: Request, now: float) -> None:
        """Take a request from the protocol core (subscription, ACK or NACK)."""
        if isinstance(request, DeltaDiscoveryRequest):
            raise UsageError("polling transports speak SotW only; use transport='grpc' for delta")
        if request.HasField("node"):
            # Every poll is a new HTTP request or unary call: servers need the
            # node each time, even when the core sends it only once per stream.
            self._node = Node()
            self._node.CopyFrom(request.node)
        type_url = request.type_url
        names = _names(request)
        state = self._types.get(type_url)
        named = bool(request.resource_names)
        if state is None:
            # The first poll of a type on a new stream asks for everything: a
            # 304 would leave the driver unsure the server works (it marks a
            # stream up, and resets its backoff, on the first response), and
            # the core ignores resources whose bytes did not change.
            self._types[type_url] = _TypeState(
                request, names, due=now, named=named, force_full=True
            )
            return
        if not named and (state.named or not state.active):
            # SotW unsubscribes a type by sending no names after named ones
            # ("*" included). The state stays, so that a later subscription
            # counts as new names.
            state.active = False
            state.names = frozenset()
            state.request = request
            return
        state.named = named
        if not state.active:
            state.active = True
            state.force_full = True
            state.names = names
            state.due = now
            state.repoll = state.in_flight
        elif names != state.names:
            if not names or not names <= state.names:
                state.force_full = True
            state.names = names
            state.due = now
            if state.in_flight:
                state.repoll = True
        state.request = request

    def next_due(self) -> float | None:
        """When the next poll is due, or None when nothing is subscribed or all are in flight."""
        dues = [s.due for s in self._types.values() if s.active and not s.in_flight]
        return min(dues) if dues else None

    def take_due(self, now: float) -> PollCall | None:
        """The most overdue poll to perform now, marked in flight; None if none is due."""
        ready = [
            (s.due, url)
            for url, s in self._types.items()
            if s.active and not s.in_flight and s.due <= now
        ]
        if not ready:
            return None
        _, type_url = min(ready)
        state = self._types[type_url]
        state.in_flight = True
        state.repoll = False
        return PollCall(type_url, self._call_for(state), state.names, state.force_full)

    def _call_for(self, state: _TypeState) -> DiscoveryRequest:
        request = DiscoveryRequest()
        request.CopyFrom(state.request)
        del request.resource_names[:]
        request.resource_names.extend(sorted(state.names))
        if not request.HasField("node") and self._node is not None:
            request.node.CopyFrom(self._node)
        if state.force_full:
            # Servers such as sovereign version the whole config and answer 304
            # (or the same version) when it matches, even for new names: an
            # empty version makes them send every requested resource.
            request.version_info = ""
        return request

    def completed(
        self, call: PollCall, response: DiscoveryResponse | None, now: float
    ) -> DiscoveryResponse | None:
        """Record a successful poll; returns the response if it carries something new."""
        self._worked = True
        state = self._types[call.type_url]
        state.in_flight = False
        if not state.active:  # unsubscribed while in flight
            return None
        state.failures = 0
        state.due = now if state.repoll else now + self._interval()
        if call.full and call.names == state.names:
            state.force_full = False
        if response is None:
            return None
        if not response.type_url:
            response.type_url = call.type_url
        key = (response.version_info, call.names)
        if key == state.delivered and not call.full:
            # A full poll follows added names: the core may have dropped some
            # of them meanwhile, so its answer is handed out even if it repeats.
            return None
        if response.version_info and response.version_info == call.request.version_info:
            # The client already holds this version of these names (a new
            # stream after a reconnect, or a server without 304s).
            return None
        state.delivered = key
        return response

    def failed(self, call: PollCall, error: PollError, now: float) -> bool:
        """Record a failed poll; True when the stream should fail with ``error``."""
        state = self._types[call.type_url]
        state.in_flight = False
        if not state.active:
            return False
        state.failures += 1
        state.due = now + self.policy.backoff_delay(state.failures)
        if not error.retryable or state.failures >= self.policy.failures_before_error:
            return True
        if not self._worked:
            # Like a stream that fails before its first response: the driver
            # reports it at once, backs off, and may fall back to another server.
            return True
        _log.debug(
            "poll of %s failed (%d in a row), retrying in %.2fs: %s",
            call.type_url,
            state.failures,
            state.due - now,
            error,
        )
        return False

    def _interval(self) -> float:
        jitter = self.policy.jitter
        return self.policy.interval * self._rng.uniform(1 - jitter, 1 + jitter)


Poster = Callable[[PollCall], DiscoveryResponse | None]
"""Performs one poll: the response, None when unchanged, or raises :class:`PollError`."""
AsyncPoster = Callable[[PollCall], Awaitable[DiscoveryResponse | None]]


class PollingStream:
    """A :class:`~xds_client.transport.Stream` made of polls, for threads.

    ``recv`` performs the due polls in the calling thread; ``send`` only
    records the request and wakes ``recv``, so it never blocks on the network.
    """

    def __init__(
        self,
        poster: Poster,
        policy: PollPolicy,
        *,
        on_close: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._poster = poster
        self._scheduler = PollScheduler(policy, rng=rng)
        self._on_close = on_close
        self._clock = clock
        self._cond = threading.Condition()
        self._closed = False
        self._error: TransportError | None = None

    def send(self, request: Request) -> None:
        """Record the request; a changed subscription is polled on the next ``recv``."""
        with self._cond:
            self._check_open()
            self._scheduler.submit(request, self._clock())
            self._cond.notify_all()

    def recv(self, timeout: float | None) -> DiscoveryResponse | None:
        """Poll what is due until a changed response arrives or ``timeout`` passes."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            with self._cond:
                self._check_open()
                now = self._clock()
                call = self._scheduler.take_due(now)
                if call is None:
                    due = self._scheduler.next_due()
                    wait = _wait_time(now, due, deadline)
                    if wait is not None and wait <= 0:
                        return None
                    self._cond.wait(wait)
                    continue
            try:
                response = self._poster(call)
            except Exception as exc:
                error = _as_poll_error(call, exc)
                with self._cond:
                    if not self._scheduler.failed(call, error, self._clock()) or self._closed:
                        continue
                    self._error = error
                raise error from error.__cause__
            with self._cond:
                changed = self._scheduler.completed(call, response, self._clock())
            if changed is not None:
                return changed

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop polling; wakes a blocked ``recv`` and aborts a poll in flight."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._on_close is not None:
            self._on_close()

    def _check_open(self) -> None:
        if self._error is not None:
            raise TransportError(f"polling stream failed: {self._error}") from self._error
        if self._closed:
            raise TransportError("polling stream is closed")


class AsyncPollingStream:
    """The asyncio twin of :class:`PollingStream`; same scheduler, awaitable poster."""

    def __init__(
        self,
        poster: AsyncPoster,
        policy: PollPolicy,
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._poster = poster
        self._scheduler = PollScheduler(policy, rng=rng)
        self._on_close = on_close
        self._clock = clock
        self._wakeup = asyncio.Event()
        self._closed = False
        self._error: TransportError | None = None

    async def send(self, request: Request) -> None:
        """Record the request; a changed subscription is polled on the next ``recv``."""
        self._check_open()
        self._scheduler.submit(request, self._clock())
        self._wakeup.set()

    async def recv(self, timeout: float | None) -> DiscoveryResponse | None:
        """Poll what is due until a changed response arrives or ``timeout`` passes."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            self._check_open()
            now = self._clock()
            call = self._scheduler.take_due(now)
            if call is None:
                wait = _wait_time(now, self._scheduler.next_due(), deadline)
                if wait is not None and wait <= 0:
                    return None
                self._wakeup.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), wait)
                continue
            try:
                response = await self._poster(call)
            except Exception as exc:
                error = _as_poll_error(call, exc)
                if not self._scheduler.failed(call, error, self._clock()) or self._closed:
                    continue
                self._error = error
                raise error from error.__cause__
            changed = self._scheduler.completed(call, response, self._clock())
            if changed is not None:
                return changed

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    async def close(self) -> None:
        """Stop polling; wakes a waiting ``recv``."""
        if self._closed:
            return
        self._closed = True
        self._wakeup.set()
        if self._on_close is not None:
            await self._on_close()

    def _check_open(self) -> None:
        if self._error is not None:
            raise TransportError(f"polling stream failed: {self._error}") from self._error
        if self._closed:
            raise TransportError("polling stream is closed")


def _as_poll_error(call: PollCall, exc: Exception) -> PollError:
    """The poster's PollError, or an unexpected error wrapped as a non-retryable one."""
    if isinstance(exc, PollError):
        return exc
    error = PollError(f"poll of {call.type_url} failed: {exc!r}", retryable=False)
    error.__cause__ = exc
    return error


def _wait_time(now: float, due: float | None, deadline: float | None) -> float | None:
    """Seconds to sleep before the next due poll or the caller's deadline (None: forever)."""
    candidates = [t - now for t in (due, deadline) if t is not None]
    return max(0.0, min(candidates)) if candidates else None
