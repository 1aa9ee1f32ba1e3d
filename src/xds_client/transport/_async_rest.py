"""REST-JSON polling for asyncio, over the standard library's ``http.client``.

Written once for asyncio; ``tools/gen_sync.py`` generates the thread twin
(``_rest.py``) from it. The transport posts each subscribed type's latest request to
``<base URL>/<v2|v3>/discovery:<type>`` every poll interval (see :mod:`._polling`),
with the wire format of :mod:`._rest_codec`. The HTTP poster (:mod:`._rest_http`) is
one blocking implementation for both: asyncio runs it in a worker thread, since polls
are rare and one HTTP implementation keeps the two surfaces from drifting.
"""

from __future__ import annotations

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

from xds_client._backends.asyncio import call_blocking
from xds_client.transport._async_polling_stream import AsyncPollingStream
from xds_client.transport._base import StreamSpec
from xds_client.transport._polling import PollCall
from xds_client.transport._rest_http import _RestBase, make_ssl_context

__all__ = ["AsyncRestTransport", "make_ssl_context"]


class AsyncRestTransport(_RestBase[AsyncPollingStream]):
    """Polls a REST-JSON xDS server from asyncio; one keep-alive connection per stream.

    ``AsyncRestTransport(target, *, policy=None, ssl_context=None)``: ``target.uri`` is
    the base URL (``http://host:port`` or ``https://...``), ``target.call_metadata``
    become HTTP headers (never logged) and ``target.credentials`` configure TLS (or
    ``ssl_context`` does). The stream's ``spec.method`` is not used: each type is posted
    to its own ``rest_path``. Polls run in a worker thread.
    """

    async def open(self, spec: StreamSpec) -> AsyncPollingStream:
        """A polling stream for the types in ``spec`` (more may be sent later)."""
        with self._lock:
            self._check_spec(spec)
            poster = self._poster()
            stream: AsyncPollingStream | None = None

            async def post(call: PollCall) -> DiscoveryResponse | None:
                return await call_blocking(poster, call)

            async def closed() -> None:
                poster.close()
                with self._lock:
                    if stream is not None:
                        self._streams.discard(stream)

            stream = AsyncPollingStream(post, self.policy, on_close=closed)
            self._streams.add(stream)
            return stream

    async def probe(self, timeout: float) -> bool:
        """True when the server accepts a connection within ``timeout`` (fallback, A71)."""
        return await call_blocking(self._probe, timeout)

    async def close(self) -> None:
        """Close every stream."""
        with self._lock:
            self._closed = True
            streams = list(self._streams)
        for stream in streams:
            await stream.close()
