"""A token-exchange HTTP server on 127.0.0.1 for the store tests (Grafana's /sign/access-token).

It answers ``POST`` with ``{"data": {"token": JWT}}`` when the request carries
``Authorization: Bearer <service_token>`` and a JSON body with ``namespace`` and
``audiences``; the JWT is HS256-signed with ``secret`` for that namespace and
audiences and lives ``ttl`` seconds. It counts the exchanges, records the bodies
and headers, and answers with the statuses queued in ``fail_with`` first (429,
503, ...). ``delay`` holds each answer, to let callers pile up.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import http.server
import json
import threading
import time
from typing import Any

__all__ = ["TokenExchangeServer"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenExchangeServer:
    """``with TokenExchangeServer(secret) as tx:``; ``tx.url`` is where to exchange."""

    def __init__(
        self, secret: bytes, *, service_token: str = "service-token", ttl: float = 600.0
    ) -> None:
        self.secret = secret
        self.service_token = service_token
        self.ttl = ttl
        self.delay = 0.0
        self.fail_with: collections.deque[int] = collections.deque()
        """Statuses to answer first, one per request (e.g. 429, 503)."""
        self.exchanges = 0
        """Requests answered (failures included)."""
        self.requests: list[tuple[dict[str, str], Any]] = []
        """(headers, decoded body) of each request."""
        self._lock = threading.Lock()
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1/sign-access-token"

    def mint(self, namespace: str, audiences: list[str]) -> str:
        header = {"alg": "HS256", "typ": "at+jwt"}
        claims = {
            "sub": "access-policy:tests",
            "aud": audiences,
            "namespace": namespace,
            "exp": int(time.time() + self.ttl),
        }
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        sig = hmac.new(self.secret, signing.encode(), hashlib.sha256).digest()
        return f"{signing}.{_b64(sig)}"

    def __enter__(self) -> TokenExchangeServer:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet tests

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with outer._lock:
                    outer.exchanges += 1
                    outer.requests.append((dict(self.headers.items()), body))
                    status = outer.fail_with.popleft() if outer.fail_with else 0
                if outer.delay:
                    time.sleep(outer.delay)
                if status:
                    self._answer(status, {"status": "error", "error": f"status {status}"})
                elif self.headers.get("Authorization") != f"Bearer {outer.service_token}":
                    self._answer(401, {"status": "error", "error": "invalid token"})
                elif not isinstance(body, dict) or not body.get("namespace"):
                    self._answer(400, {"status": "error", "error": "missing namespace"})
                else:
                    token = outer.mint(str(body["namespace"]), list(body.get("audiences") or []))
                    self._answer(200, {"status": "success", "data": {"token": token}})

            def _answer(self, status: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="token-exchange", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
