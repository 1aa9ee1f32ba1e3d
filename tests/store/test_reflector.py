"""client-go's reflector values: the relist backoff and the watch timeout.

The informers that use them are tested in test_async_informer.py (and its twin).
"""

from __future__ import annotations

import pytest

from xds_client.store import (
    ReflectorBackoff,
)
from xds_client.store._reflector import MIN_WATCH_TIMEOUT, watch_timeout

pytestmark = pytest.mark.timeout(60)

QUICK = ReflectorBackoff(initial=0.01, maximum=0.05)


def test_backoff_doubles_from_800_ms_to_30_s_and_resets_after_a_quiet_period() -> None:
    backoff = ReflectorBackoff(rand=lambda: 0.0)
    delays = [backoff.failure(float(t)) for t in range(8)]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    assert backoff.failure(8.0 + 120.0) == 0.8  # two minutes without a failure
    jittery = ReflectorBackoff(rand=lambda: 1.0)
    assert jittery.failure(0.0) == pytest.approx(1.6)  # up to twice the delay, as client-go


def test_watch_timeout_is_5_to_10_minutes() -> None:
    assert watch_timeout(lambda: 0.0) == MIN_WATCH_TIMEOUT == 300.0
    assert watch_timeout(lambda: 1.0) == 600.0
