"""AsyncGrpcTransport against a scripted gRPC server; ``tools/gen_sync.py`` makes the twin."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

from tests._twin_support import run_async  # async-only
from tests.client._scripted_server import ScriptedServer, ScriptedStream, response
from xds_client.errors import TransportError
from xds_client.resources import CLUSTER
from xds_client.transport import ADS_METHOD, AsyncStream, AsyncTransport, ServerTarget, StreamSpec
from xds_client.transport._async_grpc import AsyncGrpcStream, AsyncGrpcTransport

from ._async_stream_checks import close_while_receiving

pytestmark = pytest.mark.timeout(30)

SPEC = StreamSpec(ADS_METHOD, False, (CLUSTER,))


def answer(stream: ScriptedStream, request: DiscoveryRequest) -> DiscoveryResponse | None:
    """Answer each request with version "v<n>" (n: the requests seen on the stream)."""
    return response(request, f"v{len(stream.requests)}")


def answer_then_end(stream: ScriptedStream, request: DiscoveryRequest) -> None:
    """Answer the first request, then end the stream cleanly."""
    stream.push(response(request, "v1"))
    stream.outbox.put(None)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(answer) as s:
        yield s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@run_async  # async-only
async def test_send_recv_and_a_quiet_timeout(server: ScriptedServer) -> None:
    transport = AsyncGrpcTransport(ServerTarget(server.address))
    assert isinstance(transport, AsyncTransport)
    try:
        stream = await transport.open(SPEC)
        assert isinstance(stream, AsyncStream)
        assert isinstance(stream, AsyncGrpcStream)
        await stream.send(DiscoveryRequest(type_url=CLUSTER))
        first = await stream.recv(None)  # threads: read in this thread (no reader yet)
        assert isinstance(first, DiscoveryResponse)
        assert first.version_info == "v1"
        start = time.monotonic()
        assert await stream.recv(0.2) is None  # the server has nothing more to say
        assert time.monotonic() - start < 2.0
        await stream.send(DiscoveryRequest(type_url=CLUSTER, version_info="v1"))
        second = await stream.recv(5)
        assert isinstance(second, DiscoveryResponse)
        assert second.version_info == "v2"
        assert [r.version_info for r in server.streams[0].requests] == ["", "v1"]
    finally:
        await transport.close()


@run_async  # async-only
async def test_the_end_of_a_stream_stays_an_error() -> None:
    with ScriptedServer(answer_then_end) as server:
        transport = AsyncGrpcTransport(ServerTarget(server.address))
        try:
            stream = await transport.open(SPEC)
            await stream.send(DiscoveryRequest(type_url=CLUSTER))
            got = await stream.recv(5)
            assert isinstance(got, DiscoveryResponse)
            assert got.version_info == "v1"
            for _ in range(2):
                with pytest.raises(TransportError, match="server ended stream"):
                    await stream.recv(5)
        finally:
            await transport.close()


@run_async  # async-only
async def test_a_response_that_does_not_decode_fails_the_stream() -> None:
    with ScriptedServer(lambda stream, request: b"\xff\xff\xff") as server:
        transport = AsyncGrpcTransport(ServerTarget(server.address))
        try:
            stream = await transport.open(SPEC)
            await stream.send(DiscoveryRequest(type_url=CLUSTER))
            with pytest.raises(TransportError, match=ADS_METHOD):
                await stream.recv(5)
            with pytest.raises(TransportError):
                await stream.recv(5)
        finally:
            await transport.close()


@run_async  # async-only
async def test_close_wakes_a_waiting_recv_at_once(server: ScriptedServer) -> None:
    transport = AsyncGrpcTransport(ServerTarget(server.address))
    stream = await transport.open(SPEC)
    await stream.send(DiscoveryRequest(type_url=CLUSTER))
    assert isinstance(await stream.recv(5), DiscoveryResponse)  # threads: the reader runs now
    assert await close_while_receiving(stream, stream.close, lambda: None) < 2
    with pytest.raises(TransportError, match="closed"):
        await stream.send(DiscoveryRequest(type_url=CLUSTER))
    await stream.close()  # idempotent
    await transport.close()


@run_async  # async-only
async def test_probe_and_a_closed_transport(server: ScriptedServer) -> None:
    live = AsyncGrpcTransport(ServerTarget(server.address))
    gone = AsyncGrpcTransport(ServerTarget(f"127.0.0.1:{free_port()}"))
    try:
        assert await live.probe(5) is True  # UNIMPLEMENTED health check: the server is there
        assert await gone.probe(0.3) is False
    finally:
        await live.close()
        await gone.close()
    assert await live.probe(0.3) is False
    with pytest.raises(TransportError, match="closed"):
        await live.open(SPEC)


# begin async-only
@run_async
async def test_close_stops_a_request_writer_that_grpc_leaves_running() -> None:
    """grpc.aio's ``cancel()`` stops its request-writer task only on a live call; a call
    that ended while the writer waited (for "metadata sent", or a write) kept it
    pending for ever, and the test loop's drain found it (``tests/client/conftest.py``).
    Here a call already done, whose writer still waits: the close must stop it."""
    import asyncio
    from typing import Any, cast

    class EndedCall:
        def __init__(self) -> None:
            self._async_request_poller = asyncio.get_running_loop().create_task(
                asyncio.Event().wait()
            )

        def cancel(self) -> bool:
            return False  # done already: grpc.aio cancels nothing then

        def done(self) -> bool:
            return True

    call = EndedCall()
    factory = cast("Any", lambda *args, **kwargs: call)
    stream = AsyncGrpcStream(factory, SPEC, ServerTarget("127.0.0.1:1"))
    await stream.close()
    await asyncio.sleep(0)
    assert call._async_request_poller.done()


# end async-only
