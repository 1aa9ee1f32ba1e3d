# Generated from xds_client/transport/_async_grpc.py by tools/gen_sync.py: do not edit.
"""Bidirectional gRPC streams for xDS on ``grpc`` (threads).

Generated from ``_async_grpc.py`` with the thread backend: gRPC's own thread
drains the request queue; a blocking ``recv(None)`` reads the call in the
caller's thread, and a reader thread starts only for a ``recv`` with a timeout.
What both share is in :mod:`._grpc_common`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import grpc

from xds_client._backends.threads import (
    DIRECT_READS,
    Empty,
    Inbox,
    Worker,
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
    "GrpcTransport",
    "GrpcStream",
    "channel_options",
    "channel_credentials",
    "health_probe",
]

log = logging.getLogger("xds_client.transport.grpc")

_CLOSE_JOIN_TIMEOUT: Final = 1.0


class GrpcStream:
    """A bidi stream: gRPC drains our request queue, a reader thread fills the response queue.

    :meth:`send` only queues the request, so it never waits on the network: a write
    cannot complete while the channel is still connecting or the server has not yet
    admitted the stream, and the client's I/O task must not wait for it.
    """

    def __init__(
        self,
        factory: grpc.StreamStreamMultiCallable[Request, Response],
        spec: StreamSpec,
        target: ServerTarget,
    ) -> None:
        self._spec = spec
        self._target = target
        self._closed = False
        self._requests: Inbox[Request | None] = Inbox()
        self._responses: Inbox[Response | TransportError | _End] = Inbox()
        self._on_written: Callable[[], object] | None = None
        self._call: Any = factory(self._request_iter(), metadata=target.call_metadata or None)
        self._lock = threading.Lock()
        self._reader: Worker | None = None
        if not DIRECT_READS:
            self._start_reader()

    def _request_iter(self) -> Iterator[Request]:
        while True:
            item = self._requests.get(None)
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

    def _read(self) -> None:
        try:
            while True:
                response = read_response(self._call)
                if response is None:
                    self._responses.put(_END)
                    return
                self._responses.put(response)
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

    def send(self, request: Request) -> None:
        if self._closed:
            raise TransportError(f"{self._spec.method}: stream is closed")
        self._requests.put(request)

    def _recv_direct(self) -> Response:
        try:
            response: Response | None = read_response(self._call)
        except grpc.RpcError as exc:
            if self._closed:
                raise TransportError(f"{self._spec.method}: stream closed locally") from exc
            raise _rpc_error(self._spec, self._target, exc) from exc
        except Exception as exc:  # a deserialization failure ends the stream, too
            raise TransportError(f"{self._spec.method} on {self._target.uri}: {exc}") from exc
        if response is None:
            raise TransportError(f"{self._spec.method} on {self._target.uri}: server ended stream")
        return response

    def recv(self, timeout: float | None) -> Response | None:
        if timeout is None and self._reader is None:  # only where DIRECT_READS
            if self._closed:
                raise TransportError(f"{self._spec.method}: stream closed locally")
            return self._recv_direct()
        self._start_reader()
        item = self._responses.get(timeout)
        if isinstance(item, Empty):
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
        if (reader := self._reader) is not None:
            reader.cancel()
            reader.join(_CLOSE_JOIN_TIMEOUT)


def health_probe(channel: grpc.Channel, target: ServerTarget, timeout: float) -> bool:
    """True when the server answers a health check within ``timeout`` seconds.

    Used to tell watchers that a stream is up when the server has nothing to
    send; never to pick a server (gRFC A71 counts only a working xDS stream),
    nor to start timers (A57). Any answer counts, UNIMPLEMENTED
    included; a plain RPC is used rather than a connectivity subscription, whose
    polling thread outlives the channel.
    """
    check = channel.unary_unary(_HEALTH_CHECK, request_serializer=_raw, response_deserializer=_raw)
    try:
        check(b"", timeout=timeout, wait_for_ready=True, metadata=target.call_metadata or None)
    except grpc.RpcError as exc:
        return _answered(exc)
    except ValueError:  # the channel was closed meanwhile
        return False
    return True


class GrpcTransport:
    """gRPC transport for threads: one ``grpc`` channel to one server, any number of streams."""

    def __init__(self, target: ServerTarget) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._files: tuple[tuple[str, int, int], ...] = ()
        self._retired: list[grpc.Channel] = []
        self._streams: list[GrpcStream] = []
        self._closed = False
        # A thread channel needs no loop: built at once, bad TLS files fail here.
        self._get_channel()

    def _get_channel(self) -> grpc.Channel:
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

    def open(self, spec: StreamSpec) -> GrpcStream:
        factory = self._get_channel().stream_stream(
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
        """True when the server answers a health check within ``timeout`` seconds."""
        try:
            channel = self._get_channel()
        except TransportError:  # closed
            return False
        return health_probe(channel, self.target, timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            streams, self._streams = self._streams, []
            retired, self._retired = self._retired, []
            channel, self._channel = self._channel, None
        for stream in streams:
            stream.close()
        for each in (*retired, *([channel] if channel is not None else [])):
            each.close()
