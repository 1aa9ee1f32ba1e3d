"""Unary gRPC ``Fetch*`` polling, on ``grpc`` (threads) and ``grpc.aio`` (asyncio).

Each per-type discovery service has a unary ``Fetch<Type>`` next to its
stream (``FetchClusters``, ``FetchListeners`` ... in v3 and v2). The
transport calls it every poll interval with the latest request (see
:mod:`._polling`). v2 services get the v3 messages: the wire format of
``DiscoveryRequest`` and ``DiscoveryResponse`` is the same, only the type URLs
(from the registry) differ.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Final

import grpc
import grpc.aio
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

from xds_client._backends.threads import open_channel as threads_channel
from xds_client.errors import TransportError, UsageError
from xds_client.resources import resource_type
from xds_client.transport._async_polling_stream import AsyncPollingStream
from xds_client.transport._base import ServerTarget, StreamSpec
from xds_client.transport._grpc_common import (
    _HEALTH_CHECK,
    _answered,
    _raw,
)
from xds_client.transport._polling import PollCall, PollError, PollPolicy
from xds_client.transport._polling_stream import PollingStream

__all__ = ["FetchTransport", "AsyncFetchTransport", "fetch_method_for"]

# Worth polling again: the server or the network may recover.
_RETRYABLE: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)
# go-control-plane answers a Fetch whose version is current with this error.
_UP_TO_DATE_MARKER: Final = "skip fetch"


def fetch_method_for(type_url: str) -> str:
    """The unary ``Fetch*`` path of a type; :class:`UsageError` if it has none."""
    method = resource_type(type_url).fetch_method
    if method is None:
        raise UsageError(f"{type_url} has no unary Fetch method; use transport='grpc'")
    return method


def _serialize(request: DiscoveryRequest) -> bytes:
    return request.SerializeToString()


def _poll_error(method: str, target: ServerTarget, exc: grpc.RpcError) -> PollError | None:
    """A PollError for a failed call, or None when the server said "up to date"."""
    # Sync errors are grpc.Call objects, grpc.aio's AioRpcError is not: ask both alike.
    code_of = getattr(exc, "code", None)
    details_of = getattr(exc, "details", None)
    code = code_of() if callable(code_of) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details = str((details_of() if callable(details_of) else None) or "")
    if _UP_TO_DATE_MARKER in details:
        return None
    where = f"{method} on {target.uri}"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return PollError(
            f"{where}: UNIMPLEMENTED: the server does not serve unary Fetch for this type "
            "(many serve only streams); use transport='grpc'",
            retryable=False,
            status=code,
        )
    return PollError(f"{where}: {code.name}: {details}", retryable=code in _RETRYABLE, status=code)


def _task_cancelling() -> bool:
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling()) if callable(cancelling) else False


def _check_spec(spec: StreamSpec, closed: bool, target: ServerTarget) -> None:
    if closed:
        raise TransportError(f"transport to {target.uri} is closed")
    if spec.delta:
        raise UsageError("unary Fetch polling is SotW only; use transport='grpc' for delta xDS")
    for type_url in spec.type_urls:
        fetch_method_for(type_url)


class _FetchPoster:
    """Performs one unary Fetch at a time; ``close`` cancels the call in flight."""

    def __init__(self, channel: grpc.Channel, target: ServerTarget, timeout: float) -> None:
        self._channel = channel
        self._target = target
        self._timeout = timeout
        self._lock = threading.Lock()
        self._closed = False
        self._in_flight: grpc.Future[DiscoveryResponse] | None = None

    def __call__(self, call: PollCall) -> DiscoveryResponse | None:
        method = fetch_method_for(call.type_url)
        unary = self._channel.unary_unary(
            method,
            request_serializer=_serialize,
            response_deserializer=DiscoveryResponse.FromString,
        )
        future = unary.future(
            call.request,
            timeout=self._timeout,
            metadata=self._target.call_metadata or None,
        )
        with self._lock:
            if self._closed:
                future.cancel()
                raise PollError(f"{method}: the stream was closed", retryable=False)
            self._in_flight = future
        try:
            return future.result()
        except grpc.FutureCancelledError as exc:
            raise PollError(f"{method}: the stream was closed", retryable=False) from exc
        except grpc.RpcError as exc:
            error = _poll_error(method, self._target, exc)
            if error is None:
                return None
            raise error from exc
        finally:
            with self._lock:
                self._in_flight = None

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
        self._channel = threads_channel(target)
        self._lock = threading.Lock()
        self._streams: set[PollingStream] = set()
        self._closed = False

    def open(self, spec: StreamSpec) -> PollingStream:
        """A polling stream for the types in ``spec`` (more may be sent later)."""
        with self._lock:
            _check_spec(spec, self._closed, self.target)
            poster = _FetchPoster(self._channel, self.target, self.policy.request_timeout)
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
        check = self._channel.unary_unary(
            _HEALTH_CHECK, request_serializer=_raw, response_deserializer=_raw
        )
        try:
            check(b"", timeout=timeout, wait_for_ready=True,
                  metadata=self.target.call_metadata or None)  # fmt: skip
        except grpc.RpcError as exc:
            return _answered(exc)
        except ValueError:  # the channel was closed meanwhile
            return False
        return True

    def close(self) -> None:
        """Close every stream and the channel."""
        with self._lock:
            self._closed = True
            streams = list(self._streams)
        for stream in streams:
            stream.close()
        self._channel.close()


class AsyncFetchTransport:
    """The asyncio twin of :class:`FetchTransport`, on ``grpc.aio``."""

    def __init__(self, target: ServerTarget | str, *, policy: PollPolicy | None = None) -> None:
        if isinstance(target, str):
            target = ServerTarget(target)
        self.target = target
        self.policy = policy or PollPolicy()
        self._channel: grpc.aio.Channel | None = None
        self._streams: set[AsyncPollingStream] = set()
        self._closed = False

    def _get_channel(self) -> grpc.aio.Channel:
        # Created on first use so that it binds to the running event loop.
        if self._channel is None:
            from xds_client._backends.asyncio import open_channel

            self._channel = open_channel(self.target)
        return self._channel

    async def open(self, spec: StreamSpec) -> AsyncPollingStream:
        """A polling stream for the types in ``spec`` (more may be sent later)."""
        _check_spec(spec, self._closed, self.target)
        channel = self._get_channel()
        target = self.target
        timeout = self.policy.request_timeout
        stream: AsyncPollingStream | None = None
        in_flight: list[grpc.aio.UnaryUnaryCall[DiscoveryRequest, DiscoveryResponse]] = []

        async def post(call: PollCall) -> DiscoveryResponse | None:
            method = fetch_method_for(call.type_url)
            unary = channel.unary_unary(
                method,
                request_serializer=_serialize,
                response_deserializer=DiscoveryResponse.FromString,
            )
            rpc = unary(call.request, timeout=timeout, metadata=target.call_metadata or None)
            in_flight.append(rpc)
            try:
                response: DiscoveryResponse = await rpc
            except asyncio.CancelledError:
                # close() cancelled the call: report it like a failed poll. A
                # cancellation of our own task must stay a cancellation.
                if stream is not None and stream.closed and not _task_cancelling():
                    raise PollError(f"{method}: the stream was closed", retryable=False) from None
                raise
            except grpc.RpcError as exc:
                error = _poll_error(method, target, exc)
                if error is None:
                    return None
                raise error from exc
            finally:
                in_flight.remove(rpc)
            return response

        async def closed() -> None:
            for rpc in list(in_flight):
                rpc.cancel()
            if stream is not None:
                self._streams.discard(stream)

        stream = AsyncPollingStream(post, self.policy, on_close=closed)
        self._streams.add(stream)
        return stream

    async def probe(self, timeout: float) -> bool:
        """True when the channel becomes ready within ``timeout`` seconds (fallback, A71)."""
        try:
            await asyncio.wait_for(self._get_channel().channel_ready(), timeout)
        except (asyncio.TimeoutError, grpc.RpcError):
            return False
        return True

    async def close(self) -> None:
        """Close every stream and the channel."""
        self._closed = True
        for stream in list(self._streams):
            await stream.close()
        if self._channel is not None:
            await self._channel.close()
