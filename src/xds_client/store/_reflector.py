"""Sans-I/O pieces of the informer's reflector: client-go's backoff and watch timeouts.

client-go's reflector never gives up: after any failure of its list or watch
it waits (800 ms doubling to 30 s, with jitter, back to 800 ms once it has run
for two minutes without a failure), lists again and watches from the list's
version. It also ends every watch after a random 5 to 10 minutes, so a stream
that silently died (a half-open connection, a stuck proxy) is replaced.
The informer drivers use these values; they hold no clock and no randomness
of their own.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ReflectorBackoff", "watch_timeout"]

MIN_WATCH_TIMEOUT = 300.0
"""client-go's minWatchTimeout: each watch lasts between this and twice this, in seconds."""


def watch_timeout(rand: Callable[[], float] = random.random) -> float:
    """How long the next watch stream may last before it is replaced (5 to 10 minutes)."""
    return MIN_WATCH_TIMEOUT * (1.0 + rand())


@dataclass
class ReflectorBackoff:
    """Delays between relists after failures, as client-go's backoff manager.

    Call :meth:`failure` with the current time to get the next delay. The
    delay grows with each failure and starts again at ``initial`` once
    ``reset_after`` seconds passed since the previous failure.
    """

    initial: float = 0.8
    """The first delay, in seconds."""
    maximum: float = 30.0
    """The largest delay."""
    factor: float = 2.0
    """Growth per consecutive failure."""
    jitter: float = 1.0
    """Each delay is stretched by up to this fraction (client-go: 1.0)."""
    reset_after: float = 120.0
    """After this long without a failure the delay starts again at ``initial``."""
    rand: Callable[[], float] = field(default=random.random, repr=False)
    _next: float = field(default=0.0, init=False, repr=False)
    _last_failure: float | None = field(default=None, init=False, repr=False)
    failures: int = field(default=0, init=False)
    """Failures since the last reset."""

    def failure(self, now: float) -> float:
        """A list or watch failed at ``now``; returns how long to wait before listing again."""
        if self._last_failure is None or now - self._last_failure >= self.reset_after:
            self._next = self.initial
            self.failures = 0
        self._last_failure = now
        self.failures += 1
        base = min(self._next, self.maximum)
        self._next = min(self.maximum, self._next * self.factor)
        return min(self.maximum * (1.0 + self.jitter), base * (1.0 + self.jitter * self.rand()))
