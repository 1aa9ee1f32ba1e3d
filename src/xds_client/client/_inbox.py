"""What the driver's I/O worker receives besides a bare wake-up (``None``).

Typed messages instead of tuples dispatched by string; responses never go through
the inbox: the reader applies them to the (thread-safe) session itself, one hand-off
fewer, and then wakes the I/O worker to send the ACK.

Plain classes with ``__slots__``, not dataclasses: every client imports them, and a
frozen dataclass costs about 1 ms of import (it compiles its generated methods).
"""

from __future__ import annotations

from typing import Union

__all__ = ["InboxItem", "ProbeResult", "StreamFailed"]


class StreamFailed:
    """A stream (``slot``, ``attempt``) failed to open, send or receive."""

    __slots__ = ("attempt", "error", "slot")

    def __init__(self, slot: str, attempt: int, error: BaseException) -> None:
        self.slot = slot
        self.attempt = attempt
        self.error = error

    def __repr__(self) -> str:
        return f"StreamFailed(slot={self.slot!r}, attempt={self.attempt!r}, error={self.error!r})"


class ProbeResult:
    """Whether server ``server`` answered a probe made for ``slot``."""

    __slots__ = ("ok", "server", "slot")

    def __init__(self, slot: str, server: int, ok: bool) -> None:
        self.slot = slot
        self.server = server
        self.ok = ok

    def __repr__(self) -> str:
        return f"ProbeResult(slot={self.slot!r}, server={self.server!r}, ok={self.ok!r})"


InboxItem = Union[StreamFailed, ProbeResult, None]  # noqa: UP007 - a runtime alias on 3.10
"""``None`` only wakes the I/O worker (a new watch, a closed watch, a response applied)."""
