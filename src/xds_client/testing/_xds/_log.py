"""What the control plane saw and sent, and bounded waits on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.rpc.status_pb2 import Status

from xds_client.errors import WaitTimeoutError

__all__ = [
    "RecordedRequest",
    "RecordedResponse",
    "RequestKind",
    "RequestLog",
    "StreamInfo",
    "StreamKind",
    "Subscription",
]

StreamKind = Literal["sotw", "delta", "fetch", "rest"]
RequestKind = Literal["initial", "ack", "nack", "stale", "request"]

T = TypeVar("T")


@dataclass(frozen=True)
class StreamInfo:
    """One stream (or one unary ``Fetch``/REST call) as the control plane saw it."""

    id: int
    """Sequence number of the stream, from 1, unique within the control plane."""
    kind: StreamKind
    """``"sotw"`` or ``"delta"`` for gRPC streams, ``"fetch"`` or ``"rest"`` for polls."""
    method: str
    """gRPC method path or HTTP path, e.g. ``/envoy.service.discovery.v3.Aggregated...``."""
    peer: str
    """The client's address as gRPC or HTTP reports it."""
    node: Node | None
    """The first ``node`` the client sent on the stream."""
    opened_at: float
    """``time.monotonic()`` when the stream opened."""
    closed_at: float | None = None
    """``time.monotonic()`` when it ended; None while it is open."""

    @property
    def active(self) -> bool:
        """True while the stream is open."""
        return self.closed_at is None

    @property
    def node_id(self) -> str | None:
        """``node.id`` of the stream, or None when no node was sent yet."""
        return self.node.id if self.node is not None else None


@dataclass(frozen=True)
class RecordedRequest:
    """A request received, classified against what was sent on its stream."""

    seq: int
    """Position in the control plane's log, from 0."""
    stream_id: int
    """:attr:`StreamInfo.id` of the stream that carried it."""
    kind: StreamKind
    """Kind of the stream."""
    type_url: str
    """Type URL of the request (the service's type when the request left it empty)."""
    message: DiscoveryRequest | DeltaDiscoveryRequest
    """The request as received."""
    classification: RequestKind
    """``"initial"`` (first of its type on the stream), ``"ack"``, ``"nack"``,
    ``"stale"`` (answers an older SotW nonce) or ``"request"`` (anything else)."""
    response_version: str | None
    """Version of the response whose nonce the request carries, if any (for delta,
    that response's ``system_version_info``)."""
    received_at: float
    """``time.monotonic()`` at arrival."""

    @property
    def is_ack(self) -> bool:
        """True when the request accepts one of our responses (its nonce is known and it
        has no ``error_detail``), even if a newer response was sent meanwhile."""
        return self.response_version is not None and not self.message.HasField("error_detail")

    @property
    def is_nack(self) -> bool:
        """True when the request rejects one of our responses (``error_detail`` is set
        on a known nonce), even if a newer response was sent meanwhile."""
        return self.response_version is not None and self.message.HasField("error_detail")

    @property
    def error_detail(self) -> Status | None:
        """The NACK's ``google.rpc.Status``, or None."""
        return self.message.error_detail if self.message.HasField("error_detail") else None

    @property
    def version_info(self) -> str:
        """SotW ``version_info`` (the last version the client accepted); ``""`` for delta."""
        return self.message.version_info if isinstance(self.message, DiscoveryRequest) else ""

    @property
    def resource_names(self) -> list[str]:
        """SotW ``resource_names``, or delta ``resource_names_subscribe``."""
        if isinstance(self.message, DiscoveryRequest):
            return list(self.message.resource_names)
        return list(self.message.resource_names_subscribe)


@dataclass(frozen=True)
class Subscription:
    """What one stream is subscribed to for one type, as the control plane tracks it."""

    wildcard: bool
    """True for a wildcard subscription (legacy empty first request, or ``"*"``)."""
    names: frozenset[str]
    """Names subscribed explicitly (besides a wildcard)."""


@dataclass(frozen=True)
class RecordedResponse:
    """A response the control plane sent."""

    seq: int
    """Position among responses, from 0."""
    stream_id: int
    """Stream that carried it."""
    type_url: str
    """Type URL of the response."""
    version: str
    """``version_info`` (SotW) or ``system_version_info`` (delta)."""
    nonce: str
    """The response's nonce."""
    message: DiscoveryResponse | DeltaDiscoveryResponse | bytes
    """The response as sent (raw bytes for a malformed one)."""
    sent_at: float
    """``time.monotonic()`` when handed to gRPC."""


class RequestLog:
    """Thread-safe log of streams, requests and responses, with condition waits."""

    def __init__(self) -> None:
        # Reentrant: wait() probes may call streams()/stream() under the lock.
        self._cond = threading.Condition(threading.RLock())
        self._streams: dict[int, StreamInfo] = {}
        self._requests: list[RecordedRequest] = []
        self._responses: list[RecordedResponse] = []
        self._subscriptions: dict[int, dict[str, Subscription]] = {}

    # -- recording -----------------------------------------------------------

    def open_stream(
        self,
        kind: StreamKind,
        method: str,
        peer: str,
        on_open: Callable[[StreamInfo], None] | None = None,
    ) -> StreamInfo:
        """Record a new stream; ``on_open(info)`` runs before any waiter wakes."""
        with self._cond:
            info = StreamInfo(len(self._streams) + 1, kind, method, peer, None, time.monotonic())
            self._streams[info.id] = info
            if on_open is not None:
                on_open(info)
            self._cond.notify_all()
            return info

    def set_node(self, stream_id: int, node: Node) -> None:
        with self._cond:
            self._streams[stream_id] = replace(self._streams[stream_id], node=node)
            self._cond.notify_all()

    def close_stream(self, stream_id: int) -> None:
        with self._cond:
            info = self._streams[stream_id]
            if info.closed_at is None:
                self._streams[stream_id] = replace(info, closed_at=time.monotonic())
            self._cond.notify_all()

    def add_request(
        self,
        stream_id: int,
        *,
        kind: StreamKind,
        type_url: str,
        message: DiscoveryRequest | DeltaDiscoveryRequest,
        classification: RequestKind,
        response_version: str | None,
    ) -> RecordedRequest:
        with self._cond:
            rec = RecordedRequest(
                len(self._requests),
                stream_id,
                kind,
                type_url,
                message,
                classification,
                response_version,
                time.monotonic(),
            )
            self._requests.append(rec)
            self._cond.notify_all()
            return rec

    def add_response(
        self,
        stream_id: int,
        type_url: str,
        version: str,
        nonce: str,
        message: DiscoveryResponse | DeltaDiscoveryResponse | bytes,
    ) -> RecordedResponse:
        with self._cond:
            rec = RecordedResponse(
                len(self._responses), stream_id, type_url, version, nonce, message, time.monotonic()
            )
            self._responses.append(rec)
            self._cond.notify_all()
            return rec

    def set_subscription(self, stream_id: int, type_url: str, subscription: Subscription) -> None:
        with self._cond:
            self._subscriptions.setdefault(stream_id, {})[type_url] = subscription
            self._cond.notify_all()

    # -- reading -------------------------------------------------------------

    def subscriptions(self, type_url: str) -> dict[int, Subscription]:
        """Subscriptions to ``type_url`` of the open streams, by stream id."""
        with self._cond:
            return {
                stream_id: by_type[type_url]
                for stream_id, by_type in self._subscriptions.items()
                if type_url in by_type and self._streams[stream_id].active
            }

    def streams(self) -> list[StreamInfo]:
        with self._cond:
            return list(self._streams.values())

    def stream(self, stream_id: int) -> StreamInfo:
        with self._cond:
            return self._streams[stream_id]

    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    def responses(self) -> list[RecordedResponse]:
        with self._cond:
            return list(self._responses)

    def wait(
        self,
        probe: Callable[[Sequence[RecordedRequest]], T | None],
        timeout: float,
        what: Callable[[Sequence[RecordedRequest]], str],
    ) -> T:
        """Wait until ``probe(requests)`` returns non-None; re-checked on every change.

        ``probe`` and ``what`` run under the log's lock and get the live request
        list (read it, do not keep it); they may call the log's other readers.
        """
        __tracebackhide__ = True  # a failed wait points at the test, not here
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = probe(self._requests)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    detail = what(self._requests)
                    raise WaitTimeoutError(f"timed out after {timeout:g}s waiting for {detail}")
                self._cond.wait(left)
