"""The sans-I/O REST-JSON codec: URLs, request bodies, responses and statuses."""

from __future__ import annotations

import json
import sys

import pytest
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.rpc.status_pb2 import Status

from xds_client.errors import UsageError
from xds_client.node import Node
from xds_client.resources import CLUSTER, LISTENER, V2_LISTENER, VIRTUAL_HOST, decode
from xds_client.transport._polling import PollError
from xds_client.transport._rest_codec import (
    build_request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_base_url,
    rest_path_for,
)

HCM = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)


def test_parse_base_url() -> None:
    ep = parse_base_url("https://cp.example:8443/xds/")
    assert (ep.scheme, ep.host, ep.port, ep.base_path, ep.tls) == (
        "https",
        "cp.example",
        8443,
        "/xds",
        True,
    )
    assert parse_base_url("http://127.0.0.1").port == 80
    assert parse_base_url("https://[::1]").port == 443
    for bad in ("127.0.0.1:8080", "grpc://x:1", "http://u:p@x:1", "http://x:1/?a=b", "http://x:z"):
        with pytest.raises(UsageError):
            parse_base_url(bad)


def test_rest_paths_come_from_the_registry() -> None:
    assert rest_path_for(CLUSTER) == "/v3/discovery:clusters"
    assert rest_path_for(V2_LISTENER) == "/v2/discovery:listeners"
    with pytest.raises(UsageError, match="no REST endpoint"):
        rest_path_for(VIRTUAL_HOST)


def test_request_uses_proto_names_and_complete_error_detail() -> None:
    request = DiscoveryRequest(
        type_url=LISTENER,
        version_info="v1",
        resource_names=["a", "b"],
        response_nonce="n1",
        node=Node("id", cluster="c").to_proto(),
        error_detail=Status(code=13, message="rejected"),
    )
    body = json.loads(encode_request(request))
    assert body["version_info"] == "v1"
    assert body["resource_names"] == ["a", "b"]
    assert body["type_url"] == LISTENER
    assert body["node"]["cluster"] == "c"
    assert body["node"]["user_agent_name"] == "xds-client"
    assert body["error_detail"] == {"code": 13, "message": "rejected", "details": []}
    assert "response_nonce" not in body
    assert "versionInfo" not in body


def test_first_request_has_explicit_empty_fields() -> None:
    body = json.loads(encode_request(DiscoveryRequest(type_url=CLUSTER)))
    assert body == {"version_info": "", "resource_names": [], "type_url": CLUSTER}


def test_build_request_prefixes_base_path_and_adds_headers() -> None:
    http = build_request(
        parse_base_url("http://h:1/api"),
        DiscoveryRequest(type_url=CLUSTER),
        headers=[("Authorization", "Bearer t")],
    )
    assert http.method == "POST"
    assert http.path == "/api/v3/discovery:clusters"
    assert ("Content-Type", "application/json") in http.headers
    assert ("Authorization", "Bearer t") in http.headers


def listener_json(camel: bool) -> bytes:
    tc = "typedConfig" if camel else "typed_config"
    fc = "filterChains" if camel else "filter_chains"
    return json.dumps(
        {
            ("versionInfo" if camel else "version_info"): "7",
            "resources": [
                {
                    "@type": LISTENER,
                    "name": "l1",
                    fc: [
                        {
                            "filters": [
                                {
                                    "name": "hcm",
                                    tc: {
                                        "@type": HCM,
                                        "stat_prefix": "in",
                                        "rds": {"route_config_name": "r1"},
                                    },
                                }
                            ]
                        }
                    ],
                }
            ],
        }
    ).encode()


@pytest.mark.parametrize("camel", [False, True])
def test_response_accepts_both_name_forms_and_nested_any(camel: bool) -> None:
    response = decode_response(
        200, listener_json(camel), request=DiscoveryRequest(type_url=LISTENER)
    )
    assert response is not None
    assert response.version_info == "7"
    assert response.type_url == LISTENER  # filled in: REST servers may leave it out
    listener = decode(response.resources[0], Listener)
    assert isinstance(listener, Listener)
    assert listener.name == "l1"
    assert listener.filter_chains[0].filters[0].typed_config.type_url == HCM


@pytest.mark.parametrize("status", [304, 404])
def test_unchanged_statuses_give_nothing(status: int) -> None:
    assert decode_response(status, b"", request=DiscoveryRequest(type_url=CLUSTER)) is None


@pytest.mark.parametrize(
    ("status", "retryable"), [(500, True), (503, True), (429, True), (400, False), (401, False)]
)
def test_error_statuses(status: int, retryable: bool) -> None:
    with pytest.raises(PollError) as info:
        decode_response(
            status, b"no such thing" * 100, request=DiscoveryRequest(type_url=CLUSTER), reason="X"
        )
    assert info.value.retryable is retryable
    assert info.value.status == status
    assert f"{status} X" in str(info.value)
    assert len(str(info.value)) < 300  # the body is cut


@pytest.mark.parametrize(
    "body", [b"not json", b"[1]", b'{"resources": [{"@type": "type.googleapis.com/nope.Nope"}]}']
)
def test_bad_bodies_are_not_retryable(body: bytes) -> None:
    with pytest.raises(PollError, match="not a DiscoveryResponse") as info:
        decode_response(200, body, request=DiscoveryRequest(type_url=CLUSTER))
    assert info.value.retryable is False
    assert info.value.__cause__ is not None


def test_untrusted_type_names_import_nothing() -> None:
    before = set(sys.modules)
    body = b'{"resources": [{"@type": "type.googleapis.com/json.tool.Evil"}]}'
    with pytest.raises(PollError):
        decode_response(200, body, request=DiscoveryRequest(type_url=CLUSTER))
    assert not {m for m in set(sys.modules) - before if m.startswith("json.")}


def test_server_side_helpers_round_trip() -> None:
    listener = Listener(name="l")
    response = DiscoveryResponse(version_info="1", type_url=LISTENER)
    response.resources.add().Pack(listener)
    for camel in (False, True):
        again = decode_response(
            200,
            encode_response(response, camel_case=camel),
            request=DiscoveryRequest(type_url=LISTENER),
        )
        assert again == response
    request = DiscoveryRequest(type_url=CLUSTER, resource_names=["x"])
    assert decode_request(encode_request(request)) == request
