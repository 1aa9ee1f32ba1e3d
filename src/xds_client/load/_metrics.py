"""What a load run measures, and the report it ends with.

Times are ``loop.time()`` seconds (monotonic). Push-to-ACK of a version runs from
the moment the first client of the fleet received it to each client's ACK (or
NACK), so it holds the server's fan-out as well as each client's own work; the
fleet's convergence on a version is the same clock read at its last client.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "ClientStats",
    "LoadEvent",
    "Report",
    "Sample",
    "Summary",
    "VersionResult",
    "summarize",
]

_ALIASES = {
    "type.googleapis.com/envoy.config.listener.v3.Listener": "LDS",
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration": "RDS",
    "type.googleapis.com/envoy.config.cluster.v3.Cluster": "CDS",
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment": "EDS",
}


def type_label(type_url: str) -> str:
    """``CDS`` for the cluster type URL; the message name for other types."""
    return _ALIASES.get(type_url) or type_url.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Summary:
    """Percentiles of a set of latencies, in seconds (None when there were none)."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


def _rank(ordered: Sequence[float], q: float) -> float:
    # Nearest rank: the smallest value with at least q of the values at or below it.
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize(values: Iterable[float]) -> Summary:
    """p50, p90, p99 and max of ``values`` (nearest-rank percentiles)."""
    ordered = sorted(values)
    if not ordered:
        return Summary(0, None, None, None, None)
    return Summary(
        len(ordered),
        _rank(ordered, 0.50),
        _rank(ordered, 0.90),
        _rank(ordered, 0.99),
        ordered[-1],
    )


@dataclass(frozen=True)
class LoadEvent:
    """One thing a simulated client saw, as handed to ``Fleet(on_event=...)``."""

    kind: Literal["first_config", "ack", "nack", "error"]
    """``first_config``: the client holds a complete config; ``ack``/``nack``: it
    answered a pushed version; ``error``: its stream failed."""
    name: str
    """``first config``, the type (``CDS``), or the gRPC status code name."""
    latency: float
    """Seconds: start to complete config, or push to ACK/NACK; 0 for errors."""
    client: int
    """Index of the simulated client."""
    detail: str = ""
    """The NACK's or the error's message."""


@dataclass(frozen=True)
class Sample:
    """The fleet at one moment of the run (one a second)."""

    t: float
    """Seconds since the run started."""
    started: int
    connected: int
    """Clients whose stream is open and has received a response."""
    complete: int
    """Clients holding a complete config on their current stream."""
    acks: int
    nacks: int
    errors: int


@dataclass(frozen=True)
class VersionResult:
    """How the fleet took one pushed version of one type."""

    type: str
    version: str
    first_seen: float
    """Seconds since the run started when the first client received it."""
    acks: int
    nacks: int
    convergence: float
    """Seconds from the first receipt to the last client's ACK or NACK."""


@dataclass(frozen=True)
class ClientStats:
    """What one simulated client saw (``Report.clients``, in ``-o json``)."""

    index: int
    node_id: str
    first_config: float | None
    """Seconds from its start to its first complete config (None: never complete)."""
    streams: int
    """Streams opened (1 + reconnects)."""
    acks: int
    nacks: int
    errors: int
    """Streams that ended with an error status."""
    bytes_received: int
    bytes_sent: int
    resources_held: int
    """Resources cached when it stopped."""


@dataclass(frozen=True)
class Report:
    """The outcome of a run: what ``-o json`` prints and what ``table()`` shows."""

    server: str
    protocol: str
    profile: str
    nodes: int
    duration: float
    clients_started: int
    clients_complete: int
    """Clients that reached a complete config at least once."""
    peak_connected: int
    first_config: Summary
    push_to_ack: dict[str, Summary]
    versions: list[VersionResult]
    nacks: int
    reconnects: int
    errors: dict[str, int]
    bytes_received: int
    bytes_sent: int
    resources_held: int
    """Resources cached by all clients together at the end."""
    storm: dict[str, Any] | None = None
    """Reconnect storm: ``at``, ``clients``, ``recovered``, ``recovery`` (seconds)."""
    series: list[Sample] = field(default_factory=list)
    clients: list[ClientStats] = field(default_factory=list)
    """Per simulated client, the ones churned out included."""
    failure: str = ""
    """Why the run stopped early ("" when it ran to its end)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return asdict(self)

    def table(self) -> str:
        """The human summary: a few lines and a latency table."""
        lines = [
            f"server {self.server}  protocol {self.protocol}  profile {self.profile}  "
            f"duration {self.duration:.1f} s",
            f"clients: {self.clients_started} started, {self.clients_complete} reached a "
            f"complete config, {self.peak_connected} connected at peak",
            f"nacks {self.nacks}  reconnects {self.reconnects}  errors "
            + (", ".join(f"{k} {v}" for k, v in sorted(self.errors.items())) or "0"),
            f"bytes received {self.bytes_received:,}  sent {self.bytes_sent:,}  "
            f"resources held {self.resources_held:,}",
        ]
        if self.storm is not None:
            storm = self.storm
            recovery = "not all" if storm["recovery"] is None else f"{storm['recovery']:.3f} s"
            lines.append(
                f"reconnect storm at {storm['at']:.1f} s: {storm['clients']} streams dropped, "
                f"{storm['recovered']} back and complete, all back in {recovery}"
            )
        lines.append("")
        lines.append(f"{'latency (ms)':<22}{'count':>8}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
        rows = [("first config", self.first_config)]
        rows += [(f"push to ACK {t}", s) for t, s in sorted(self.push_to_ack.items())]
        rows.append(("convergence", summarize(v.convergence for v in self.versions)))
        for label, summary in rows:
            cells = [_ms(x) for x in (summary.p50, summary.p90, summary.p99, summary.max)]
            lines.append(f"{label:<22}{summary.count:>8}" + "".join(f"{c:>9}" for c in cells))
        if self.failure:
            lines.append("")
            lines.append(f"stopped early: {self.failure}")
        return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


@dataclass
class _Version:
    first_seen: float
    acks: int = 0
    nacks: int = 0
    last: float = 0.0
    push: bool = False  # some client took it as an update, not as its first config


class Recorder:
    """Collects the fleet's measurements; the clients call it, the fleet reads it."""

    def __init__(self, on_event: Callable[[LoadEvent], None] | None = None) -> None:
        self.on_event = on_event
        self.t0 = 0.0
        self.versions: dict[tuple[str, str], _Version] = {}
        # Arrays of doubles: 8 bytes a sample, not a float object and a pointer (a long
        # run of thousands of clients takes millions of samples).
        self.push_to_ack: dict[str, array[float]] = {}
        self.first_config: array[float] = array("d")
        self.errors: Counter[str] = Counter()
        self.acks = 0
        self.nacks = 0
        self.reconnects = 0
        self.samples: list[Sample] = []

    def received(self, type_url: str, version: str, now: float) -> None:
        """A client received ``version`` of ``type_url``: the push clock starts at the first."""
        key = (type_url, version)
        if key not in self.versions:
            self.versions[key] = _Version(now)

    def answered(
        self,
        client: int,
        type_url: str,
        version: str,
        *,
        accepted: bool,
        push: bool,
        now: float,
        detail: str = "",
    ) -> None:
        """A client ACKed (or NACKed) a version; ``push``: it held an older one already."""
        entry = self.versions.get((type_url, version))
        if entry is None:
            entry = self.versions[(type_url, version)] = _Version(now)
        if accepted:
            entry.acks += 1
            self.acks += 1
        else:
            entry.nacks += 1
            self.nacks += 1
        entry.last = max(entry.last, now)
        latency = now - entry.first_seen
        label = type_label(type_url)
        if push:
            entry.push = True
            samples = self.push_to_ack.get(label)
            if samples is None:
                samples = self.push_to_ack[label] = array("d")
            samples.append(latency)
        if (push or not accepted) and self.on_event is not None:
            kind: Literal["ack", "nack"] = "ack" if accepted else "nack"
            self.on_event(LoadEvent(kind, label, latency, client, detail))

    def completed(self, client: int, latency: float) -> None:
        """A client holds its first complete config, ``latency`` seconds after it started."""
        self.first_config.append(latency)
        if self.on_event is not None:
            self.on_event(LoadEvent("first_config", "first config", latency, client))

    def failed(self, client: int, code: str, detail: str) -> None:
        """A client's stream ended with ``code`` (a gRPC status name)."""
        self.errors[code] += 1
        if self.on_event is not None:
            self.on_event(LoadEvent("error", code, 0.0, client, detail))

    def version_results(self) -> list[VersionResult]:
        """The pushed versions (not the first configs), oldest first."""
        out = [
            VersionResult(
                type=type_label(type_url),
                version=version,
                first_seen=round(v.first_seen - self.t0, 6),
                acks=v.acks,
                nacks=v.nacks,
                convergence=round(max(0.0, v.last - v.first_seen), 6),
            )
            for (type_url, version), v in self.versions.items()
            if v.push
        ]
        return sorted(out, key=lambda r: r.first_seen)
