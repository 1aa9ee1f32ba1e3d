"""Backoff: the one type for reconnecting streams, failing polls and store retries.

Immutable, with ``with_*()`` copies. Delays are computed here (no tenacity on the
import path); a tenacity wait strategy can still replace the exponential one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import UsageError

if TYPE_CHECKING:
    import random

    from tenacity.wait import wait_base

__all__ = ["Backoff", "BackoffState"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Exponential backoff with jitter, by default gRPC's connection backoff.

    The n-th consecutive failure (from 1) waits ``min(initial * multiplier**(n-1),
    maximum)`` seconds, scaled by a random factor in ``[1 - jitter, 1 + jitter]``. A
    stream that received at least one response restarts at once and resets the count
    (gRFC A57). ``strategy``, a tenacity wait strategy such as
    ``tenacity.wait_fixed(0.1)``, replaces the exponential rule.
    """

    initial: float = 1.0
    """First delay in seconds."""
    multiplier: float = 1.6
    """Growth factor per failed attempt."""
    jitter: float = 0.2
    """Relative random spread of each delay."""
    maximum: float = 120.0
    """Upper bound of a delay before jitter."""
    strategy: wait_base | None = None
    """A tenacity wait strategy that replaces the exponential one."""

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0 or self.multiplier < 1:
            raise UsageError("Backoff needs initial >= 0, maximum >= 0 and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise UsageError("Backoff jitter must be in [0, 1)")

    def with_initial(self, initial: float) -> Backoff:
        """A copy with another first delay."""
        return replace(self, initial=initial)

    def with_maximum(self, maximum: float) -> Backoff:
        """A copy with another upper bound."""
        return replace(self, maximum=maximum)

    def with_multiplier(self, multiplier: float) -> Backoff:
        """A copy with another growth factor."""
        return replace(self, multiplier=multiplier)

    def with_jitter(self, jitter: float) -> Backoff:
        """A copy with another jitter."""
        return replace(self, jitter=jitter)

    def delay(self, failures: int, rand: Callable[[], float] | None = None) -> float:
        """Seconds to wait after ``failures`` consecutive failures (1 for the first).

        ``rand`` gives the jitter's random numbers in [0, 1) (default: ``random.random``).
        """
        n = max(1, failures)
        if self.strategy is not None:
            return max(0.0, float(self.strategy(_retry_state(n))))
        if rand is None:
            import random  # on the first failure only (~1.5 ms on the client's import line)

            rand = random.random
        base = min(self.maximum, self.initial * self.multiplier ** (n - 1))
        return max(0.0, base * (1.0 + self.jitter * (2.0 * rand() - 1.0)))

    def state(self, rng: random.Random | None = None) -> BackoffState:
        """A fresh counter of consecutive failures."""
        return BackoffState(self, rng)


def _retry_state(attempt: int) -> Any:
    import tenacity  # only for a user's own strategy

    state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return state


class BackoffState:
    """Counts consecutive failures of one stream and hands out the next delay."""

    __slots__ = ("_rng", "failures", "policy")

    def __init__(self, policy: Backoff, rng: random.Random | None = None) -> None:
        self.policy = policy
        self._rng = rng
        """None until the first failure: ``random`` is imported only when needed."""
        self.failures = 0

    def next_delay(self) -> float:
        """Record a failure and return how long to wait before the next attempt."""
        self.failures += 1
        if self._rng is None:
            import random  # on the first failure only (~1.5 ms on the client's import line)

            self._rng = random.Random()
        return self.policy.delay(self.failures, self._rng.random)

    def reset(self) -> None:
        """A response arrived: the next failure starts from the first delay again."""
        self.failures = 0
