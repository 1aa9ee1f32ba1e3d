"""ControlPlane over gRPC: SotW and delta ADS, driven by a bare stream client."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.base_pb2 import Node
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.protobuf.duration_pb2 import Duration
from google.rpc.status_pb2 import Status

from xds_client.errors import WaitTimeoutError
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, decode
from xds_client.testing import ControlPlane
from xds_client.testing._xds._store import resource_name

from ._xds_raw import delta, sotw

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def channel(xds_control_plane: ControlPlane) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(xds_control_plane.address) as ch:
        yield ch


def names_of(response: DiscoveryResponse) -> list[str]:
    return sorted(resource_name(decode(r)) for r in response.resources)


def test_sotw_wildcard_ack_update_nack(
    xds_control_plane: ControlPlane, channel: grpc.Channel
) -> None:
    cp = xds_control_plane
    v1 = cp.set_resources("cds", [Cluster(name="a"), Cluster(name="b")])
    stream = sotw(channel)
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER, node=Node(id="n1")))
        first = stream.recv()
        assert first.version_info == v1
        assert names_of(first) == ["a", "b"]
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info=v1, response_nonce=first.nonce))
        ack = cp.wait_for_ack(CLUSTER, v1, timeout=5)
        assert ack.classification == "ack"

        v2 = cp.update(CLUSTER, [Cluster(name="c")])
        second = stream.recv()
        assert (second.version_info, names_of(second)) == (v2, ["a", "b", "c"])
        stream.send(
            DiscoveryRequest(
                type_url=CLUSTER,
                version_info=v1,
                response_nonce=second.nonce,
                error_detail=Status(code=3, message="no"),
            )
        )
        nack = cp.wait_for_nack("cds", v2, timeout=5)
        assert nack.error_detail is not None
        assert nack.error_detail.code == 3
        stream.expect_nothing()  # a NACK is not answered until something changes

        v3 = cp.remove(CLUSTER, ["a"])
        third = stream.recv()
        assert (third.version_info, names_of(third)) == (v3, ["b", "c"])
        assert [s.node_id for s in cp.streams(active=True)] == ["n1"]
    finally:
        stream.close()


def test_sotw_named_subscriptions(xds_control_plane: ControlPlane, channel: grpc.Channel) -> None:
    cp = xds_control_plane
    cp.set_resources(ENDPOINT, [ClusterLoadAssignment(cluster_name="e1")])
    cp.set_resources(LISTENER, [Listener(name="l1")])
    stream = sotw(channel)
    try:
        # A missing non-full-state resource gets no answer...
        stream.send(DiscoveryRequest(type_url=ENDPOINT, resource_names=["missing"]))
        stream.expect_nothing()
        # ...while a full-state type says "none of these" with an empty response.
        stream.send(DiscoveryRequest(type_url=LISTENER, resource_names=["nope"]))
        empty = stream.recv()
        assert empty.type_url == LISTENER
        assert list(empty.resources) == []
        stream.send(DiscoveryRequest(type_url=ENDPOINT, resource_names=["missing", "e1"]))
        got = stream.recv()
        assert names_of(got) == ["e1"]
    finally:
        stream.close()


def test_sotw_pushes_endpoints_with_clusters(
    xds_control_plane: ControlPlane, channel: grpc.Channel
) -> None:
    cp = xds_control_plane
    cp.set_resources(CLUSTER, [Cluster(name="c1")])
    cp.set_resources(ENDPOINT, [ClusterLoadAssignment(cluster_name="c1")])
    stream = sotw(channel)
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER))
        cds = stream.recv()
        stream.send(
            DiscoveryRequest(
                type_url=CLUSTER, version_info=cds.version_info, response_nonce=cds.nonce
            )
        )
        stream.send(DiscoveryRequest(type_url=ENDPOINT, resource_names=["c1"]))
        eds = stream.recv()
        assert eds.type_url == ENDPOINT
        stream.send(
            DiscoveryRequest(
                type_url=ENDPOINT,
                resource_names=["c1"],
                version_info=eds.version_info,
                response_nonce=eds.nonce,
            )
        )
        cp.wait_for_ack(ENDPOINT, eds.version_info)
        cp.update(CLUSTER, [Cluster(name="c1", connect_timeout=Duration(seconds=3))])
        assert stream.recv().type_url == CLUSTER
        again = stream.recv()  # unchanged EDS, pushed again so Envoy can finish warming
        assert again.type_url == ENDPOINT
        assert again.nonce != eds.nonce
    finally:
        stream.close()


def test_delta_subscribe_remove_and_initial_versions(
    xds_control_plane: ControlPlane, channel: grpc.Channel
) -> None:
    cp = xds_control_plane
    cp.set_resources(
        CLUSTER, {"a": Cluster(name="a"), "b": Cluster(name="b")}, versions={"a": "va"}
    )
    stream = delta(channel)
    try:
        stream.send(DeltaDiscoveryRequest(type_url=CLUSTER, resource_names_subscribe=["a", "zz"]))
        first = stream.recv()
        assert [(r.name, r.version) for r in first.resources] == [("a", "va")]
        assert list(first.removed_resources) == ["zz"]  # does-not-exist, said at once
        stream.send(DeltaDiscoveryRequest(type_url=CLUSTER, response_nonce=first.nonce))
        assert cp.wait_for_ack(CLUSTER).response_version == first.system_version_info

        cp.remove(CLUSTER, ["a"])
        gone = stream.recv()
        assert list(gone.removed_resources) == ["a"]
        assert not gone.resources
    finally:
        stream.close()

    # A reconnecting client that already holds "a" at "va" gets only "b".
    cp.set_resources(
        CLUSTER, {"a": Cluster(name="a"), "b": Cluster(name="b")}, versions={"a": "va"}
    )
    again = delta(channel)
    try:
        again.send(
            DeltaDiscoveryRequest(
                type_url=CLUSTER, initial_resource_versions={"a": "va", "old": "1"}
            )
        )
        got = again.recv()
        assert [r.name for r in got.resources] == ["b"]
        assert list(got.removed_resources) == ["old"]
    finally:
        again.close()


def test_wait_timeout_is_clear(xds_control_plane: ControlPlane) -> None:
    with pytest.raises(WaitTimeoutError, match=r"timed out after 0\.1s waiting for"):
        xds_control_plane.wait_for_ack(CLUSTER, "9", timeout=0.1)


def test_late_ack_is_stale_but_still_an_ack(
    xds_control_plane: ControlPlane, channel: grpc.Channel
) -> None:
    cp = xds_control_plane
    v1 = cp.set_resources(CLUSTER, [Cluster(name="a")])
    stream = sotw(channel)
    try:
        stream.send(DiscoveryRequest(type_url=CLUSTER))
        first = stream.recv()
        cp.update(CLUSTER, [Cluster(name="b")])
        stream.recv()
        # The ACK of the first response arrives after the second was sent.
        stream.send(DiscoveryRequest(type_url=CLUSTER, version_info=v1, response_nonce=first.nonce))
        late = cp.wait_for_ack(CLUSTER, v1)
        assert late.classification == "stale"
        assert late.is_ack
        assert not late.is_nack
    finally:
        stream.close()


def test_subscriptions_are_tracked_per_stream(
    xds_control_plane: ControlPlane, channel: grpc.Channel
) -> None:
    cp = xds_control_plane
    sotw_stream, delta_stream = sotw(channel), delta(channel)
    try:
        sotw_stream.send(DiscoveryRequest(type_url=LISTENER, node=Node(id="s")))
        delta_stream.send(
            DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_subscribe=["x", "y"])
        )
        legacy = cp.wait_for_subscription(LISTENER, wildcard=True, node_id="s")
        named = cp.wait_for_subscription(ENDPOINT, ["x", "y"], exact=True)
        assert legacy != named
        delta_stream.send(
            DeltaDiscoveryRequest(type_url=ENDPOINT, resource_names_unsubscribe=["x"])
        )
        assert cp.wait_for_subscription(ENDPOINT, ["y"], exact=True) == named
        assert cp.subscriptions(ENDPOINT)[named].names == frozenset({"y"})
        with pytest.raises(WaitTimeoutError, match=r"streams have \{"):
            cp.wait_for_subscription(ENDPOINT, ["x"], timeout=0.2)
    finally:
        sotw_stream.close()
        delta_stream.close()
    cp.wait_for_streams_closed()
    assert cp.subscriptions(ENDPOINT) == {}


def test_counted_versions_never_repeat_an_explicit_one(xds_control_plane: ControlPlane) -> None:
    first = xds_control_plane.set_resources(CLUSTER, {"a": Cluster(name="a")}, version="1")
    second = xds_control_plane.set_resources(CLUSTER, {"a": Cluster(name="a", alt_stat_name="x")})
    third = xds_control_plane.set_resources(CLUSTER, {"b": Cluster(name="b")}, version="5")
    fourth = xds_control_plane.set_resources(CLUSTER, {"c": Cluster(name="c")})
    assert first == "1"
    assert second != first
    assert third == "5"
    assert fourth not in {first, second, third}
