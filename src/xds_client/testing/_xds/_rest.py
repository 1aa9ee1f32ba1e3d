"""REST-JSON discovery (``POST /v3/discovery:<type>``) on a stdlib HTTP server thread."""

from __future__ import annotations

import selectors
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status

from xds_client.resources import resource_types

from ._descriptors import import_nested
from ._streams import Engine

__all__ = ["RestServer"]


class _Server(ThreadingHTTPServer):
    # Join request threads on close, so no thread outlives the control plane;
    # HTTP/1.0 (the handler default) closes each connection after one reply.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    engine: Engine

    def handle_request_noblock(self) -> None:
        """Accept and dispatch one ready connection (the stdlib's own step)."""
        self._handle_request_noblock()  # type: ignore[attr-defined]


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read the request log instead of stderr noise

    def _reply(self, status: HTTPStatus, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_POST(self) -> None:
        paths = {t.rest_path: t.type_url for t in resource_types() if t.rest_path}
        type_url = paths.get(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if type_url is None:
            self._reply(HTTPStatus.NOT_FOUND, b'{"message": "unknown discovery path"}')
            return
        try:
            request = json_format.Parse(
                raw or b"{}", DiscoveryRequest(), ignore_unknown_fields=True
            )
        except json_format.ParseError as exc:
            body = json_format.MessageToJson(_status(str(exc)))
            self._reply(HTTPStatus.BAD_REQUEST, body.encode())
            return
        host, port = self.client_address[:2]
        engine = self.server.engine
        response = engine.fetch(request, type_url, "rest", self.path, f"ipv4:{host}:{port}")
        if response is None:
            self._reply(HTTPStatus.NOT_MODIFIED)
            return
        import_nested(response)  # JSON of an Any needs its message's descriptor
        try:
            body = json_format.MessageToJson(response, preserving_proto_field_name=True)
        except (TypeError, KeyError, json_format.Error) as exc:
            self._reply(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                json_format.MessageToJson(
                    _status(f"cannot render resources as JSON: {exc}")
                ).encode(),
            )
            return
        self._reply(HTTPStatus.OK, body.encode())


def _status(message: str) -> Any:
    return Status(code=3, message=message)


class RestServer:
    """A threaded HTTP server on ``host:port`` serving the engine's snapshots."""

    def __init__(self, engine: Engine, host: str, port: int) -> None:
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), _Handler)
        self._server.engine = engine
        self.port: int = self._server.server_address[1]
        # serve_forever() polls for shutdown; a wake-up socket lets close()
        # return at once instead of after a poll interval.
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(
            target=self._serve, name=f"xds-cp-rest-{self.port}", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_r:
                        return
                    self._server.handle_request_noblock()

    def close(self) -> None:
        self._wake_w.send(b"x")
        self._thread.join(timeout=5.0)
        self._server.server_close()  # joins the request threads
        self._wake_r.close()
        self._wake_w.close()
