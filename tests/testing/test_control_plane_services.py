"""ControlPlane: per-type services, v2 paths, Fetch, REST, TTL heartbeats, per-node snapshots."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from envoy.api.v2.listener_pb2 import Listener as V2Listener
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import Node
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    DiscoveryResponse,
    Resource,
)

from xds_client.resources import (
    CLUSTER,
    LISTENER,
    RESOURCE_WRAPPER_TYPE_URL,
    V2_LISTENER,
    decode,
    resource_type,
    unwrap,
)
from xds_client.testing import ControlPlane

from ._xds_raw import ADS_V2, delta, sotw

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def cp() -> Iterator[ControlPlane]:
    with ControlPlane(heartbeat_interval=None) as control_plane:
        yield control_plane


@pytest.fixture
def channel(cp: ControlPlane) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(cp.address) as ch:
        yield ch


def test_per_type_stream_fills_in_the_type_url(cp: ControlPlane, channel: grpc.Channel) -> None:
    cp.set_resources(CLUSTER, [Cluster(name="c")], version="7")
    method = resource_type(CLUSTER).stream_method
    assert method is not None
    stream = sotw(channel, method)
    try:
        stream.send(DiscoveryRequest())  # per-type services may leave type_url empty
        got = stream.recv()
        assert (got.type_url, got.version_info) == (CLUSTER, "7")
        assert cp.requests()[0].type_url == CLUSTER
    finally:
        stream.close()


def test_v2_ads_and_v2_lds_services_speak_v2_type_urls(
    cp: ControlPlane, channel: grpc.Channel
) -> None:
    # A v3 message serves a v2 type: the wire formats of these fields agree.
    cp.set_resources(V2_LISTENER, [Listener(name="l2")])
    ads = sotw(channel, ADS_V2 + "StreamAggregatedResources")
    try:
        ads.send(DiscoveryRequest(type_url=V2_LISTENER))
        got = ads.recv()
        assert got.resources[0].type_url == V2_LISTENER
        assert isinstance(decode(got.resources[0]), V2Listener)
    finally:
        ads.close()
    v2_lds = resource_type(V2_LISTENER)
    assert v2_lds.delta_method == "/envoy.api.v2.ListenerDiscoveryService/DeltaListeners"
    stream = delta(channel, v2_lds.delta_method)
    try:
        stream.send(DeltaDiscoveryRequest(resource_names_subscribe=["l2"]))
        assert [r.name for r in stream.recv().resources] == ["l2"]
    finally:
        stream.close()
    assert v2_lds.fetch_method is not None
    fetch = channel.unary_unary(
        v2_lds.fetch_method,
        request_serializer=DiscoveryRequest.SerializeToString,
        response_deserializer=DiscoveryResponse.FromString,
    )
    reply = fetch(DiscoveryRequest(resource_names=["l2"]), timeout=5)
    assert reply.type_url == V2_LISTENER
    assert [decode(r).name for r in reply.resources] == ["l2"]  # type: ignore[attr-defined]
    assert {s.kind for s in cp.streams()} == {"sotw", "delta", "fetch"}


def post(url: str, body: object) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, {}


def test_rest_json_answers_200_then_304(cp: ControlPlane) -> None:
    version = cp.set_resources(CLUSTER, [Cluster(name="a"), Cluster(name="b")])
    url = cp.rest_url + "/v3/discovery:clusters"
    status, reply = post(url, {"node": {"id": "rest"}, "resource_names": ["b"]})
    assert status == 200
    assert reply["version_info"] == version
    assert reply["resources"] == [{"@type": CLUSTER, "name": "b"}]
    assert post(url, {"version_info": version})[0] == 304
    assert post(cp.rest_url + "/v3/discovery:nothing", {})[0] == 404
    cp.set_resources(V2_LISTENER, [Listener(name="l")])
    status, reply = post(cp.rest_url + "/v2/discovery:listeners", {})
    assert (status, reply["type_url"]) == (200, V2_LISTENER)
    rest = [r for r in cp.requests() if r.kind == "rest"]
    assert rest[0].message.node.id == "rest"


def test_sotw_ttl_heartbeats_are_bodiless_wrappers(cp: ControlPlane, channel: grpc.Channel) -> None:
    cp.set_resources(CLUSTER, [Cluster(name="t")], ttl=2.5)
    cp.update(CLUSTER, [Cluster(name="plain")])
    stream = sotw(channel)
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER))
        first = stream.recv()
        by_name = {
            unwrap(r).name or decode(r).name: unwrap(r)  # type: ignore[attr-defined]
            for r in first.resources
        }
        assert by_name["t"].ttl == 2.5
        assert by_name["t"].body is not None
        assert by_name["plain"].name is None  # no TTL: sent bare
        cp.send_heartbeats()
        beat = stream.recv()
        assert beat.version_info == first.version_info
        assert [r.type_url for r in beat.resources] == [RESOURCE_WRAPPER_TYPE_URL]
        wrapper = Resource.FromString(beat.resources[0].value)
        assert (wrapper.name, wrapper.HasField("resource")) == ("t", False)
        assert wrapper.ttl.ToMilliseconds() == 2500
    finally:
        stream.close()


def test_delta_ttl_heartbeats_run_and_stop(cp: ControlPlane, channel: grpc.Channel) -> None:
    cp.set_resources(CLUSTER, [Cluster(name="t")], ttl=1.0)
    stream = delta(channel)
    try:
        stream.send(DeltaDiscoveryRequest(type_url=CLUSTER))
        first = stream.recv()
        assert first.resources[0].HasField("resource")
        cp.start_heartbeats(0.1)
        beat = stream.recv()
        assert [(r.name, r.HasField("resource"), r.ttl.seconds) for r in beat.resources] == [
            ("t", False, 1)
        ]
        cp.stop_heartbeats()
        for _ in range(10):  # drain beats sent before the stop, then expect silence
            try:
                stream.expect_nothing(0.3)
                break
            except AssertionError:
                continue
        else:
            pytest.fail("heartbeats went on after stop_heartbeats()")
    finally:
        stream.close()


def test_snapshots_per_node(cp: ControlPlane, channel: grpc.Channel) -> None:
    cp.set_resources(LISTENER, [Listener(name="shared")])
    cp.set_resources(LISTENER, [Listener(name="special")], node_id="n2")
    one, two = sotw(channel), sotw(channel)
    try:
        one.send(DiscoveryRequest(type_url=LISTENER, node=Node(id="n1")))
        two.send(DiscoveryRequest(type_url=LISTENER, node=Node(id="n2")))
        assert [decode(r).name for r in one.recv().resources] == ["shared"]  # type: ignore[attr-defined]
        assert [decode(r).name for r in two.recv().resources] == ["special"]  # type: ignore[attr-defined]
        cp.clear_node("n2")
        assert [decode(r).name for r in two.recv().resources] == ["shared"]  # type: ignore[attr-defined]
        one.expect_nothing()
    finally:
        one.close()
        two.close()


def test_wrap_every_sotw_resource() -> None:
    with ControlPlane(wrap_sotw_resources=True, rest_port=None) as cp:
        cp.set_resources(CLUSTER, {"c": Cluster(name="c")}, versions={"c": "v-c"})
        with grpc.insecure_channel(cp.address) as channel:
            stream = sotw(channel)
            try:
                stream.send(DiscoveryRequest(type_url=CLUSTER))
                wrapped = unwrap(stream.recv().resources[0])
                assert (wrapped.name, wrapped.version, wrapped.ttl) == ("c", "v-c", None)
            finally:
                stream.close()


def test_every_registered_service_answers(cp: ControlPlane, channel: grpc.Channel) -> None:
    from xds_client.resources import resource_types

    served = 0
    for rtype in resource_types():
        if rtype.service is None:
            continue
        cp.set_resources(rtype.type_url, {"r": b""}, version="1")
        if rtype.stream_method is not None:
            stream = sotw(channel, rtype.stream_method)
            try:
                stream.send(DiscoveryRequest(resource_names=["r"]))
                assert stream.recv().type_url == rtype.type_url
            finally:
                stream.close()
            served += 1
        if rtype.delta_method is not None:
            deltas = delta(channel, rtype.delta_method)
            try:
                deltas.send(DeltaDiscoveryRequest(resource_names_subscribe=["r"]))
                assert deltas.recv().type_url == rtype.type_url
            finally:
                deltas.close()
            served += 1
        if rtype.fetch_method is not None:
            fetch = channel.unary_unary(
                rtype.fetch_method,
                request_serializer=DiscoveryRequest.SerializeToString,
                response_deserializer=DiscoveryResponse.FromString,
            )
            assert fetch(DiscoveryRequest(), timeout=5).type_url == rtype.type_url
            served += 1
    # 9 v3 and 8 v2 types: SotW + delta + Fetch each, except VHDS (delta only).
    assert served == 17 * 3 - 4


def test_ipv6_loopback() -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    with ControlPlane(host="::1", heartbeat_interval=None) as cp:
        assert cp.address.startswith("[::1]:")
        assert cp.rest_url.startswith("http://[::1]:")
        cp.set_resources(CLUSTER, [Cluster(name="six")])
        assert post(cp.rest_url + "/v3/discovery:clusters", {})[0] == 200
        with grpc.insecure_channel(cp.address) as channel:
            fetch = channel.unary_unary(
                resource_type(CLUSTER).fetch_method or "",
                request_serializer=DiscoveryRequest.SerializeToString,
                response_deserializer=DiscoveryResponse.FromString,
            )
            assert len(fetch(DiscoveryRequest(), timeout=5).resources) == 1


def test_rest_json_renders_nested_any_values(cp: ControlPlane) -> None:
    from tests.interop._interop_helpers import HCM_TYPE_URL, ROUTER_TYPE_URL, tcp_listener

    cp.set_resources(LISTENER, [tcp_listener("ingress", 10000, "local_route")])
    status, reply = post(cp.rest_url + "/v3/discovery:listeners", {})
    assert status == 200
    text = json.dumps(reply)
    assert HCM_TYPE_URL in text
    assert ROUTER_TYPE_URL in text


def test_fetch_with_current_version_gets_the_same_answer(
    cp: ControlPlane, channel: grpc.Channel
) -> None:
    version = cp.set_resources(CLUSTER, [Cluster(name="a")])
    fetch = channel.unary_unary(
        resource_type(CLUSTER).fetch_method or "",
        request_serializer=DiscoveryRequest.SerializeToString,
        response_deserializer=DiscoveryResponse.FromString,
    )
    first = fetch(DiscoveryRequest(), timeout=5)
    again = fetch(DiscoveryRequest(version_info=version), timeout=5)
    assert first == again
    assert len(again.resources) == 1
