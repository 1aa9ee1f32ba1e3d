"""Retry policy of the ResourceStore client, and which failures are safe to retry.

Reads, lists and watches retry on Unavailable, ResourceExhausted and 429.
Writes retry only when the request surely did not take effect: a 429 (the
server refused before doing anything) or a connection that never reached
the server. A message over the size limit is never retried. Backoff is
exponential with jitter; a 429's ``retryAfterSeconds`` is honoured as a lower
bound, but never past the policy's ``deadline``: when the next attempt could
only start after it, the call fails at once with the last error.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

import grpc

from xds_client._backoff import Backoff
from xds_client.errors import UsageError
from xds_client.store._errors import (
    ResourceStoreError,
    ServerTimeoutError,
    TooManyRequestsError,
    UnavailableError,
)

__all__ = ["RetryPolicy", "DEFAULT_RETRY", "RetryRun"]

# Messages grpc-core uses when no connection could be made, so the request never left.
_NOT_SENT_MARKERS = (
    "failed to connect",
    "connection refused",
    "connect failed",
    "dns resolution failed",
    "no route to host",
    "name resolution failure",
    "empty address list",
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry; an immutable value with ``with_*`` copies."""

    max_attempts: int = 5
    """Attempts of one unary call, the first included (1 disables retries)."""
    initial_backoff: float = 0.1
    """Delay before the first retry, in seconds."""
    max_backoff: float = 5.0
    """Cap of the delay between attempts."""
    multiplier: float = 2.0
    """Growth of the delay per attempt."""
    jitter: float = 0.2
    """Random spread of each delay, as a fraction of it (0.2 = plus or minus 20%)."""
    deadline: float | None = 60.0
    """Give up a unary call after this many seconds of retrying (None: no limit)."""

    def __post_init__(self) -> None:
        # The same bounds as Backoff, checked now rather than at the first retry.
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise UsageError(
                "RetryPolicy needs initial_backoff >= 0, max_backoff >= 0 and multiplier >= 1"
            )
        if not 0 <= self.jitter < 1:
            raise UsageError("RetryPolicy jitter must be in [0, 1)")

    def with_max_attempts(self, max_attempts: int) -> RetryPolicy:
        """A copy with another ``max_attempts``."""
        return replace(self, max_attempts=max_attempts)

    def with_backoff(
        self, initial: float, maximum: float | None = None, multiplier: float | None = None
    ) -> RetryPolicy:
        """A copy with other backoff delays."""
        return replace(
            self,
            initial_backoff=initial,
            max_backoff=self.max_backoff if maximum is None else maximum,
            multiplier=self.multiplier if multiplier is None else multiplier,
        )

    def with_deadline(self, deadline: float | None) -> RetryPolicy:
        """A copy with another overall deadline."""
        return replace(self, deadline=deadline)

    def as_backoff(self) -> Backoff:
        """The delays as the :class:`~xds_client.Backoff` that streams and pollers use too."""
        return Backoff(
            initial=self.initial_backoff,
            multiplier=self.multiplier,
            jitter=self.jitter,
            maximum=self.max_backoff,
        )

    def backoff(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The delay after failed attempt number ``attempt`` (1-based)."""
        return self.as_backoff().delay(attempt, rand)

    def delay_for(self, attempt: int, error: BaseException | None) -> float:
        """:meth:`backoff`, raised to the server's ``retryAfterSeconds`` when given."""
        delay = self.backoff(attempt)
        if isinstance(error, TooManyRequestsError) and error.retry_after:
            delay = max(delay, error.retry_after)
        return delay


DEFAULT_RETRY = RetryPolicy()


def retryable_read(exc: BaseException) -> bool:
    """Reads, lists and watch (re)opens retry on these."""
    return isinstance(exc, UnavailableError | TooManyRequestsError)


def retryable_stream(exc: BaseException) -> bool:
    """A watch stream resumes after these (plus a clean end of stream)."""
    if isinstance(exc, UnavailableError | TooManyRequestsError | ServerTimeoutError):
        return True
    # A stream reset by a proxy or a dying server surfaces as INTERNAL.
    return (
        isinstance(exc, ResourceStoreError)
        and exc.grpc_code == grpc.StatusCode.INTERNAL
        and "rst_stream" in str(exc).lower()
    )


def surely_not_sent(exc: BaseException) -> bool:
    """Whether a failed write surely did not reach the server (so retrying is safe)."""
    if isinstance(exc, TooManyRequestsError):
        return True
    if isinstance(exc, UnavailableError) and exc.grpc_code == grpc.StatusCode.UNAVAILABLE:
        text = exc.message.lower()
        return any(marker in text for marker in _NOT_SENT_MARKERS)
    return False


class RetryRun:
    """The retries of one call: after each failure, how long to wait, or None to give up.

    Stops after ``max_attempts``, on an error ``retryable`` refuses, or when the next
    attempt could only start past the policy's ``deadline`` (counted from ``started``).
    """

    __slots__ = ("attempts", "policy", "retryable", "started")

    def __init__(
        self, policy: RetryPolicy, retryable: Callable[[BaseException], bool], started: float
    ) -> None:
        self.policy = policy
        self.retryable = retryable
        self.started = started
        self.attempts = 0

    def failed(self, error: BaseException, now: float) -> float | None:
        """Attempt number ``attempts + 1`` failed with ``error`` at ``now``: the delay or None."""
        self.attempts += 1
        policy = self.policy
        if not self.retryable(error) or self.attempts >= max(1, policy.max_attempts):
            return None
        delay = policy.delay_for(self.attempts, error)
        if policy.deadline is not None and (now - self.started) + delay >= policy.deadline:
            return None
        return delay


CONFLICT_BACKOFF = Backoff(initial=0.025, multiplier=1.0, jitter=0.99, maximum=0.025)
"""Between the attempts of ``read_modify_write``: a random 0 to 50 ms, so racing writers part."""


def attempt_timeout(
    timeout: float | None, policy: RetryPolicy, started: float, now: float
) -> float | None:
    """The deadline of one attempt: the client's ``timeout``, cut to what the policy has left."""
    if policy.deadline is None:
        return timeout
    left = max(0.001, policy.deadline - (now - started))
    return left if timeout is None else min(timeout, left)
