"""Type-checked by mypy (global run and tests/test_stubs.py): the xds-protos stubs resolve."""

from __future__ import annotations

from envoy.api.v2 import discovery_pb2 as discovery_v2
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2
from google.protobuf.internal.containers import RepeatedScalarFieldContainer
from google.rpc import status_pb2
from typing_extensions import assert_type


def build_request() -> discovery_pb2.DiscoveryRequest:
    req = discovery_pb2.DiscoveryRequest(
        version_info="1",
        node=base_pb2.Node(id="n", cluster="c"),
        type_url="type.googleapis.com/envoy.config.listener.v3.Listener",
        error_detail=status_pb2.Status(code=3, message="bad"),
    )
    assert_type(req.version_info, str)
    assert_type(req.node, base_pb2.Node)
    assert_type(req.resource_names, RepeatedScalarFieldContainer[str])
    assert_type(req.error_detail.code, int)
    assert_type(req.HasField("node"), bool)
    return req


def listener_with_hcm() -> any_pb2.Any:
    hcm = hcm_pb2.HttpConnectionManager(stat_prefix="x")
    hcm.rds.route_config_name = "routes"
    listener = listener_pb2.Listener(name="l")
    listener.api_listener.api_listener.Pack(hcm)
    assert_type(listener.name, str)
    packed = any_pb2.Any()
    packed.Pack(listener)
    return packed


def v2_response() -> discovery_v2.DiscoveryResponse:
    resp = discovery_v2.DiscoveryResponse(version_info="1", nonce="a")
    assert_type(resp.nonce, str)
    return resp


def ads_stub_type() -> type[ads_pb2_grpc.AggregatedDiscoveryServiceStub]:
    return ads_pb2_grpc.AggregatedDiscoveryServiceStub
