"""Unary gRPC ``Fetch*`` polling on ``grpc.aio`` (asyncio).

Written once for asyncio; ``tools/gen_sync.py`` generates the thread twin
(``_fetch.py``, on ``grpc``) from it; what both share is in :mod:`._fetch_common`.

Each per-type discovery service has a unary ``Fetch<Type>`` next to its
stream (``FetchClusters``, ``FetchListeners`` ... in v3 and v2). The
transport calls it every poll interval with the latest request (see
:mod:`._polling`). v2 services get the v3 messages: the wire format of
``DiscoveryRequest`` and ``DiscoveryResponse`` is the same, only the type URLs
(from the registry) differ.
"""

from __future__ import annotations

import threading
from typing import Any

import grpc
import grpc.aio  # async-only
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

from xds_client._backends.asyncio import CALL_CANCELLED, call_result, open_channel, start_call
from xds_client.transport._async_grpc import health_probe
from xds_client.transport._async_polling_stream import AsyncPollingStream
from xds_client.transport._base import ServerTarget, StreamSpec
from xds_client.transport._channel import channel_arguments
from xds_client.transport._fetch_common import (
    check_spec,
    fetch_method_for,
    poll_error,
    serialize,
)
from xds_client.transport._polling import PollCall, PollError, PollPolicy

__all__ = ["AsyncFetchTransport", "fetch_method_for"]


class _FetchPoster:
    """Performs one unary Fetch at a time; ``close`` cancels the call in flight."""

    def __init__(self, channel: grpc.aio.Channel, target: ServerTarget, timeout: float) -> None:
        self._channel = channel
        self._target = target
        self._timeout = timeout
        self._lock = threading.Lock()
        self._closed = False
        self._in_flight: Any = None

    async def __call__(self, call: PollCall) -> DiscoveryResponse | None:
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
            response: DiscoveryResponse = await call_result(rpc)
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


class AsyncFetchTransport:
    """Polls a server's unary ``Fetch*`` methods from asyncio; one channel for all streams.

    The stream's ``spec.method`` is not used: each type is fetched from its own
    service's ``Fetch<Type>`` method (v3 or v2, by its type URL).
    """

    def __init__(self, target: ServerTarget | str, *, policy: PollPolicy | None = None) -> None:
        if isinstance(target, str):
            target = ServerTarget(target)
        self.target = target
        self.policy = policy or PollPolicy()
        self._lock = threading.Lock()
        self._channel: grpc.aio.Channel | None = None
        self._streams: set[AsyncPollingStream] = set()
        self._closed = False
        # A thread channel needs no loop: built at once.
        # sync-only: self._channel = open_channel(*channel_arguments(target))

    def _get_channel(self) -> grpc.aio.Channel:
        # asyncio: created on first use, so that it binds to the running loop. Under _lock.
        if self._channel is None:
            self._channel = open_channel(*channel_arguments(self.target))
        return self._channel

    async def open(self, spec: StreamSpec) -> AsyncPollingStream:
        """A polling stream for the types in ``spec`` (more may be sent later)."""
        with self._lock:
            check_spec(spec, self._closed, self.target)
            poster = _FetchPoster(self._get_channel(), self.target, self.policy.request_timeout)
            stream: AsyncPollingStream | None = None

            async def closed() -> None:
                poster.close()
                with self._lock:
                    if stream is not None:
                        self._streams.discard(stream)

            stream = AsyncPollingStream(poster, self.policy, on_close=closed)
            self._streams.add(stream)
            return stream

    async def probe(self, timeout: float) -> bool:
        """True when the server answers a health check within ``timeout`` seconds (A71).

        A plain RPC, as in the streaming transport: ``channel_ready_future``'s polling
        thread outlives a channel closed meanwhile and dies with a traceback.
        """
        with self._lock:
            if self._closed:
                return False
            channel = self._get_channel()
        return await health_probe(channel, self.target, timeout)

    async def close(self) -> None:
        """Close every stream and the channel."""
        with self._lock:
            self._closed = True
            streams = list(self._streams)
            channel = self._channel
        for stream in streams:
            await stream.close()
        if channel is not None:
            await channel.close()
