"""The Node helper."""

from __future__ import annotations

from envoy.config.core.v3.base_pb2 import Node as NodeProto

from xds_client import Locality, Node, __version__
from xds_client.node import CLIENT_FEATURES, as_node_proto


def test_node_fills_identity_user_agent_and_features() -> None:
    proto = Node(
        id="n1",
        cluster="c1",
        locality=Locality(region="r", zone="z", sub_zone="s"),
        metadata={"team": "edge", "replicas": 3, "tags": ["a", "b"]},
    ).to_proto()
    assert proto.id == "n1"
    assert proto.cluster == "c1"
    assert (proto.locality.region, proto.locality.zone, proto.locality.sub_zone) == ("r", "z", "s")
    assert proto.user_agent_name == "xds-client"
    assert proto.user_agent_version == __version__
    assert list(proto.client_features) == list(CLIENT_FEATURES)
    assert proto.metadata["team"] == "edge"
    assert proto.metadata["replicas"] == 3
    assert proto.metadata.fields["tags"].list_value.values[1].string_value == "b"


def test_node_without_locality_or_metadata_leaves_them_unset() -> None:
    proto = Node(id="n").to_proto()
    assert not proto.HasField("locality")
    assert not proto.HasField("metadata")


def test_as_node_proto_accepts_a_ready_message_and_none() -> None:
    ready = NodeProto(id="given")
    assert as_node_proto(ready) is ready
    assert as_node_proto(None).user_agent_name == "xds-client"
    assert as_node_proto(Node(id="x")).id == "x"
