"""gRFC A78's xDS client metrics through OpenTelemetry (the ``otel`` extra).

:class:`OpenTelemetryMetrics` is a :class:`~xds_client.client.Metrics` object: pass it
as ``metrics=`` to a client and it records gRPC's own instruments, under their names,
units and labels, so the numbers sit beside those of a gRPC application's xDS client:

- ``grpc.xds_client.connected`` (gauge, ``{bool}``; target, server)
- ``grpc.xds_client.server_failure`` (counter, ``{failure}``; target, server)
- ``grpc.xds_client.resource_updates_valid`` (counter, ``{resource}``; target, server, type)
- ``grpc.xds_client.resource_updates_invalid`` (counter, ``{resource}``; target, server, type)
- ``grpc.xds_client.resources`` (gauge, ``{resource}``; target, authority, cache state, type)

The labels are ``grpc.target``, ``grpc.xds.server``, ``grpc.xds.authority``,
``grpc.xds.cache_state`` and ``grpc.xds.resource_type`` (a type URL without its
``type.googleapis.com/`` prefix). Needs ``pip install 'xds-client[otel]'``
(opentelemetry-api); any OpenTelemetry SDK or exporter reads the instruments.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
except ImportError as exc:  # pragma: no cover - the base install has no OpenTelemetry
    raise ImportError(
        "xds_client.otel needs OpenTelemetry: pip install 'xds-client[otel]'"
    ) from exc

from xds_client._version import __version__

__all__ = ["CACHE_STATES", "OpenTelemetryMetrics"]

CACHE_STATES: Final[Mapping[str, str]] = {
    "REQUESTED": "requested",
    "DOES_NOT_EXIST": "does_not_exist",
    "ACKED": "acked",
    "NACKED": "nacked",
    "TIMEOUT": "timeout",
    "RECEIVED_ERROR": "received_error",
}
"""The ``grpc.xds.cache_state`` value of each CSDS status (gRFC A78, and A88 for
``timeout`` and ``received_error``)."""


@dataclass
class _Server:
    """What the ``connected`` gauge knows of one xDS server."""

    connected: bool = True
    """gRFC A78: 1 from the first stream's creation, 0 after a failure, 1 again on a
    response."""
    answered: bool = False
    """A response arrived on the current stream (its end is then no failure: A57)."""


class OpenTelemetryMetrics:
    """Records gRFC A78's xDS client instruments on an OpenTelemetry meter.

    Args:
        meter_provider: where the instruments live; None takes the global one
            (``opentelemetry.metrics.set_meter_provider``).
        target: the ``grpc.target`` label. gRPC puts the channel's target there (and
            ``"#server"`` for xDS-enabled servers); give the name your application
            knows this client by.

    A server counts as failed (``server_failure`` + 1, ``connected`` 0) when a stream
    to it ends before any response, as gRFC A57 defines; a stream that ended after a
    response is reopened without counting. ``resources`` shows the latest counts per
    authority and cache state, as the client reports them after each change; the
    ``nacked_but_cached`` kinds of state are not told apart from ``nacked`` (the
    client reports CSDS statuses). A server shows in ``connected`` from the first
    stream the client opens to it (1, as A78 says); a stream opened after a failure
    leaves it 0 until that stream's first response.
    """

    def __init__(
        self, meter_provider: MeterProvider | None = None, *, target: str = "xds_client"
    ) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._servers: dict[str, _Server] = {}
        self._resources: dict[str, dict[tuple[str, str], int]] = {}
        meter = otel_metrics.get_meter("xds_client", __version__, meter_provider=meter_provider)
        meter.create_observable_gauge(
            "grpc.xds_client.connected",
            callbacks=[self._observe_connected],
            unit="{bool}",
            description="Whether the xDS client has a working ADS stream to the xDS server.",
        )
        self._failures = meter.create_counter(
            "grpc.xds_client.server_failure",
            unit="{failure}",
            description="xDS servers going from healthy to unhealthy.",
        )
        self._valid = meter.create_counter(
            "grpc.xds_client.resource_updates_valid",
            unit="{resource}",
            description="Resources received that were considered valid.",
        )
        self._invalid = meter.create_counter(
            "grpc.xds_client.resource_updates_invalid",
            unit="{resource}",
            description="Resources received that were considered invalid.",
        )
        meter.create_observable_gauge(
            "grpc.xds_client.resources",
            callbacks=[self._observe_resources],
            unit="{resource}",
            description="Number of xDS resources.",
        )

    # -- the Metrics hooks (called on the client's I/O thread or loop) -----------

    def ack(self, type_url: str, server: str) -> None:
        self._answered(server)

    def nack(self, type_url: str, server: str) -> None:
        self._answered(server)

    def stream_opened(self, server: str) -> None:
        with self._lock:
            self._servers.setdefault(server, _Server())  # a known server keeps its state

    def reconnect(self, server: str) -> None:
        with self._lock:
            state = self._servers.setdefault(server, _Server())
            if state.answered:
                state.answered = False  # the next stream starts afresh
                return
            failed = state.connected
            state.connected = False
        if failed:
            self._failures.add(1, {"grpc.target": self.target, "grpc.xds.server": server})

    def resources(self, type_url: str, counts: Mapping[str, int]) -> None:
        # authority_resources follows with this type's counts: start them afresh, so
        # an authority whose resources all went stops being reported.
        with self._lock:
            self._resources[type_url] = {}

    def authority_resources(self, type_url: str, authority: str, counts: Mapping[str, int]) -> None:
        with self._lock:
            table = self._resources.setdefault(type_url, {})
            for status, count in counts.items():
                if count:
                    state = CACHE_STATES.get(status, status.lower())
                    table[(authority, state)] = table.get((authority, state), 0) + count

    def resource_updates(self, type_url: str, server: str, valid: int, invalid: int) -> None:
        labels = {
            "grpc.target": self.target,
            "grpc.xds.server": server,
            "grpc.xds.resource_type": _resource_type(type_url),
        }
        if valid:
            self._valid.add(valid, labels)
        if invalid:
            self._invalid.add(invalid, labels)

    # -- helpers -----------------------------------------------------------------

    def _answered(self, server: str) -> None:
        with self._lock:
            state = self._servers.setdefault(server, _Server())
            state.answered = True
            state.connected = True

    def _observe_connected(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            servers = [(uri, state.connected) for uri, state in self._servers.items()]
        return [
            Observation(int(up), {"grpc.target": self.target, "grpc.xds.server": uri})
            for uri, up in servers
        ]

    def _observe_resources(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            rows = [
                (type_url, authority, state, count)
                for type_url, table in self._resources.items()
                for (authority, state), count in table.items()
            ]
        return [
            Observation(
                count,
                {
                    "grpc.target": self.target,
                    "grpc.xds.authority": authority,
                    "grpc.xds.cache_state": state,
                    "grpc.xds.resource_type": _resource_type(type_url),
                },
            )
            for type_url, authority, state, count in rows
        ]


def _resource_type(type_url: str) -> str:
    """``envoy.config.listener.v3.Listener`` for its type URL (gRFC A78's label value)."""
    return type_url.rsplit("/", 1)[-1]
