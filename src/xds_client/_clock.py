"""The one place the clients turn their monotonic time into wall-clock time."""

from __future__ import annotations

import time

__all__ = ["monotonic_to_wall"]


def monotonic_to_wall(monotonic: float) -> float:
    """Unix time of a ``time.monotonic()`` reading (the time base the drivers pass)."""
    return time.time() - (time.monotonic() - monotonic)
