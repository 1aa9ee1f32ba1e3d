"""Metrics hooks: a small protocol to implement, with no metrics library behind it.

:class:`Metrics` holds the four hooks every metrics object has. The others are optional,
each declared as its own small protocol (:class:`AuthorityMetrics`,
:class:`ResponseMetrics`, :class:`ServerSwitchMetrics`, :class:`ResourceUpdateMetrics`,
:class:`StreamMetrics`):
an object implements the ones it wants, and :func:`metrics_hooks` finds them once, with
``isinstance`` on these runtime-checkable protocols, instead of probing each event.
Protocols rather than a base class with no-op methods: a user's class of four methods
stays a valid ``Metrics`` without inheriting anything, and mypy checks each optional hook's
signature where the object declares it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "AuthorityMetrics",
    "CountingMetrics",
    "Metrics",
    "MetricsHooks",
    "ResourceUpdateMetrics",
    "ResponseMetrics",
    "ServerSwitchMetrics",
    "StreamMetrics",
    "metrics_hooks",
]


@runtime_checkable
class Metrics(Protocol):
    """What a client reports; implement it to feed Prometheus, StatsD, logs ...

    Methods are called from the client's I/O thread (or event loop) and must
    return quickly; an exception they raise is logged and ignored.

    The optional hooks are the protocols :class:`AuthorityMetrics`,
    :class:`ResponseMetrics`, :class:`ServerSwitchMetrics`,
    :class:`ResourceUpdateMetrics` and :class:`StreamMetrics`: implement any of them too.
    ``xds_client.otel.OpenTelemetryMetrics`` (the ``otel`` extra) implements them all
    with gRFC A78's instruments.
    """

    def ack(self, type_url: str, server: str) -> None:
        """A response of ``type_url`` was accepted."""

    def nack(self, type_url: str, server: str) -> None:
        """A response of ``type_url`` was rejected."""

    def reconnect(self, server: str) -> None:
        """A stream to ``server`` failed and will be reopened."""

    def resources(self, type_url: str, counts: Mapping[str, int]) -> None:
        """How many resources of ``type_url`` are in each CSDS status
        (``REQUESTED``, ``ACKED``, ``NACKED``, ``DOES_NOT_EXIST``, ``TIMEOUT``,
        ``RECEIVED_ERROR``) after a change."""


@runtime_checkable
class AuthorityMetrics(Protocol):
    """Optional: resource counts per federation authority (gRFC A78's label)."""

    def authority_resources(self, type_url: str, authority: str, counts: Mapping[str, int]) -> None:
        """Counts of ``type_url`` resources of one authority (``"#old"`` for old-style
        names), by CSDS status as in :meth:`Metrics.resources`; called right after it."""


@runtime_checkable
class ResponseMetrics(Protocol):
    """Optional: each response with the server instance that sent it."""

    def response(self, type_url: str, server: str, accepted: bool, control_plane: str) -> None:
        """One response of ``type_url`` counted by ``ack`` or ``nack``, with its
        ``control_plane.identifier`` (``""`` when the server sends none), to tell the
        server instances behind one address apart."""


@runtime_checkable
class ServerSwitchMetrics(Protocol):
    """Optional: moves of a stream between the servers of its list (gRFC A71)."""

    def server_switch(self, previous: str, current: str, reason: str) -> None:
        """A stream moved from server ``previous`` to ``current``. ``reason`` is
        ``"fallback"``, ``"primary"`` (the primary's xDS stream serves again) or
        ``"retry"`` (every server failed before answering; the list starts over)."""


@runtime_checkable
class ResourceUpdateMetrics(Protocol):
    """Optional: resources received, valid and invalid (gRFC A78 counts resources, not
    responses); called once per response, with ``ack`` or ``nack``."""

    def resource_updates(self, type_url: str, server: str, valid: int, invalid: int) -> None:
        """One response of ``type_url`` from ``server`` held ``valid`` resources that
        the client asked for and that passed validation (changed or not) and
        ``invalid`` ones that did not, or could not be read (all of them when the
        response was rejected as a whole)."""


@runtime_checkable
class StreamMetrics(Protocol):
    """Optional: each stream the client opens (gRFC A78's ``connected`` is 1 from the
    first one to a server)."""

    def stream_opened(self, server: str) -> None:
        """The client opened a stream to ``server`` (not yet answered; a failure before
        any response is told by ``reconnect``)."""


@dataclass(frozen=True)
class MetricsHooks:
    """The hooks of one metrics object, looked up once: None for an optional hook it lacks."""

    ack: Callable[[str, str], None]
    nack: Callable[[str, str], None]
    reconnect: Callable[[str], None]
    resources: Callable[[str, Mapping[str, int]], None]
    authority_resources: Callable[[str, str, Mapping[str, int]], None] | None = None
    response: Callable[[str, str, bool, str], None] | None = None
    server_switch: Callable[[str, str, str], None] | None = None
    resource_updates: Callable[[str, str, int, int], None] | None = None
    stream_opened: Callable[[str], None] | None = None


def metrics_hooks(metrics: Metrics) -> MetricsHooks:
    """The bound hooks of ``metrics``; each optional one when it implements its protocol."""
    return MetricsHooks(
        ack=metrics.ack,
        nack=metrics.nack,
        reconnect=metrics.reconnect,
        resources=metrics.resources,
        authority_resources=(
            metrics.authority_resources if isinstance(metrics, AuthorityMetrics) else None
        ),
        response=metrics.response if isinstance(metrics, ResponseMetrics) else None,
        server_switch=metrics.server_switch if isinstance(metrics, ServerSwitchMetrics) else None,
        resource_updates=(
            metrics.resource_updates if isinstance(metrics, ResourceUpdateMetrics) else None
        ),
        stream_opened=metrics.stream_opened if isinstance(metrics, StreamMetrics) else None,
    )


class CountingMetrics:
    """A ready :class:`Metrics` with every optional hook, keeping counters in memory
    (handy in tests)."""

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
        self.valid_updates: Counter[tuple[str, str]] = Counter()
        """Valid resources received per (type URL, server URI)."""
        self.invalid_updates: Counter[tuple[str, str]] = Counter()
        """Invalid resources received per (type URL, server URI)."""
        self.streams_opened: Counter[str] = Counter()
        """Streams opened per server URI."""

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
        :class:`ServerSwitchMetrics`)."""
        with self._lock:
            self.server_switches.append((previous, current, reason))

    def authority_resources(self, type_url: str, authority: str, counts: Mapping[str, int]) -> None:
        """Counts of ``type_url`` resources of one authority (``"#old"``: old-style names)."""
        with self._lock:
            self.authority_counts[(type_url, authority)] = dict(counts)

    def resource_updates(self, type_url: str, server: str, valid: int, invalid: int) -> None:
        """``valid`` and ``invalid`` resources of ``type_url`` arrived from ``server``."""
        with self._lock:
            self.valid_updates[(type_url, server)] += valid
            self.invalid_updates[(type_url, server)] += invalid

    def stream_opened(self, server: str) -> None:
        """A stream to ``server`` was opened."""
        with self._lock:
            self.streams_opened[server] += 1
