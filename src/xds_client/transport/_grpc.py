"""Bidirectional gRPC streams for xDS, on ``grpc`` (threads) and ``grpc.aio`` (asyncio).

Streams use generic method paths with the discovery messages' own
serializers, so one channel serves ADS, the per-type services, delta and the
v2 paths alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import grpc
import grpc.aio
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryResponse,
    DiscoveryResponse,
)

from xds_client.errors import TransportError
from xds_client.protocol._raw import raw_response_class

from ._base import (
    ChannelCredentialsConfig,
    Request,
    Response,
    ServerTarget,
    StreamSpec,
    read_pem,
)

__all__ = [
    "GrpcTransport",
    "GrpcStream",
    "AsyncGrpcTransport",
    "AsyncGrpcStream",
    "channel_options",
    "channel_credentials",
]

log = logging.getLogger("xds_client.transport.grpc")

_CLOSE_JOIN_TIMEOUT: Final = 1.0


def channel_options(target: ServerTarget) -> list[tuple[str, Any]]:
    """gRPC channel arguments for a target: message size, keepalive, TLS name, extras."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", target.max_receive_message_size),
        # The client backs off itself; a fresh stream should try to connect at once.
        ("grpc.enable_retries", 0),
    ]
    if target.keepalive is not None:
        ka = target.keepalive
        options += [
            ("grpc.keepalive_time_ms", int(ka.time * 1000)),
            ("grpc.keepalive_timeout_ms", int(ka.timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", int(ka.permit_without_calls)),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    creds = target.credentials
    if creds is not None and creds.server_name_override:
        options.append(("grpc.ssl_target_name_override", creds.server_name_override))
    options += list(target.channel_options)
    return options


def channel_credentials(target: ServerTarget) -> grpc.ChannelCredentials | None:
    """TLS (and call) credentials for a target, or None for a plaintext channel."""
    creds: ChannelCredentialsConfig | None = target.credentials
    if creds is None:
        if target.call_credentials is not None:
            # gRPC only sends call credentials over a secure channel; local TCP counts.
            return grpc.composite_channel_credentials(
                grpc.local_channel_credentials(), target.call_credentials
            )
        return None
    ssl = grpc.ssl_channel_credentials(
        root_certificates=read_pem(creds.ca_certificate, what="ca_certificate"),
        private_key=read_pem(creds.private_key, what="private_key"),
        certificate_chain=read_pem(creds.certificate_chain, what="certificate_chain"),
    )
    if target.call_credentials is not None:
        return grpc.composite_channel_credentials(ssl, target.call_credentials)
    return ssl


def credential_files(target: ServerTarget) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of each TLS file the target names (gRFC A65 file watcher).

    A channel built from these files is rebuilt when this changes, so a rotated
    CA, certificate or key is used from the next stream on, without a restart.
    """
    creds = target.credentials
    if creds is None:
        return ()
    out = []
    for source in (creds.ca_certificate, creds.certificate_chain, creds.private_key):
        if source is None or isinstance(source, bytes):
            continue
        try:
            stat = os.stat(source)
        except OSError:
            continue  # reported by read_pem when the channel is (re)built
        out.append((os.fspath(source), stat.st_mtime_ns, stat.st_size))
    return tuple(out)


def _serialize(message: Request) -> bytes:
    return message.SerializeToString()


def _deserializer(spec: StreamSpec) -> Callable[[bytes], Response]:
    if spec.delta:
        return DeltaDiscoveryResponse.FromString
    if spec.raw_resources:
        # Resources stay serialized: the SotW core recognises unchanged ones by their bytes.
        return raw_response_class().FromString  # type: ignore[return-value]
    return DiscoveryResponse.FromString


def _rpc_error(spec: StreamSpec, target: ServerTarget, exc: grpc.RpcError) -> TransportError:
    # grpc.RpcError from sync calls and AioRpcError both offer code() and details().
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else str(exc)
    name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    return TransportError(f"{spec.method} on {target.uri}: {name}: {details}")


_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_UNREACHABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
)


def _raw(data: bytes) -> bytes:
    return data


def _answered(exc: grpc.RpcError) -> bool:
    """Whether a failed probe still proves that the server is there (e.g. UNIMPLEMENTED)."""
    code_fn = getattr(exc, "code", None)
    code = code_fn() if callable(code_fn) else None
    return isinstance(code, grpc.StatusCode) and code not in _UNREACHABLE


class _End:
    """Marks the end of the response queue (server closed the stream cleanly)."""


_END: Final = _End()


class GrpcStream:
    """A sync bidi stream: gRPC's request thread reads our queue, a reader thread fills ours."""

    def __init__(
        self,
        call_factory: grpc.StreamStreamMultiCallable[Request, Response],
        spec: StreamSpec,
        target: ServerTarget,
    ) -> None:
        self._spec = spec
        self._target = target
        self._closed = False
        self._requests: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._responses: queue.SimpleQueue[Response | TransportError | _End] = queue.SimpleQueue()
        metadata = target.call_metadata or None
        self._call: Any = call_factory(self._request_iter(), metadata=metadata)
        self._lock = threading.Lock()
        # A blocking recv(None) reads the call in the caller's thread (one thread hop
        # less per response); the reader thread starts only for a recv with a timeout.
        self._reader: threading.Thread | None = None

    def _request_iter(self) -> Iterator[Request]:
        while True:
            item = self._requests.get()
            if item is None:
                return
            yield item

    def _read(self) -> None:
        try:
            for response in self._call:
                self._responses.put(response)
        except grpc.RpcError as exc:
            if not self._closed:
                error = _rpc_error(self._spec, self._target, exc)
                error.__cause__ = exc
                self._responses.put(error)
            return
        except Exception as exc:  # a deserialization failure ends the stream, too
            error = TransportError(f"{self._spec.method} on {self._target.uri}: {exc}")
            error.__cause__ = exc
            self._responses.put(error)
            return
        self._responses.put(_END)

    def send(self, request: Request) -> None:
        if self._closed:
            raise TransportError(f"{self._spec.method}: stream is closed")
        self._requests.put(request)

    def _start_reader(self) -> None:
        with self._lock:
            if self._reader is None:
                self._reader = threading.Thread(
                    target=self._read,
                    name=f"xds-grpc-reader {self._spec.method.rsplit('/', 1)[-1]}",
                    daemon=True,
                )
                self._reader.start()

    def _recv_direct(self) -> Response:
        try:
            response: Response = next(self._call)
        except StopIteration:
            raise TransportError(
                f"{self._spec.method} on {self._target.uri}: server ended stream"
            ) from None
        except grpc.RpcError as exc:
            if self._closed:
                raise TransportError(f"{self._spec.method}: stream closed locally") from exc
            raise _rpc_error(self._spec, self._target, exc) from exc
        except Exception as exc:  # a deserialization failure ends the stream, too
            raise TransportError(f"{self._spec.method} on {self._target.uri}: {exc}") from exc
        return response

    def recv(self, timeout: float | None) -> Response | None:
        if timeout is None and self._reader is None:
            if self._closed:
                raise TransportError(f"{self._spec.method}: stream closed locally")
            return self._recv_direct()
        self._start_reader()
        try:
            item = self._responses.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, TransportError):
            self._responses.put(item)  # stays failed for later calls
            raise item
        if isinstance(item, _End):
            self._responses.put(item)
            raise TransportError(f"{self._spec.method} on {self._target.uri}: server ended stream")
        return item

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._requests.put(None)
        self._call.cancel()
        # Wake a recv() that is waiting, so its caller notices the close at once
        # (a direct recv(None) is woken by the cancel).
        self._responses.put(TransportError(f"{self._spec.method}: stream closed locally"))
        reader = self._reader
        if reader is not None and threading.current_thread() is not reader:
            reader.join(_CLOSE_JOIN_TIMEOUT)


class GrpcTransport:
    """Sync gRPC transport: one channel to one server, any number of streams."""

    def __init__(self, target: ServerTarget) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._streams: list[GrpcStream] = []
        self._closed = False
        self._retired: list[grpc.Channel] = []
        self._channel = self._build_channel()

    def _build_channel(self) -> grpc.Channel:
        from xds_client._backends.threads import open_channel

        self._files = credential_files(self.target)
        log.debug("channel to %s", self.target.describe())
        return open_channel(self.target)

    def open(self, spec: StreamSpec) -> GrpcStream:
        if self._files and credential_files(self.target) != self._files:
            log.info("TLS files of %s changed; new channel", self.target.uri)
            with self._lock:
                self._retired.append(self._channel)
                self._channel = self._build_channel()
        factory = self._channel.stream_stream(
            spec.method, request_serializer=_serialize, response_deserializer=_deserializer(spec)
        )
        with self._lock:
            if self._closed:
                raise TransportError(f"transport to {self.target.uri} is closed")
            self._streams = [s for s in self._streams if not s._closed]
            stream = GrpcStream(factory, spec, self.target)
            self._streams.append(stream)
        return stream

    def probe(self, timeout: float) -> bool:
        """True when the server answers a health check within ``timeout`` seconds.

        Used to see that a stream is up when the server has nothing to send, and
        whether a primary is back (gRFC A71). Any answer counts, UNIMPLEMENTED
        included; a plain RPC is used rather than a connectivity subscription, whose
        polling thread outlives the channel.
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
        with self._lock:
            self._closed = True
            streams, self._streams = self._streams, []
        for stream in streams:
            stream.close()
        for channel in (*self._retired, self._channel):
            channel.close()


class AsyncGrpcStream:
    """An asyncio bidi stream on ``grpc.aio``; a reader task fills a queue.

    Requests go through a queue that gRPC's own task drains (as the sync stream
    does with its request iterator), so :meth:`send` never waits: a write cannot
    complete while the channel is still connecting or the server has not yet
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
        self._requests: asyncio.Queue[Request | None] = asyncio.Queue()
        self._call: Any = factory(self._request_iter(), metadata=target.call_metadata or None)
        self._responses: asyncio.Queue[Response | TransportError | _End] = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _request_iter(self) -> AsyncIterator[Request]:
        while True:
            item = await self._requests.get()
            if item is None:
                return
            yield item

    async def _read(self) -> None:
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    self._responses.put_nowait(_END)
                    return
                if response is None:
                    # grpc.aio logs a failed deserialization and hands back None; the
                    # stream's state is unknown from here on, so end it like the sync one.
                    raise TransportError(
                        f"{self._spec.method} on {self._target.uri}: "
                        "the server sent a response that does not decode"
                    )
                self._responses.put_nowait(response)
        except asyncio.CancelledError:
            return
        except grpc.RpcError as exc:
            if not self._closed:
                error = _rpc_error(self._spec, self._target, exc)
                error.__cause__ = exc
                self._responses.put_nowait(error)
        except TransportError as exc:
            self._responses.put_nowait(exc)
        except Exception as exc:
            error = TransportError(f"{self._spec.method} on {self._target.uri}: {exc}")
            error.__cause__ = exc
            self._responses.put_nowait(error)

    async def send(self, request: Request) -> None:
        if self._closed:
            raise TransportError(f"{self._spec.method}: stream is closed")
        self._requests.put_nowait(request)

    async def recv(self, timeout: float | None) -> Response | None:
        try:
            item = await asyncio.wait_for(self._responses.get(), timeout)
        except asyncio.TimeoutError:
            return None
        if isinstance(item, TransportError):
            self._responses.put_nowait(item)
            raise item
        if isinstance(item, _End):
            self._responses.put_nowait(item)
            raise TransportError(f"{self._spec.method} on {self._target.uri}: server ended stream")
        return item

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._requests.put_nowait(None)
        self._call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class AsyncGrpcTransport:
    """asyncio gRPC transport: one ``grpc.aio`` channel to one server."""

    def __init__(self, target: ServerTarget) -> None:
        self.target = target
        self._channel: grpc.aio.Channel | None = None
        self._files: tuple[tuple[str, int, int], ...] = ()
        self._retired: list[grpc.aio.Channel] = []
        self._streams: list[AsyncGrpcStream] = []
        self._closed = False

    def _get_channel(self) -> grpc.aio.Channel:
        # Created lazily so the channel binds to the running loop.
        if (
            self._channel is not None
            and self._files
            and credential_files(self.target) != self._files
        ):
            log.info("TLS files of %s changed; new channel", self.target.uri)
            self._retired.append(self._channel)
            self._channel = None
        if self._channel is None:
            from xds_client._backends.asyncio import open_channel

            self._files = credential_files(self.target)
            self._channel = open_channel(self.target)
            log.debug("channel to %s", self.target.describe())
        return self._channel

    async def open(self, spec: StreamSpec) -> AsyncGrpcStream:
        if self._closed:
            raise TransportError(f"transport to {self.target.uri} is closed")
        factory = self._get_channel().stream_stream(
            spec.method, request_serializer=_serialize, response_deserializer=_deserializer(spec)
        )
        stream = AsyncGrpcStream(factory, spec, self.target)
        self._streams = [s for s in self._streams if not s._closed]
        self._streams.append(stream)
        return stream

    async def probe(self, timeout: float) -> bool:
        """True when the server answers a health check within ``timeout`` seconds."""
        if self._closed:
            return False
        check = self._get_channel().unary_unary(
            _HEALTH_CHECK, request_serializer=_raw, response_deserializer=_raw
        )
        try:
            await check(b"", timeout=timeout, wait_for_ready=True,
                        metadata=self.target.call_metadata or None)  # fmt: skip
        except grpc.RpcError as exc:
            return _answered(exc)
        return True

    async def close(self) -> None:
        self._closed = True
        streams, self._streams = self._streams, []
        for stream in streams:
            await stream.close()
        retired, self._retired = self._retired, []
        for channel in (*retired, *([self._channel] if self._channel is not None else [])):
            await channel.close()
