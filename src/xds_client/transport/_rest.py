# Generated from xds_client/transport/_async_rest.py by tools/gen_sync.py: do not edit.
"""REST-JSON polling for threads, over the standard library's ``http.client``.

Generated from ``_async_rest.py`` with the thread backend: each poll runs in the
polling stream's caller. The HTTP poster is :mod:`._rest_http`, the wire format
:mod:`._rest_codec`, the polling rules :mod:`._polling`.
"""

from __future__ import annotations

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

from xds_client._backends.threads import call_blocking
from xds_client.transport._base import StreamSpec
from xds_client.transport._polling import PollCall
from xds_client.transport._polling_stream import PollingStream
from xds_client.transport._rest_http import _RestBase, make_ssl_context

__all__ = ["RestTransport", "make_ssl_context"]


class RestTransport(_RestBase[PollingStream]):
    """Polls a REST-JSON xDS server from threads; one keep-alive connection per stream.

    ``RestTransport(target, *, policy=None, ssl_context=None)``: ``target.uri`` is
    the base URL (``http://host:port`` or ``https://...``), ``target.call_metadata``
    become HTTP headers (never logged) and ``target.credentials`` configure TLS (or
    ``ssl_context`` does). The stream's ``spec.method`` is not used: each type is posted
    to its own ``rest_path``.
    """

    def open(self, spec: StreamSpec) -> PollingStream:
        """A polling stream for the types in ``spec`` (more may be sent later)."""
        with self._lock:
            self._check_spec(spec)
            poster = self._poster()
            stream: PollingStream | None = None

            def post(call: PollCall) -> DiscoveryResponse | None:
                return call_blocking(poster, call)

            def closed() -> None:
                poster.close()
                with self._lock:
                    if stream is not None:
                        self._streams.discard(stream)

            stream = PollingStream(post, self.policy, on_close=closed)
            self._streams.add(stream)
            return stream

    def probe(self, timeout: float) -> bool:
        """True when the server accepts a connection within ``timeout`` (fallback, A71)."""
        return call_blocking(self._probe, timeout)

    def close(self) -> None:
        """Close every stream."""
        with self._lock:
            self._closed = True
            streams = list(self._streams)
        for stream in streams:
            stream.close()
