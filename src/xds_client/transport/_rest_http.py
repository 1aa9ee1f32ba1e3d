"""The HTTP half of REST-JSON polling, over the standard library's ``http.client``.

One blocking poster serves both transports: :mod:`._async_rest` (asyncio, which runs
it in a worker thread: polls are rare) and :mod:`._rest` (its thread twin, generated
by ``tools/gen_sync.py``). Nothing here imports asyncio.

No HTTP dependency is added: ``http.client`` does keep-alive, TLS through
:mod:`ssl` and timeouts, which is all a poll needs.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import socket
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Generic, TypeVar

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

from xds_client.errors import TransportError, UsageError
from xds_client.transport._base import (
    ChannelCredentialsConfig,
    ServerTarget,
    StreamSpec,
    read_pem,
)
from xds_client.transport._polling import PollCall, PollError, PollPolicy
from xds_client.transport._rest_codec import (
    RestEndpoint,
    build_request,
    decode_response,
    parse_base_url,
    rest_path_for,
)

__all__ = ["make_ssl_context"]

_log = logging.getLogger("xds_client.transport.rest")


def make_ssl_context(credentials: ChannelCredentialsConfig | None) -> ssl.SSLContext:
    """A client TLS context: the given CA (or the system's) and an optional client cert.

    The private key is handed to :mod:`ssl` through a private temporary file
    when it is given as PEM bytes, because ``load_cert_chain`` reads files only.
    """
    if credentials is None:
        return ssl.create_default_context()
    ca = read_pem(credentials.ca_certificate, what="the CA certificate")
    try:
        context = ssl.create_default_context(cadata=ca.decode() if ca is not None else None)
    except ssl.SSLError as exc:
        raise UsageError(f"cannot load the CA certificate: {exc}") from exc
    if credentials.certificate_chain is not None and credentials.private_key is not None:
        chain = read_pem(credentials.certificate_chain, what="the client certificate chain")
        key = read_pem(credentials.private_key, what="the client private key")
        if chain is None or key is None:  # pragma: no cover - read_pem keeps non-None values
            raise UsageError("mTLS needs both certificate_chain and private_key")
        with tempfile.TemporaryDirectory(prefix="xds-client-") as tmp:
            chain_file = Path(tmp, "chain.pem")
            key_file = Path(tmp, "key.pem")
            chain_file.write_bytes(chain)
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(key)
            try:
                context.load_cert_chain(chain_file, key_file)
            except ssl.SSLError as exc:
                # The message names the problem, never the key material.
                raise UsageError(f"cannot load the client certificate and key: {exc}") from exc
    return context


class _HTTPSConnection(http.client.HTTPSConnection):
    """Checks the certificate against ``server_name`` instead of the host when given."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float,
        context: ssl.SSLContext | None,
        server_name: str | None,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._server_name = server_name

    def connect(self) -> None:
        if self._server_name is None:
            super().connect()
            return
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self._server_name
        )


class _HttpPoster:
    """Performs one REST poll at a time over a kept-alive connection."""

    def __init__(
        self,
        endpoint: RestEndpoint,
        *,
        headers: tuple[tuple[str, str], ...],
        timeout: float,
        ssl_context: ssl.SSLContext | None,
        server_name: str | None,
        max_size: int,
    ) -> None:
        self._endpoint = endpoint
        self._max_size = max_size
        self._headers = headers
        self._timeout = timeout
        self._ssl_context = ssl_context
        self._server_name = server_name
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._busy = False  # an exchange is running on the polling thread
        self._closed = False
        self._warned_404: set[str] = set()

    def __call__(self, call: PollCall) -> DiscoveryResponse | None:
        http_request = build_request(self._endpoint, call.request, headers=self._headers)
        status, reason, body = self._exchange(
            http_request.method, http_request.path, http_request.body, http_request.headers
        )
        if status == 404 and call.type_url not in self._warned_404:
            self._warned_404.add(call.type_url)
            _log.warning(
                "POST %s answered 404 (no resource matches); treating it as none",
                http_request.path,
            )
        return decode_response(status, body, request=call.request, reason=reason)

    def _exchange(
        self, method: str, path: str, body: bytes, headers: tuple[tuple[str, str], ...]
    ) -> tuple[int, str, bytes]:
        # http.client is not thread-safe: only this (polling) thread closes a
        # connection while an exchange runs; close() merely shuts its socket down.
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                answer = self._send(conn, method, path, body, headers)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._release(conn, drop=True)
                # A kept-alive connection the server closed meanwhile: retry once fresh.
                if reused and attempt == 1 and not self._closed:
                    continue
                raise self._error(path, exc) from exc
            except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
                # ValueError / AttributeError: what http.client raises when close()
                # shut the socket down in the middle of an exchange.
                self._release(conn, drop=True)
                raise self._error(path, exc) from exc
            status, reason, data, will_close = answer
            if len(data) > self._max_size:
                self._release(conn, drop=True)  # the rest of the body is still unread
                raise PollError(
                    f"POST {path}: the response exceeds {self._max_size} bytes "
                    "(max_receive_message_size)",
                    retryable=False,
                )
            self._release(conn, drop=will_close)
            return status, reason, data
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        body: bytes,
        headers: tuple[tuple[str, str], ...],
    ) -> tuple[int, str, bytes, bool]:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        answer = conn.getresponse()
        try:
            data = answer.read(self._max_size + 1)
        finally:
            # A body read to its end closes itself; one left unread (too large)
            # would keep the socket's file open, and the connection unusable.
            complete = answer.isclosed()
            answer.close()
        return answer.status, answer.reason, data, answer.will_close or not complete

    def _error(self, path: str, exc: BaseException) -> PollError:
        where = f"POST {self._endpoint.scheme}://{self._endpoint.host}:{self._endpoint.port}{path}"
        if self._closed:
            return PollError(f"{where}: the stream was closed", retryable=False)
        if isinstance(exc, ssl.SSLCertVerificationError):
            return PollError(f"{where}: TLS verification failed: {exc}", retryable=False)
        if isinstance(exc, TimeoutError | socket.timeout):
            return PollError(f"{where}: timed out after {self._timeout:g}s", retryable=True)
        if isinstance(exc, ConnectionRefusedError):
            return PollError(f"{where}: connection refused", retryable=True)
        return PollError(f"{where}: {type(exc).__name__}: {exc}", retryable=True)

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._closed:
                raise PollError("the REST stream is closed", retryable=False)
            self._busy = True
            if self._conn is not None:
                return self._conn, True
            ep = self._endpoint
            conn: http.client.HTTPConnection
            if ep.tls:
                conn = _HTTPSConnection(
                    ep.host,
                    ep.port,
                    timeout=self._timeout,
                    context=self._ssl_context,
                    server_name=self._server_name,
                )
            else:
                conn = http.client.HTTPConnection(ep.host, ep.port, timeout=self._timeout)
            self._conn = conn
            return conn, False

    def _release(self, conn: http.client.HTTPConnection, *, drop: bool) -> None:
        """End an exchange; close the connection if asked or if the poster closed meanwhile."""
        with self._lock:
            self._busy = False
            drop = drop or self._closed
            if drop and self._conn is conn:
                self._conn = None
        if drop:
            conn.close()

    def close(self) -> None:
        """Close the connection; a poll blocked on it fails at once."""
        with self._lock:
            self._closed = True
            conn = self._conn
            if conn is None:
                return
            if not self._busy:
                self._conn = None
                conn.close()
                return
            sock = conn.sock
        if sock is not None:
            # Wakes the polling thread blocked in recv(); it then closes the connection.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


S = TypeVar("S")


class _RestBase(Generic[S]):
    """Configuration shared by the thread and asyncio REST transports (``S``: their stream)."""

    def __init__(
        self,
        target: ServerTarget | str,
        *,
        policy: PollPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if isinstance(target, str):
            target = ServerTarget(target)
        self.target = target
        self.policy = policy or PollPolicy()
        self._endpoint = parse_base_url(target.uri)
        if target.call_credentials is not None:
            raise UsageError("gRPC call credentials do not apply to REST; use call_metadata")
        if not self._endpoint.tls and target.credentials is not None:
            raise UsageError(f"TLS credentials need an https:// URL, got {target.uri!r}")
        self._ssl_context = ssl_context
        if self._endpoint.tls and ssl_context is None:
            self._ssl_context = make_ssl_context(target.credentials)
        self._closed = False
        self._streams: set[S] = set()
        self._lock = threading.Lock()

    def _check_spec(self, spec: StreamSpec) -> None:
        if self._closed:
            raise TransportError(f"transport to {self.target.uri} is closed")
        if spec.delta:
            raise UsageError("REST polling is SotW only; use transport='grpc' for delta xDS")
        for type_url in spec.type_urls:
            rest_path_for(type_url)

    def _poster(self) -> _HttpPoster:
        creds = self.target.credentials
        return _HttpPoster(
            self._endpoint,
            headers=self.target.call_metadata,
            timeout=self.policy.request_timeout,
            ssl_context=self._ssl_context,
            server_name=creds.server_name_override if creds is not None else None,
            max_size=self.target.max_receive_message_size,
        )

    def _probe(self, timeout: float) -> bool:
        """True when a TCP connection (and TLS handshake) succeeds within ``timeout``."""
        ep = self._endpoint
        try:
            with socket.create_connection((ep.host, ep.port), timeout=timeout) as sock:
                if self._ssl_context is not None:
                    creds = self.target.credentials
                    name = creds.server_name_override if creds is not None else None
                    with self._ssl_context.wrap_socket(sock, server_hostname=name or ep.host):
                        pass
        except OSError:  # ssl.SSLError is an OSError too
            return False
        return True

    def describe(self) -> str:
        """A log-safe description of the server (no headers)."""
        return f"REST {self.target.describe()}"
