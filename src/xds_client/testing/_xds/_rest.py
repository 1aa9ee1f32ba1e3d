"""REST-JSON discovery (``POST /v3/discovery:<type>``) on a stdlib HTTP server thread."""

from __future__ import annotations

import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest
from google.protobuf import json_format

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
    from google.rpc.status_pb2 import Status

    return Status(code=3, message=message)


class RestServer:
    """A threaded HTTP server on ``host:port`` serving the engine's snapshots."""

    def __init__(self, engine: Engine, host: str, port: int) -> None:
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), _Handler)
        self._server.engine = engine
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"xds-cp-rest-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
