"""A TCP proxy in front of a gRPC server that can cut a response in the middle.

gRPC's server API only sends whole messages, so a connection that dies halfway
through a response (a crashed server, a middlebox) cannot be scripted there.
:class:`FaultProxy` forwards bytes both ways and reads the server's HTTP/2
frames; when armed, it forwards half of the next DATA frame that carries a
message and then closes both sockets, so the client sees a truncated response
and a dead connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from xds_client._backends.threads import Closing

__all__ = ["FaultProxy"]

_FRAME_HEADER = 9
_DATA = 0x0
_GRPC_PREFIX = 5  # compressed flag + 4-byte length before each message
_ACCEPT_POLL = 0.1


class FaultProxy(Closing):
    """Forwards ``127.0.0.1:port`` to ``target`` (``host:port``) and injects cuts.

    Point clients at :attr:`address`; call :meth:`cut_next_response` to drop
    the next ``count`` connections halfway through a response. Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(self, target: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        target_host, _, target_port = target.rpartition(":")
        self._target = (target_host.strip("[]") or "127.0.0.1", int(target_port))
        self._listener = socket.create_server((host, port))
        self._listener.settimeout(_ACCEPT_POLL)
        self._host = host
        self.port: int = self._listener.getsockname()[1]
        """The port clients connect to."""
        self._lock = threading.Lock()
        self._armed = 0
        self.cuts = 0
        """Responses cut so far."""
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        """``host:port`` of the proxy."""
        return f"{self._host}:{self.port}"

    def cut_next_response(self, count: int = 1) -> None:
        """Cut the next ``count`` responses (each on its connection) in the middle."""
        with self._lock:
            self._armed += count

    def drop_connections(self) -> None:
        """Close every proxied connection at once (no GOAWAY: like a pulled cable)."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _close(sock)

    def close(self) -> None:
        """Stop accepting and close every connection; idempotent."""
        self._stop.set()
        self._acceptor.join(5)
        self.drop_connections()
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    # ------------------------------------------------------------------ internals

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                _close(client)  # the server is down: the client sees a refused connection
                continue
            server.settimeout(None)
            client.settimeout(None)
            pumps = [
                threading.Thread(target=target, args=args, daemon=True, name="fault-proxy-pump")
                for target, args in (
                    (self._upstream, (client, server)),
                    (self._downstream, (server, client)),
                )
            ]
            with self._lock:
                self._sockets.update((client, server))
                self._threads = [t for t in self._threads if t.is_alive()] + pumps
            for pump in pumps:
                pump.start()

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server: bytes as they come."""
        with contextlib.suppress(OSError):  # a socket closed by the other pump
            while data := client.recv(65536):
                server.sendall(data)
        self._end(client, server)

    def _downstream(self, server: socket.socket, client: socket.socket) -> None:
        """Server to client, frame by frame, so that a cut lands inside a response."""
        buffer = b""
        try:
            while data := server.recv(65536):
                buffer += data
                while len(buffer) >= _FRAME_HEADER:
                    length = int.from_bytes(buffer[:3], "big")
                    end = _FRAME_HEADER + length
                    if len(buffer) < end:
                        break
                    if buffer[3] == _DATA and length > _GRPC_PREFIX and self._take_cut():
                        client.sendall(buffer[: _FRAME_HEADER + length // 2])
                        self._end(client, server)
                        return
                    client.sendall(buffer[:end])
                    buffer = buffer[end:]
        except OSError:
            pass
        self._end(client, server)

    def _take_cut(self) -> bool:
        with self._lock:
            if self._armed <= 0:
                return False
            self._armed -= 1
            self.cuts += 1
            return True

    def _end(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._sockets.difference_update(sockets)
        for sock in sockets:
            _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other side
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
