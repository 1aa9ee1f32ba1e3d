"""Tiny in-process REST and unary-Fetch xDS servers for the polling transport tests.

They implement just enough of a control plane: versioned resources per type
URL, 304 (REST) or the same version (Fetch) when the client is current, fault
injection, and a record of every request with its headers.
"""

from __future__ import annotations

import contextlib
import http.server
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import trustme
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message
from tenacity import wait_fixed

from xds_client.node import Node
from xds_client.resources import CLUSTER, resource_type, resource_types
from xds_client.transport import StreamSpec
from xds_client.transport._polling import PollPolicy
from xds_client.transport._rest_codec import decode_request, encode_response

# What the fetch and REST transport tests share: a node, a fast poll policy, a stream.
NODE = Node("n1", cluster="c1").to_proto()
FAST = PollPolicy(
    interval=0.05,
    jitter=0.0,
    request_timeout=2.0,
    backoff=wait_fixed(0.01),
    failures_before_error=3,
)
SPEC = StreamSpec("unused", False, (CLUSTER,))


def pack(message: Message, type_url: str | None = None) -> AnyProto:
    """An Any holding ``message``, optionally under another (v2) type URL."""
    packed = AnyProto()
    packed.Pack(message)
    if type_url is not None:
        packed.type_url = type_url
    return packed


def cluster(name: str, timeout: int = 1) -> Cluster:
    c = Cluster(name=name)
    c.connect_timeout.seconds = timeout
    return c


@dataclass
class Recorded:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    request: DiscoveryRequest
    raw: bytes = b""


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    versions: dict[str, str] = field(default_factory=dict)
    resources: dict[str, dict[str, AnyProto]] = field(default_factory=dict)
    faults: list[tuple[int | grpc.StatusCode, str]] = field(default_factory=list)
    delay: float = 0.0
    requests: list[Recorded] = field(default_factory=list)
    seen: threading.Condition = field(default_factory=threading.Condition)
    stop: threading.Event = field(default_factory=threading.Event)

    def set(self, type_url: str, version: str, resources: dict[str, AnyProto]) -> None:
        with self.lock:
            self.versions[type_url] = version
            self.resources[type_url] = dict(resources)

    def fail(self, status: int | grpc.StatusCode, count: int = 1, body: str = "") -> None:
        with self.lock:
            self.faults.extend([(status, body)] * count)

    def record(self, item: Recorded) -> tuple[int | grpc.StatusCode, str] | None:
        with self.seen:
            self.requests.append(item)
            self.seen.notify_all()
        if self.delay:
            self.stop.wait(self.delay)
        with self.lock:
            return self.faults.pop(0) if self.faults else None

    def answer(self, request: DiscoveryRequest) -> DiscoveryResponse | None:
        """The response for a request, or None when the client is current or nothing matches."""
        with self.lock:
            version = self.versions.get(request.type_url)
            all_resources = self.resources.get(request.type_url, {})
            if version is None:
                return None
            names = [n for n in request.resource_names if n != "*"]
            chosen = [r for n, r in sorted(all_resources.items()) if not names or n in names]
            return DiscoveryResponse(
                version_info=version, type_url=request.type_url, resources=chosen
            )

    def wait_requests(self, count: int, timeout: float = 5.0) -> list[Recorded]:
        with self.seen:
            if not self.seen.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"expected {count} requests, saw {len(self.requests)}")
            return list(self.requests)


class _QuietServer(http.server.ThreadingHTTPServer):
    """Clients that hang up (closed streams, failed TLS handshakes) are not errors here."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class StubRestServer(_State):
    """``POST /<v>/discovery:<type>`` on 127.0.0.1:0, optionally over TLS."""

    def __init__(
        self, ssl_context: ssl.SSLContext | None = None, camel_case: bool = False, port: int = 0
    ):
        super().__init__()
        self.camel_case = camel_case
        state = self
        paths = {t.rest_path: t.type_url for t in resource_types() if t.rest_path}

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                request = decode_request(raw)
                if not request.type_url:
                    request.type_url = paths.get(self.path, "")
                fault = state.record(
                    Recorded(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, request, raw
                    )
                )
                if fault is not None:
                    assert isinstance(fault[0], int)
                    self._send(fault[0], fault[1].encode())
                    return
                if self.path not in paths:
                    self._send(404, b"")
                    return
                response = state.answer(request)
                if response is None or response.version_info == request.version_info:
                    self._send(304, b"")
                elif not response.resources and request.resource_names:
                    self._send(404, b"")
                else:
                    self._send(200, encode_response(response, camel_case=state.camel_case))

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                if status != 304:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if status != 304:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _QuietServer(("127.0.0.1", port), Handler)
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class StubFetchServer(_State):
    """Unary ``Fetch*`` methods of the given types on 127.0.0.1:0 (same version: same answer)."""

    def __init__(self, type_urls: Sequence[str]) -> None:
        super().__init__()
        self.metadata: list[dict[str, str]] = []
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for type_url in type_urls:
            method = resource_type(type_url).fetch_method
            assert method is not None
            handlers[method] = grpc.unary_unary_rpc_method_handler(
                self._handle(type_url, method),
                request_deserializer=DiscoveryRequest.FromString,
                response_serializer=DiscoveryResponse.SerializeToString,
            )

        class Generic(grpc.GenericRpcHandler):
            def service(
                self, handler_call_details: grpc.HandlerCallDetails
            ) -> grpc.RpcMethodHandler[Any, Any] | None:
                return handlers.get(handler_call_details.method)

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers((Generic(),))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self._server.start()

    def _handle(
        self, type_url: str, method: str
    ) -> Callable[[DiscoveryRequest, grpc.ServicerContext], DiscoveryResponse]:
        def handle(request: DiscoveryRequest, context: grpc.ServicerContext) -> DiscoveryResponse:
            headers = {k: str(v) for k, v in context.invocation_metadata()}
            fault = self.record(Recorded(method, headers, request))
            if fault is not None:
                assert isinstance(fault[0], grpc.StatusCode)
                context.abort(fault[0], fault[1])
            if not request.type_url:
                request.type_url = type_url
            response = self.answer(request)
            return response or DiscoveryResponse(type_url=type_url)

        return handle

    def close(self) -> None:
        self.stop.set()
        self._server.stop(None).wait(5)


def tls_server_context(ca: trustme.CA) -> ssl.SSLContext:
    """A server TLS context with a certificate for 127.0.0.1 issued by ``ca``."""
    cert = ca.issue_cert("127.0.0.1", "localhost")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    return context


@contextlib.contextmanager
def closing_all(*things: Any) -> Iterator[None]:
    """Close everything on exit, in reverse order."""
    try:
        yield
    finally:
        for thing in reversed(things):
            thing.close()
