"""Bidirectional gRPC streams for xDS on ``grpc.aio`` (asyncio).

Written once for asyncio; ``tools/gen_sync.py`` generates the thread twin
(``_grpc.py``, on ``grpc``) from it. What differs between the two is in
:mod:`xds_client._backends`; what they share (channel arguments, credentials,
framing, status mapping) is in :mod:`._grpc_common`.

Streams use generic method paths with the discovery messages' own
serializers, so one channel serves ADS, the per-type services, delta and the
v2 paths alike.
"""

from __future__ import annotations

import asyncio  # async-only
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import grpc
import grpc.aio  # async-only

from xds_client._backends.asyncio import (
    DIRECT_READS,
    AsyncInbox,
    AsyncWorker,
    Empty,
    open_channel,
    read_response,
    spawn,
)
from xds_client.errors import TransportError

from ._base import Request, Response, ServerTarget, StreamSpec
from ._channel import channel_arguments, channel_credentials, channel_options, credential_files
from ._grpc_common import (
    _END,
    _HEALTH_CHECK,
    _answered,
    _deserializer,
    _End,
    _raw,
    _rpc_error,
    _serialize,
)

__all__ = [
    "AsyncGrpcTransport",
    "AsyncGrpcStream",
    "channel_options",
    "channel_credentials",
    "health_probe",
]

log = logging.getLogger("xds_client.transport.grpc")

_CLOSE_JOIN_TIMEOUT: Final = 1.0


class AsyncGrpcStream:
    """A bidi stream: gRPC drains our request queue, a reader task fills the response queue.

    :meth:`send` only queues the request, so it never waits on the network: a write
    cannot complete while the channel is still connecting or the server has not yet
    admitted the stream, and the client's I/O task must not wait for it.
    """

    def __init__(
        self,
        factory: grpc.aio.StreamStreamMultiCallable[Request, Response],
        spec: StreamSpec,
        target: ServerTarget,
    ) -> None:
        self._spec = spec
        self._target = target
        self._closed = False
        self._requests: AsyncInbox[Request | None] = AsyncInbox()
        self._responses: AsyncInbox[Response | TransportError | _End] = AsyncInbox()
        self._on_written: Callable[[], object] | None = None
        self._call: Any = factory(self._request_iter(), metadata=target.call_metadata or None)
        self._lock = threading.Lock()
        self._reader: AsyncWorker | None = None
        if not DIRECT_READS:
            self._start_reader()

    async def _request_iter(self) -> AsyncIterator[Request]:
        while True:
            item = await self._requests.get(None)
            if item is None or isinstance(item, Empty):
                return
            yield item
            # gRPC asks for the next request only once this one's write completed.
            if (on_written := self._on_written) is not None:
                on_written()

    def notify_written(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (from gRPC's side of the stream) each time a request is written.

        A write completes only on a connected channel, on a stream the server's
        HTTP/2 admitted (not past its ``max_concurrent_streams``): gRFC A57's sign
        that a request is on the wire, when its does-not-exist timers start (as in
        gRPC C-core and grpc-go).
        """
        self._on_written = callback

    async def _read(self) -> None:
        try:
            while True:
                response = await read_response(self._call)
                if response is None:
                    self._responses.put(_END)
                    return
                self._responses.put(response)
        # begin async-only
        except asyncio.CancelledError:
            return
        # end async-only
        except grpc.RpcError as exc:
            if not self._closed:
                error = _rpc_error(self._spec, self._target, exc)
                error.__cause__ = exc
                self._responses.put(error)
        except Exception as exc:  # a deserialization failure ends the stream, too
            error = TransportError(f"{self._spec.method} on {self._target.uri}: {exc}")
            error.__cause__ = exc
            self._responses.put(error)

    def _start_reader(self) -> None:
        with self._lock:
            if self._reader is None:
                name = f"xds-grpc-reader {self._spec.method.rsplit('/', 1)[-1]}"
                self._reader = spawn(self._read, name=name)

    async def send(self, request: Request) -> None:
        if self._closed:
            raise TransportError(f"{self._spec.method}: stream is closed")
        self._requests.put(request)

    async def _recv_direct(self) -> Response:
        try:
            response: Response | None = await read_response(self._call)
        except grpc.RpcError as exc:
            if self._closed:
                raise TransportError(f"{self._spec.method}: stream closed locally") from exc
            raise _rpc_error(self._spec, self._target, exc) from exc
        except Exception as exc:  # a deserialization failure ends the stream, too
            raise TransportError(f"{self._spec.method} on {self._target.uri}: {exc}") from exc
        if response is None:
            raise TransportError(f"{self._spec.method} on {self._target.uri}: server ended stream")
        return response

    async def recv(self, timeout: float | None) -> Response | None:
        if timeout is None and self._reader is None:  # only where DIRECT_READS
            if self._closed:
                raise TransportError(f"{self._spec.method}: stream closed locally")
            return await self._recv_direct()
        self._start_reader()
        item = await self._responses.get(timeout)
        if isinstance(item, Empty):
            return None
        if isinstance(item, TransportError):
            self._responses.put(item)  # stays failed for later calls
            raise item
        if isinstance(item, _End):
            self._responses.put(item)
            raise TransportError(f"{self._spec.method} on {self._target.uri}: server ended stream")
        return item

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._requests.put(None)
        self._call.cancel()
        # begin async-only
        # grpc.aio's request writer waits for "initial metadata sent" before its first
        # write, and its cancel() stops that task only on a live call: when the call
        # ended first (a server gone before the stream started), the task would wait
        # for ever and outlive the loop ("Task was destroyed but it is pending").
        writer = getattr(self._call, "_async_request_poller", None)
        if writer is not None and not writer.done():
            writer.cancel()
        # end async-only
        # Wake a recv() that is waiting, so its caller notices the close at once
        # (a direct recv(None) is woken by the cancel).
        self._responses.put(TransportError(f"{self._spec.method}: stream closed locally"))
        if (reader := self._reader) is not None:
            reader.cancel()
            await reader.join(_CLOSE_JOIN_TIMEOUT)


async def health_probe(channel: grpc.aio.Channel, target: ServerTarget, timeout: float) -> bool:
    """True when the server answers a health check within ``timeout`` seconds.

    Used to tell watchers that a stream is up when the server has nothing to
    send; never to pick a server (gRFC A71 counts only a working xDS stream),
    nor to start timers (A57). Any answer counts, UNIMPLEMENTED
    included; a plain RPC is used rather than a connectivity subscription, whose
    polling thread outlives the channel.
    """
    check = channel.unary_unary(_HEALTH_CHECK, request_serializer=_raw, response_deserializer=_raw)
    try:
        await check(
            b"", timeout=timeout, wait_for_ready=True, metadata=target.call_metadata or None
        )
    except grpc.RpcError as exc:
        return _answered(exc)
    except ValueError:  # the channel was closed meanwhile
        return False
    return True


class AsyncGrpcTransport:
    """gRPC transport for asyncio: one ``grpc.aio`` channel to one server, any number of streams."""

    def __init__(self, target: ServerTarget) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._channel: grpc.aio.Channel | None = None
        self._files: tuple[tuple[str, int, int], ...] = ()
        self._retired: list[grpc.aio.Channel] = []
        self._streams: list[AsyncGrpcStream] = []
        self._closed = False
        # A thread channel needs no loop: built at once, bad TLS files fail here.
        # sync-only: self._get_channel()

    def _get_channel(self) -> grpc.aio.Channel:
        # asyncio: created on first use, so that the channel binds to the running loop.
        with self._lock:
            if self._closed:
                raise TransportError(f"transport to {self.target.uri} is closed")
            if (
                self._channel is not None
                and self._files
                and credential_files(self.target) != self._files
            ):
                log.info("TLS files of %s changed; new channel", self.target.uri)
                self._retired.append(self._channel)
                self._channel = None
            if self._channel is None:
                self._files = credential_files(self.target)
                log.debug("channel to %s", self.target.describe())
                self._channel = open_channel(*channel_arguments(self.target))
            return self._channel

    async def open(self, spec: StreamSpec) -> AsyncGrpcStream:
        factory = self._get_channel().stream_stream(
            spec.method, request_serializer=_serialize, response_deserializer=_deserializer(spec)
        )
        with self._lock:
            if self._closed:
                raise TransportError(f"transport to {self.target.uri} is closed")
            self._streams = [s for s in self._streams if not s._closed]
            stream = AsyncGrpcStream(factory, spec, self.target)
            self._streams.append(stream)
        return stream

    async def probe(self, timeout: float) -> bool:
        """True when the server answers a health check within ``timeout`` seconds."""
        try:
            channel = self._get_channel()
        except TransportError:  # closed
            return False
        return await health_probe(channel, self.target, timeout)

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            streams, self._streams = self._streams, []
            retired, self._retired = self._retired, []
            channel, self._channel = self._channel, None
        for stream in streams:
            await stream.close()
        for each in (*retired, *([channel] if channel is not None else [])):
            await each.close()
