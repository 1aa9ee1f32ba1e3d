"""Driver bugs that one twin had and the other did not; each test runs on both clients.

- A stream write that cannot complete (the server admits one HTTP/2 stream at a
  time, so the second stream is never dispatched) must not stall the client:
  other streams still get updates and ACKs, and timers still fire.
- A response that does not decode resets the stream (reported as a
  disconnection) and the client recovers on the next stream.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

from xds_client import ConnectivityChanged, Node, ResourceDoesNotExist, ResourceUpdated
from xds_client.resources import LISTENER

from ._scripted_server import ScriptedServer, ScriptedStream, response
from .conftest import ClientProxy

pytestmark = pytest.mark.timeout(60)

MakeClient = Callable[..., ClientProxy]


def answer_first_listener_request(
    stream: ScriptedStream, request: DiscoveryRequest
) -> DiscoveryResponse | None:
    if request.type_url == LISTENER and not request.response_nonce:
        return response(request, "1", Listener(name="l"))
    return None


def wait_for_ack(stream: ScriptedStream, nonce: str) -> None:
    import time

    deadline = time.monotonic() + 5
    while not any(r.response_nonce == nonce for r in stream.requests):
        assert time.monotonic() < deadline, f"no ACK of nonce {nonce!r}"
        stream.got_request.wait(0.05)
        stream.got_request.clear()


def test_blocked_write_on_one_stream_leaves_the_others_running(make_client: MakeClient) -> None:
    with ScriptedServer(answer_first_listener_request, max_concurrent_streams=1) as server:
        client = make_client(server.address, ads=False)
        with client.watch(Listener, "l") as lds:
            assert lds.next(ResourceUpdated).version == "1"
            lds_stream = server.streams[0]
            # The CDS stream waits for a slot the server never frees: its write cannot complete.
            with client.watch(Cluster, "c"):
                first = lds_stream.requests[0]
                for version in ("2", "3"):
                    lds_stream.push(
                        response(first, version, Listener(name="l", stat_prefix=version))
                    )
                    assert lds.next(ResourceUpdated, 5).version == version
                    wait_for_ack(lds_stream, version)


def test_timers_fire_while_a_write_is_blocked(make_client: MakeClient) -> None:
    with ScriptedServer(answer_first_listener_request, max_concurrent_streams=1) as server:
        client = make_client(server.address, ads=False, does_not_exist_timeout=0.5)
        with client.watch(Listener, "l") as lds:
            lds.next(ResourceUpdated)
            with client.watch(Listener, "missing") as missing:
                # The request naming "missing" goes out (the server never answers it) ...
                wait_for_ack(server.streams[0], "1")
                with client.watch(Cluster, "c"):  # ... then a write blocks
                    event = missing.next(ResourceDoesNotExist, 5)
                    assert event.name == "missing"


def test_undecodable_response_resets_the_stream_and_recovers(make_client: MakeClient) -> None:
    def reply(
        stream: ScriptedStream, request: DiscoveryRequest
    ) -> bytes | DiscoveryResponse | None:
        if request.response_nonce:
            return None
        if stream.number == 0:
            return b"\xff\xff\xff\xff"  # not a DiscoveryResponse
        cluster = Cluster(name="c")
        return response(request, "1", cluster)

    with ScriptedServer(reply) as server:
        client = make_client(server.address)
        with client.watch(Cluster, "c") as watch:
            down = watch.next(ConnectivityChanged, 5, where=lambda e: not e.connected)
            assert down.reason
            assert watch.next(ResourceUpdated, 5).version == "1"
        assert len(server.streams) >= 2


def test_async_close_is_aclose_and_close_warns() -> None:
    import asyncio

    from xds_client import AsyncXdsClient

    async def main() -> None:
        client = AsyncXdsClient("127.0.0.1:1", node=_node())
        with pytest.warns(DeprecationWarning, match="aclose"):
            await client.close()
        await client.aclose()  # idempotent

    asyncio.run(main())


def test_reprs_name_the_server_and_the_watch(make_client: MakeClient, mode: str) -> None:
    with ScriptedServer(answer_first_listener_request) as server:
        client = make_client(server.address)
        with client.watch(Listener, ["m", "l"]) as watch:
            prefix = "<XdsClient " if mode == "sync" else "<AsyncXdsClient "
            assert repr(client.client) == f"{prefix}{server.address} sotw ads running>"
            kind = type(watch.watch).__name__
            assert (
                repr(watch.watch) == f"<{kind} envoy.config.listener.v3.Listener [l,m] pending=0>"
            )


def _node() -> Node:
    return Node(id="n")


def test_metrics_are_checked_once_and_a_raising_hook_is_only_logged(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    from xds_client import CountingMetrics, XdsClient
    from xds_client.errors import UsageError

    with pytest.raises(UsageError, match="metrics must have"):
        XdsClient("127.0.0.1:1", node=_node(), metrics=object())  # type: ignore[arg-type]

    class Broken(CountingMetrics):
        def ack(self, type_url: str, server: str) -> None:
            raise RuntimeError("boom")

    with ScriptedServer(answer_first_listener_request) as server:
        client = make_client(server.address, metrics=Broken())
        with client.watch(Listener, "l") as lds:
            assert lds.next(ResourceUpdated).version == "1"
            wait_for_ack(server.streams[0], "1")
    assert "metrics hook ack raised" in caplog.text


def test_control_plane_and_metadata_reach_watchers_and_metrics(
    make_client: MakeClient,
) -> None:
    from envoy.config.core.v3.base_pb2 import ControlPlane, Metadata
    from envoy.service.discovery.v3.discovery_pb2 import Resource

    from xds_client import CountingMetrics

    def reply(stream: ScriptedStream, request: DiscoveryRequest) -> DiscoveryResponse | None:
        if request.type_url != LISTENER or request.response_nonce:
            return None
        out = DiscoveryResponse(type_url=LISTENER, version_info="1", nonce="1")
        out.control_plane.CopyFrom(ControlPlane(identifier="cp-east-1"))
        wrapper = Resource(name="l", version="1")
        wrapper.resource.Pack(Listener(name="l"))
        wrapper.metadata.filter_metadata["team"].update({"owner": "blue"})
        out.resources.add().Pack(wrapper)
        return out

    metrics = CountingMetrics()
    with ScriptedServer(reply) as server:
        client = make_client(server.address, metrics=metrics)
        with client.watch(Listener, "l") as lds:
            update = lds.next(ResourceUpdated)
            assert update.control_plane == "cp-east-1"
            assert isinstance(update.metadata, Metadata)
            assert update.metadata.filter_metadata["team"]["owner"] == "blue"
            wait_for_ack(server.streams[0], "1")
            assert metrics.control_planes[(LISTENER, "cp-east-1")] == 1
