"""What the driver's I/O worker receives besides a bare wake-up (``None``).

Typed messages instead of tuples dispatched by string; responses never go through
the inbox: the reader applies them to the (thread-safe) session itself, one hand-off
fewer, and then wakes the I/O worker to send the ACK.

"""

from __future__ import annotations

from typing import Union

from xds_client._prebuilt_dataclasses import dataclass

__all__ = ["InboxItem", "ProbeResult", "StreamFailed"]


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """A stream (``slot``, ``attempt``) failed to open, send or receive."""

    slot: str
    attempt: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Whether server ``server`` answered a probe made for ``slot``."""

    slot: str
    server: int
    ok: bool


InboxItem = Union[StreamFailed, ProbeResult, None]  # noqa: UP007 - a runtime alias on 3.10
"""``None`` only wakes the I/O worker (a new watch, a closed watch, a response applied)."""
