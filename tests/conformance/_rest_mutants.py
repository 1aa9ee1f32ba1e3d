"""REST-JSON servers that break one rule: an HTTP proxy in front of the ControlPlane's REST."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

# fault(request JSON, status, response JSON or None) -> (status, response JSON or None)
Fault = Callable[[dict[str, Any], int, dict[str, Any] | None], tuple[int, dict[str, Any] | None]]


def _no_version(req: dict[str, Any], status: int, body: dict[str, Any] | None) -> Any:
    if body is not None:
        body.pop("version_info", None)
    return status, body


def _wrong_type(req: dict[str, Any], status: int, body: dict[str, Any] | None) -> Any:
    # Another real type whose first field is also the name: the body still parses.
    other = {
        "type.googleapis.com/envoy.config.cluster.v3.Cluster": "envoy.config.listener.v3.Listener",
        "type.googleapis.com/envoy.config.listener.v3.Listener": "envoy.config.cluster.v3.Cluster",
    }
    for resource in (body or {}).get("resources", []):
        resource["@type"] = "type.googleapis.com/" + other.get(
            resource["@type"], "envoy.config.cluster.v3.Cluster"
        )
        resource.update({"name": resource.get("name", "")})
        for key in list(resource):
            if key not in ("@type", "name"):
                del resource[key]
    return status, body


def _duplicate(req: dict[str, Any], status: int, body: dict[str, Any] | None) -> Any:
    resources = (body or {}).get("resources", [])
    if resources:
        resources.append(resources[0])
    return status, body


def _names_ignored(req: dict[str, Any], status: int, body: dict[str, Any] | None) -> Any:
    if req.get("resource_names") and body is not None:
        body["resources"] = []
    return status, body


def _stale_is_current(req: dict[str, Any], status: int, body: dict[str, Any] | None) -> Any:
    if req.get("version_info"):
        return 304, None
    return status, body


def _current_fails(req: dict[str, Any], status: int, body: dict[str, Any] | None) -> Any:
    if status == 304:
        return 503, {"message": "try again"}
    return status, body


FAULTS: dict[str, Fault] = {
    "rest-response-version": _no_version,
    "rest-any-type-url": _wrong_type,
    "rest-no-duplicate-names": _duplicate,
    "rest-named": _names_ignored,
    "rest-stale-version": _stale_is_current,
    "rest-current-version": _current_fails,
    "rest-malformed-body": lambda req, status, body: (500 if status == 400 else status, body),
}


class RestMutant:
    """Forwards ``POST`` polls to ``upstream`` (a base URL) and lets ``fault`` change the answer."""

    def __init__(self, upstream: str, fault: Fault) -> None:
        parts = urlsplit(upstream)
        target = (parts.hostname or "127.0.0.1", parts.port or 80)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(*target, timeout=10)
                try:
                    conn.request("POST", self.path, raw, {"Content-Type": "application/json"})
                    answer = conn.getresponse()
                    status, body = answer.status, answer.read()
                finally:
                    conn.close()
                try:
                    request = json.loads(raw)
                except ValueError:
                    request = {}
                parsed = json.loads(body) if status == 200 and body else None
                status, parsed = fault(request, status, parsed)
                out = json.dumps(parsed).encode() if parsed is not None else b""
                if status == 200 or status >= 400:
                    out = out or body
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
