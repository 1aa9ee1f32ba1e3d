"""ControlPlane fault injection, lifecycle, threads and async use."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator

import grpc
import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc.status_pb2 import Status

from xds_client.errors import UsageError
from xds_client.resources import CLUSTER, ENDPOINT
from xds_client.testing import ControlPlane

from ._xds_raw import DELTA_ADS, delta, sotw

pytestmark = pytest.mark.timeout(30)

BIG = 64 * 1024 * 1024


@pytest.fixture
def cp() -> Iterator[ControlPlane]:
    with ControlPlane(heartbeat_interval=None) as control_plane:
        yield control_plane


@pytest.fixture
def channel(cp: ControlPlane) -> Iterator[grpc.Channel]:
    options = [("grpc.max_receive_message_length", BIG)]
    with grpc.insecure_channel(cp.address, options=options) as ch:
        yield ch


def test_drop_streams_ends_them_with_a_status(cp: ControlPlane, channel: grpc.Channel) -> None:
    stream = sotw(channel)
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER))
        cp.wait_for_streams(1)
        assert cp.drop_streams(grpc.StatusCode.UNAVAILABLE, "bye") == [1]
        error = stream.error()
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error.details() == "bye"
        cp.wait_for_streams_closed()
        assert not cp.streams(active=True)
    finally:
        stream.close()


def test_fail_streams_answers_new_streams_with_a_status(
    cp: ControlPlane, channel: grpc.Channel
) -> None:
    cp.fail_streams(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", count=1)
    failed = delta(channel)
    try:
        failed.send(DeltaDiscoveryRequest(type_url=CLUSTER))
        assert failed.error().code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        failed.close()
    cp.set_resources(CLUSTER, [Cluster(name="c")])
    fine = delta(channel)
    try:
        fine.send(DeltaDiscoveryRequest(type_url=CLUSTER))
        assert fine.recv().resources[0].name == "c"
    finally:
        fine.close()


def test_delay_responses(cp: ControlPlane, channel: grpc.Channel) -> None:
    cp.set_resources(CLUSTER, [Cluster(name="c")])
    cp.delay_responses(0.4, CLUSTER)
    stream = sotw(channel)
    try:
        started = time.monotonic()
        stream.send(DiscoveryRequest(type_url=CLUSTER))
        stream.recv()
        assert time.monotonic() - started >= 0.4
        cp.clear_faults()
        cp.update(CLUSTER, [Cluster(name="d")])
        started = time.monotonic()
        stream.recv()
        assert time.monotonic() - started < 0.4
    finally:
        stream.close()


def test_send_raw_responses(cp: ControlPlane, channel: grpc.Channel) -> None:
    stream = sotw(channel)
    other = delta(channel)
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER))
        other.send(DeltaDiscoveryRequest(type_url=CLUSTER))
        ids = {s.kind: s.id for s in cp.wait_for_streams(2)}
        packed = AnyProto(type_url=CLUSTER, value=Cluster(name="dup").SerializeToString())
        # Wrong type_url for the Any and the same name twice: sent exactly as built.
        raw = DiscoveryResponse(version_info="x", type_url=ENDPOINT, resources=[packed, packed])
        assert cp.send_raw(raw) == [ids["sotw"]]
        got = stream.recv()
        assert (got.type_url, len(got.resources), got.version_info) == (ENDPOINT, 2, "x")
        assert got.nonce  # filled in, so the client's ACK can be matched
        assert raw.nonce == ""  # the caller's message is left alone
        stream.send(
            DiscoveryRequest(
                type_url=ENDPOINT,
                response_nonce=got.nonce,
                error_detail=Status(code=3, message="bad"),
            )
        )
        assert cp.wait_for_nack(ENDPOINT, "x").stream_id == ids["sotw"]

        # Oversized: 20 MB in one response.
        huge = DeltaDiscoveryResponse(type_url=CLUSTER, system_version_info="big")
        body = Cluster(name="huge", alt_stat_name="x" * (20 * 1024 * 1024))
        huge.resources.add(name="huge").resource.CopyFrom(
            AnyProto(type_url=CLUSTER, value=body.SerializeToString())
        )
        assert cp.send_raw(huge) == [ids["delta"]]
        assert other.recv(timeout=15).ByteSize() > 20 * 1024 * 1024

        # Malformed bytes: the client cannot parse them and fails the call.
        cp.send_raw(b"\xff\xff\xff", stream_id=ids["sotw"])
        assert stream.error().code() == grpc.StatusCode.INTERNAL
    finally:
        stream.close()
        other.close()


def test_stop_and_resume_on_the_same_port(cp: ControlPlane, channel: grpc.Channel) -> None:
    cp.set_resources(CLUSTER, [Cluster(name="c")])
    port = cp.port
    stream = sotw(channel)
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER))
        stream.recv()
        cp.stop_serving()
        assert stream.error().code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.CANCELLED,
        )
    finally:
        stream.close()
    rest = cp.rest_url
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(rest.rsplit(":", 1)[1])), timeout=2).close()
    cp.resume_serving()
    assert cp.port == port
    assert cp.rest_url == rest
    with urllib.request.urlopen(
        urllib.request.Request(rest + "/v3/discovery:clusters", data=b"{}"), timeout=5
    ) as reply:
        assert reply.status == 200
    again = sotw(channel)
    try:
        again.send(DiscoveryRequest(type_url=CLUSTER))
        assert again.recv(timeout=10).resources
    finally:
        again.close()


def test_refuse_connections_for_a_while(cp: ControlPlane) -> None:
    cp.refuse_connections(0.5)
    with grpc.insecure_channel(cp.address) as channel:
        fetch = channel.unary_unary(
            "/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters",
            request_serializer=DiscoveryRequest.SerializeToString,
            response_deserializer=DiscoveryResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as refused:
            fetch(DiscoveryRequest(), timeout=0.2)
        assert refused.value.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        )
        # wait_for_ready rides out the refusal until the port is back.
        assert fetch(DiscoveryRequest(), timeout=10, wait_for_ready=True).type_url == CLUSTER


def test_no_threads_left_behind() -> None:
    baseline = threading.active_count()
    with ControlPlane(heartbeat_interval=0.05) as cp:
        cp.set_resources(CLUSTER, [Cluster(name="c")], ttl=5)
        with grpc.insecure_channel(cp.address) as channel:
            one, two = sotw(channel), delta(channel, DELTA_ADS)
            one.send(DiscoveryRequest(type_url=CLUSTER))
            two.send(DeltaDiscoveryRequest(type_url=CLUSTER))
            one.recv()
            two.recv()
            cp.refuse_connections(30)  # the pending restart timer must be cancelled too
            one.close()
            two.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > baseline and time.monotonic() < deadline:
        threading.Event().wait(0.05)  # grpc's own channel threads wind down asynchronously
    assert threading.active_count() <= baseline, [t.name for t in threading.enumerate()]


def test_lifecycle_errors() -> None:
    cp = ControlPlane()
    with pytest.raises(UsageError, match="inside `with`"):
        _ = cp.address
    with cp, pytest.raises(UsageError, match="can start once"):
        cp.start()
    cp.close()  # idempotent
    with pytest.raises(UsageError):
        cp.start()
    with pytest.raises(UsageError):
        cp.start_heartbeats(0.1)


def test_async_with_and_async_waits() -> None:
    async def scenario() -> None:
        async with ControlPlane() as cp:
            version = cp.set_resources(CLUSTER, [Cluster(name="c")])
            with grpc.insecure_channel(cp.address) as channel:
                stream = sotw(channel)
                try:
                    stream.send(DiscoveryRequest(type_url=CLUSTER))
                    got = await asyncio.to_thread(stream.recv)
                    stream.send(
                        DiscoveryRequest(
                            type_url=CLUSTER, version_info=version, response_nonce=got.nonce
                        )
                    )
                    ack = await cp.wait_for_ack_async(CLUSTER, version, timeout=5)
                    assert ack.is_ack
                finally:
                    stream.close()

    asyncio.run(scenario())


def test_factory_fixture_and_ports_closed_on_exit(
    xds_control_plane_factory: Callable[..., ControlPlane],
) -> None:
    primary = xds_control_plane_factory()
    fallback = xds_control_plane_factory(rest_port=None)
    assert primary.port != fallback.port
    grpc_port, rest_port = primary.port, int(primary.rest_url.rsplit(":", 1)[1])
    primary.close()
    for port in (grpc_port, rest_port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_busy_rest_port_is_a_clear_error() -> None:
    from xds_client.errors import TransportError

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        baseline = threading.active_count()
        with pytest.raises(TransportError, match="REST port"):
            ControlPlane(rest_port=busy.getsockname()[1]).start()
        assert threading.active_count() <= baseline
