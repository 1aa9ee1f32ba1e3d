# Generated from xds_client/transport/_async_fetch.py by tools/gen_sync.py: do not edit.
"""Unary gRPC ``Fetch*`` polling on ``grpc`` (threads).

Generated from ``_async_fetch.py`` with the thread backend; what both share is in
:mod:`._fetch_common`, the polling rules in :mod:`._polling`.
"""

from __future__ import annotations

import threading
from typing import Any

import grpc
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

from xds_client._backends.threads import CALL_CANCELLED, call_result, open_channel, start_call
from xds_client.transport._base import ServerTarget, StreamSpec
from xds_client.transport._channel import channel_arguments
from xds_client.transport._fetch_common import (
    check_spec,
    fetch_method_for,
    poll_error,
    serialize,
)
from xds_client.transport._grpc import health_probe
from xds_client.transport._polling import PollCall, PollError, PollPolicy
from xds_client.transport._polling_stream import PollingStream

__all__ = ["FetchTransport", "fetch_method_for"]


class _FetchPoster:
    """Performs one unary Fetch at a time; ``close`` cancels the call in flight."""

    def __init__(self, channel: grpc.Channel, target: ServerTarget, timeout: float) -> None:
        self._channel = channel
        self._target = target
        self._timeout = timeout
        self._lock = threading.Lock()
        self._closed = False
        self._in_flight: Any = None

    def __call__(self, call: PollCall) -> DiscoveryResponse | None:
        method = fetch_method_for(call.type_url)
        unary = self._channel.unary_unary(
            method,
            request_serializer=serialize,
            response_deserializer=DiscoveryResponse.FromString,
        )
        rpc = start_call(
            unary, call.request, timeout=self._timeout, metadata=self._target.call_metadata or None
        )
        with self._lock:
            if self._closed:
                rpc.cancel()
                raise PollError(f"{method}: the stream was closed", retryable=False)
            self._in_flight = rpc
        try:
            response: DiscoveryResponse = call_result(rpc)
        except CALL_CANCELLED as exc:  # close() cancelled the call
            raise PollError(f"{method}: the stream was closed", retryable=False) from exc
        except grpc.RpcError as exc:
            error = poll_error(method, self._target, exc)
            if error is None:
                return None
            raise error from exc
        finally:
            with self._lock:
                self._in_flight = None
        return response

    def close(self) -> None:
        with self._lock:
            self._closed = True
            in_flight = self._in_flight
        if in_flight is not None:
            in_flight.cancel()


class FetchTransport:
    """Polls a server's unary ``Fetch*`` methods from threads; one channel for all streams.

    The stream's ``spec.method`` is not used: each type is fetched from its own
    service's ``Fetch<Type>`` method (v3 or v2, by its type URL).
    """

    def __init__(self, target: ServerTarget | str, *, policy: PollPolicy | None = None) -> None:
        if isinstance(target, str):
            target = ServerTarget(target)
        self.target = target
        self.policy = policy or PollPolicy()
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._streams: set[PollingStream] = set()
        self._closed = False
        # A thread channel needs no loop: built at once.
        self._channel = open_channel(*channel_arguments(target))

    def _get_channel(self) -> grpc.Channel:
        # asyncio: created on first use, so that it binds to the running loop. Under _lock.
        if self._channel is None:
            self._channel = open_channel(*channel_arguments(self.target))
        return self._channel

    def open(self, spec: StreamSpec) -> PollingStream:
        """A polling stream for the types in ``spec`` (more may be sent later)."""
        with self._lock:
            check_spec(spec, self._closed, self.target)
            poster = _FetchPoster(self._get_channel(), self.target, self.policy.request_timeout)
            stream: PollingStream | None = None

            def closed() -> None:
                poster.close()
                with self._lock:
                    if stream is not None:
                        self._streams.discard(stream)

            stream = PollingStream(poster, self.policy, on_close=closed)
            self._streams.add(stream)
            return stream

    def probe(self, timeout: float) -> bool:
        """True when the server answers a health check within ``timeout`` seconds (A71).

        A plain RPC, as in the streaming transport: ``channel_ready_future``'s polling
        thread outlives a channel closed meanwhile and dies with a traceback.
        """
        with self._lock:
            if self._closed:
                return False
            channel = self._get_channel()
        return health_probe(channel, self.target, timeout)

    def close(self) -> None:
        """Close every stream and the channel."""
        with self._lock:
            self._closed = True
            streams = list(self._streams)
            channel = self._channel
        for stream in streams:
            stream.close()
        if channel is not None:
            channel.close()
