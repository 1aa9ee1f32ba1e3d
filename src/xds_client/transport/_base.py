"""The seam between the client's drivers and the I/O that carries xDS messages.

A :class:`Transport` opens :class:`Stream` objects for one server. Streaming
gRPC, unary ``Fetch*`` polling and REST-JSON polling all look like a stream to
the driver: requests go in with :meth:`Stream.send`, responses come out of
:meth:`Stream.recv`, and a failure raises :class:`~xds_client.errors.TransportError`
with the gRPC or HTTP status as its ``__cause__``.

Requests and responses are always the v3 message classes; the v2 API shares
their wire format, so v2 streams send them on the v2 method paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import UsageError

if TYPE_CHECKING:
    import grpc

__all__ = [
    "DEFAULT_MAX_RECEIVE_MESSAGE_SIZE",
    "ADS_METHOD",
    "ADS_DELTA_METHOD",
    "V2_ADS_METHOD",
    "V2_ADS_DELTA_METHOD",
    "Request",
    "Response",
    "PemSource",
    "ChannelCredentialsConfig",
    "Keepalive",
    "ServerTarget",
    "StreamSpec",
    "Stream",
    "AsyncStream",
    "Transport",
    "AsyncTransport",
    "ReportsWrites",
    "read_pem",
    "REDACTED",
]

Request: TypeAlias = DiscoveryRequest | DeltaDiscoveryRequest
Response: TypeAlias = DiscoveryResponse | DeltaDiscoveryResponse

# A SotW CDS of ~13k clusters already exceeds gRPC's 4 MiB default.
DEFAULT_MAX_RECEIVE_MESSAGE_SIZE = 256 * 1024 * 1024

ADS_METHOD = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
ADS_DELTA_METHOD = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
V2_ADS_METHOD = "/envoy.service.discovery.v2.AggregatedDiscoveryService/StreamAggregatedResources"
V2_ADS_DELTA_METHOD = (
    "/envoy.service.discovery.v2.AggregatedDiscoveryService/DeltaAggregatedResources"
)

REDACTED = "[redacted]"
"""What stands for a secret in reprs, dumps and messages (tokens, keys, call credentials)."""

PemSource: TypeAlias = "bytes | str | os.PathLike[str]"
"""PEM data: ``bytes`` are the PEM content itself, ``str`` or a path names a file."""


def read_pem(source: PemSource | None, *, what: str) -> bytes | None:
    """Return PEM bytes from inline bytes or a file path; UsageError names ``what``."""
    if source is None or isinstance(source, bytes):
        return source
    try:
        # open(), not pathlib: pathlib (and urllib.parse under it) would be imported
        # by every client for a file read only with TLS.
        with open(source, "rb") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {what} from {os.fspath(source)!r}: {exc}") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelCredentialsConfig:
    """TLS for a channel: a CA to trust, and for mTLS a client certificate and key.

    Each value is PEM bytes or a file path. With no ``ca_certificate`` the
    system roots are used. ``private_key`` is never shown in ``repr``.
    """

    ca_certificate: PemSource | None = None
    """Root certificates that sign the server's certificate."""
    certificate_chain: PemSource | None = None
    """Client certificate chain for mTLS."""
    private_key: PemSource | None = field(default=None, repr=False)
    """Client private key for mTLS (kept out of ``repr`` and logs)."""
    server_name_override: str | None = None
    """Check the server certificate against this name instead of the URI's host."""

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise UsageError("mTLS needs both certificate_chain and private_key, or neither")


@dataclass(frozen=True, slots=True, kw_only=True)
class Keepalive:
    """HTTP/2 keepalive pings; the server must permit the interval."""

    time: float = 300.0
    """Seconds between pings on an idle connection."""
    timeout: float = 20.0
    """Seconds to wait for a ping's ack before the connection is considered dead."""
    permit_without_calls: bool = False
    """Ping even when no stream is open."""


@dataclass(frozen=True, slots=True)
class ServerTarget:
    """One xDS server, from client arguments or a bootstrap file."""

    uri: str
    """``host:port`` (or any gRPC target) for gRPC, ``http(s)://host:port`` for REST."""
    credentials: ChannelCredentialsConfig | None = None
    """TLS settings; None means an insecure (plaintext) channel."""
    call_metadata: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Metadata on every call, e.g. ``("authorization", "Bearer ...")``; never logged."""
    call_credentials: grpc.CallCredentials | None = field(default=None, repr=False)
    """gRPC call credentials (gRPC transports only; they need TLS)."""
    server_features: frozenset[str] = frozenset()
    """Bootstrap ``server_features`` such as ``ignore_resource_deletion``."""
    keepalive: Keepalive | None = None
    """Keepalive pings; None leaves gRPC's defaults."""
    max_receive_message_size: int = DEFAULT_MAX_RECEIVE_MESSAGE_SIZE
    """Largest response accepted, in bytes."""
    channel_options: tuple[tuple[str, str | int], ...] = ()
    """Extra gRPC channel arguments, appended after ours."""

    def describe(self) -> str:
        """A log-safe description: URI and security, no secrets."""
        security = "insecure" if self.credentials is None else "tls"
        if self.credentials is not None and self.credentials.private_key is not None:
            security = "mtls"
        extras = ""
        if self.call_metadata or self.call_credentials is not None:
            extras = f", call credentials {REDACTED}"
        return f"{self.uri} ({security}{extras})"


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """What one stream carries."""

    method: str
    """gRPC method path (ADS or a per-type service), or a type's fetch method / REST path."""
    delta: bool
    """True for incremental (delta) xDS."""
    type_urls: tuple[str, ...]
    """The types the stream carries (every subscribed type for ADS)."""
    raw_resources: bool = False
    """SotW over gRPC only: responses may come as ``RawDiscoveryResponse`` (each resource the
    serialized bytes of its ``Any``), which the SotW protocol core takes as well."""


@runtime_checkable
class Stream(Protocol):
    """A bidirectional xDS stream, driven from threads."""

    def send(self, request: Request) -> None:
        """Queue a request; never blocks on the network."""

    def recv(self, timeout: float | None) -> Response | None:
        """The next response, or None if none arrived within ``timeout`` seconds.

        Raises :class:`~xds_client.errors.TransportError` when the stream failed
        or the server closed it.
        """

    def close(self) -> None:
        """Cancel the stream; idempotent, returns promptly."""


@runtime_checkable
class AsyncStream(Protocol):
    """The asyncio twin of :class:`Stream`."""

    async def send(self, request: Request) -> None:
        """Queue a request; never waits on the network (the driver's I/O task calls it)."""

    async def recv(self, timeout: float | None) -> Response | None:
        """The next response, or None after ``timeout`` seconds; TransportError on failure."""

    async def close(self) -> None:
        """Cancel the stream; idempotent."""


@runtime_checkable
class ReportsWrites(Protocol):
    """A stream (sync or async) that tells when each request was written (gRFC A57).

    The gRPC streams do: the client then starts a request's does-not-exist timers only
    once it is on the wire. A stream without it is taken as written at once.
    """

    def notify_written(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (from the stream's own thread or task) after each write."""


@runtime_checkable
class Transport(Protocol):
    """Opens streams to one server; owns the channel."""

    def open(self, spec: StreamSpec) -> Stream:
        """Start a stream; connection errors surface from the stream's ``recv``."""

    def probe(self, timeout: float) -> bool:
        """Whether the server answers within ``timeout`` seconds (a silent stream is up)."""

    def close(self) -> None:
        """Close every stream and the channel."""


@runtime_checkable
class AsyncTransport(Protocol):
    """The asyncio twin of :class:`Transport`."""

    async def open(self, spec: StreamSpec) -> AsyncStream:
        """Start a stream."""

    async def probe(self, timeout: float) -> bool:
        """Whether the server answers within ``timeout`` seconds."""

    async def close(self) -> None:
        """Close every stream and the channel."""
