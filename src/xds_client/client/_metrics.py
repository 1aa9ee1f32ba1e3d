"""Metrics hooks: a small protocol to implement, with no metrics library behind it."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

__all__ = ["CountingMetrics", "Metrics"]


@runtime_checkable
class Metrics(Protocol):
    """What a client reports; implement it to feed Prometheus, StatsD, logs ...

    Methods are called from the client's I/O thread (or event loop) and must
    return quickly; an exception they raise is logged and ignored.

    Optional: a method ``authority_resources(type_url, authority, counts)``, when
    present, also gets the counts per federation authority (``"#old"`` for
    old-style names, as gRFC A78 labels them); and a method
    ``response(type_url, server, accepted, control_plane)``, when present, is
    called for each response counted by :meth:`ack` or :meth:`nack`, with the
    response's ``control_plane.identifier`` (``""`` when the server sends none),
    to tell the server instances behind one address apart; and
    ``server_switch(previous, current, reason)``, when present, is called each time
    a stream moves to another server of its list (gRFC A71): ``reason`` is
    ``"fallback"``, ``"primary"`` (the primary's xDS stream serves again) or
    ``"retry"`` (every server failed before answering; the list starts over).
    """

    def ack(self, type_url: str, server: str) -> None:
        """A response of ``type_url`` was accepted."""

    def nack(self, type_url: str, server: str) -> None:
        """A response of ``type_url`` was rejected."""

    def reconnect(self, server: str) -> None:
        """A stream to ``server`` failed and will be reopened."""

    def resources(self, type_url: str, counts: Mapping[str, int]) -> None:
        """How many resources of ``type_url`` are in each CSDS status
        (``REQUESTED``, ``ACKED``, ``NACKED``, ``DOES_NOT_EXIST``) after a change."""


class CountingMetrics:
    """A ready :class:`Metrics` that keeps counters in memory (handy in tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acks: Counter[str] = Counter()
        """ACKs per type URL."""
        self.nacks: Counter[str] = Counter()
        """NACKs per type URL."""
        self.reconnects: Counter[str] = Counter()
        """Stream failures per server URI."""
        self.resource_counts: dict[str, dict[str, int]] = {}
        """Latest resource count per type URL and status."""
        self.authority_counts: dict[tuple[str, str], dict[str, int]] = {}
        """Latest resource count per (type URL, authority) and status (gRFC A78)."""
        self.control_planes: Counter[tuple[str, str]] = Counter()
        """Responses (accepted or not) per (type URL, ``control_plane.identifier``)."""
        self.server_switches: list[tuple[str, str, str]] = []
        """Each move to another server: (previous URI, new URI, reason), in order."""

    def ack(self, type_url: str, server: str) -> None:
        with self._lock:
            self.acks[type_url] += 1

    def nack(self, type_url: str, server: str) -> None:
        with self._lock:
            self.nacks[type_url] += 1

    def reconnect(self, server: str) -> None:
        with self._lock:
            self.reconnects[server] += 1

    def resources(self, type_url: str, counts: Mapping[str, int]) -> None:
        with self._lock:
            self.resource_counts[type_url] = dict(counts)

    def response(self, type_url: str, server: str, accepted: bool, control_plane: str) -> None:
        """One response of ``type_url``, from the server instance ``control_plane``."""
        with self._lock:
            self.control_planes[(type_url, control_plane)] += 1

    def server_switch(self, previous: str, current: str, reason: str) -> None:
        """A stream moved from server ``previous`` to ``current`` (``reason``: see
        :class:`Metrics`)."""
        with self._lock:
            self.server_switches.append((previous, current, reason))

    def authority_resources(self, type_url: str, authority: str, counts: Mapping[str, int]) -> None:
        """Counts of ``type_url`` resources of one authority (``"#old"``: old-style names)."""
        with self._lock:
            self.authority_counts[(type_url, authority)] = dict(counts)
