"""A tiny gRPC xDS server whose streams a test scripts by hand.

The ControlPlane is too well-behaved to show driver bugs: these tests need a
server that admits one stream at a time (HTTP/2 ``max_concurrent_streams``) or
sends bytes that are not a DiscoveryResponse.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.protobuf.message import Message

Reply = Callable[["ScriptedStream", DiscoveryRequest], "bytes | DiscoveryResponse | None"]


class ScriptedStream:
    """One server-side stream: the requests it got, and a way to push responses."""

    def __init__(self, method: str, number: int) -> None:
        self.method = method
        self.number = number
        """Streams are numbered from 0 in the order the server accepted them."""
        self.requests: list[DiscoveryRequest] = []
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.got_request = threading.Event()

    def push(self, response: bytes | DiscoveryResponse) -> None:
        """Send a response (or raw bytes, which need not decode) on this stream."""
        data = response if isinstance(response, bytes) else response.SerializeToString()
        self.outbox.put(data)


class ScriptedServer:
    """Serves every streaming method; ``reply`` answers each request (None: say nothing)."""

    def __init__(self, reply: Reply, *, max_concurrent_streams: int | None = None) -> None:
        self._reply = reply
        self._lock = threading.Lock()
        self.streams: list[ScriptedStream] = []
        options: list[tuple[str, Any]] = []
        if max_concurrent_streams is not None:
            options.append(("grpc.max_concurrent_streams", max_concurrent_streams))
        self._executor = ThreadPoolExecutor(8, thread_name_prefix="scripted-xds")
        self._server = grpc.server(self._executor, handlers=[_Handler(self)], options=options)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self, method: str, requests: Iterator[DiscoveryRequest]) -> Iterator[bytes]:
        with self._lock:
            stream = ScriptedStream(method, len(self.streams))
            self.streams.append(stream)

        def read() -> None:
            try:
                for request in requests:
                    stream.requests.append(request)
                    stream.got_request.set()
                    answer = self._reply(stream, request)
                    if answer is not None:
                        stream.push(answer)
            except grpc.RpcError:
                pass
            stream.outbox.put(None)

        threading.Thread(target=read, daemon=True).start()
        while (data := stream.outbox.get()) is not None:
            yield data

    def close(self) -> None:
        for stream in list(self.streams):
            stream.outbox.put(None)
        self._server.stop(0).wait(5)
        self._executor.shutdown(wait=False)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, server: ScriptedServer) -> None:
        self._server = server

    def service(
        self, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[DiscoveryRequest, bytes] | None:
        method: str = details.method
        if "DiscoveryService/" not in method:
            return None  # e.g. the client's health-check probe: UNIMPLEMENTED is an answer
        server = self._server

        def handle(requests: Iterator[DiscoveryRequest], context: object) -> Iterator[bytes]:
            return server._serve(method, requests)

        return grpc.stream_stream_rpc_method_handler(
            handle,
            request_deserializer=DiscoveryRequest.FromString,
            response_serializer=_identity,
        )


def _identity(data: bytes) -> bytes:
    return data


def response(request: DiscoveryRequest, version: str, *resources: Message) -> DiscoveryResponse:
    """A SotW response to ``request`` holding ``resources`` at ``version``."""
    out = DiscoveryResponse(type_url=request.type_url, version_info=version, nonce=version)
    for resource in resources:
        out.resources.add().Pack(resource)
    return out
