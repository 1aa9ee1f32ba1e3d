"""The request as Envoy 1.40 routes it: inline headers, sanitized headers, TLS facts (#31).

Each case was first seen on Envoy itself (a route per header, probed with one and two
lines of it, through a default HttpConnectionManager); the generative test
(tests/interop/test_envoy_routes_generative.py) draws them again against Envoy.
"""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.http.cors.v3.cors_pb2 import CorsPolicy  # type: ignore[import-untyped]
from envoy.type.matcher.v3.regex_pb2 import RegexMatcher
from envoy.type.matcher.v3.string_pb2 import StringMatcher
from google.protobuf import json_format
from google.protobuf.any_pb2 import Any as AnyProto

from xds_client.graph import GENERATED_REQUEST_ID, TlsFacts, check_routes, select_route
from xds_client.graph._routing import Headers


def config(*matches: dict[str, Any]) -> RouteConfiguration:
    routes = [
        {"match": match, "direct_response": {"status": 200, "body": {"inline_string": f"r{i}"}}}
        for i, match in enumerate(matches)
    ]
    return json_format.ParseDict(
        {"name": "rc", "virtual_hosts": [{"name": "vh", "domains": ["*"], "routes": routes}]},
        RouteConfiguration(),
    )


def answer(
    routes: RouteConfiguration, headers: Headers | None = None, **options: Any
) -> str | None:
    choice = select_route(routes, "a.com", "/", headers=headers, **options)
    return None if choice is None else str(choice.route_index)


def on_header(name: str, exact: str) -> dict[str, Any]:
    return {"prefix": "/", "headers": [{"name": name, "string_match": {"exact": exact}}]}


def present(name: str) -> dict[str, Any]:
    return {"prefix": "/", "headers": [{"name": name, "present_match": True}]}


# ------------------------------------------------------------------ inline headers


@pytest.mark.parametrize(
    "name",
    [
        "accept",
        "accept-encoding",
        "authorization",
        "cache-control",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "origin",
        "referer",
        "pragma",
        "cdn-loop",
        "x-forwarded-port",
        "x-envoy-original-path",
        "x-envoy-attempt-count",
    ],
)
def test_inline_header_on_two_lines_is_one_joined_value(name: str) -> None:
    routes = config(on_header(name, "e1"), on_header(name, "e1,e1"))
    assert answer(routes, {name: "e1"}) == "0"
    assert answer(routes, {name: ["e1", "e1"]}) == "1"  # Envoy: "e1,e1", never "e1"


@pytest.mark.parametrize("name", ["x-a", "cookie", "x-envoy-upstream-canary", "traceparent"])
def test_other_header_lines_are_matched_one_by_one(name: str) -> None:
    routes = config(on_header(name, "e1"), on_header(name, "e1,e1"))
    assert answer(routes, {name: ["e1", "e1"]}) == "0"


# ------------------------------------------------------------------ sanitized headers

CONTROL = [
    "x-envoy-retry-on",
    "x-envoy-internal",
    "x-envoy-max-retries",
    "x-envoy-upstream-rq-timeout-ms",
    "x-envoy-force-trace",
    "x-envoy-original-url",
    "x-envoy-upstream-stream-duration-ms",
]


@pytest.mark.parametrize("name", CONTROL)
def test_external_request_loses_the_envoy_control_headers_it_sent(name: str) -> None:
    routes = config(present(name))
    assert answer(routes, {name: "5xx"}) is None  # Envoy's default: not internal
    assert answer(routes, {name: "5xx"}, internal=True) == "0"


def test_internal_request_is_marked_internal() -> None:
    routes = config(on_header("x-envoy-internal", "true"))
    assert answer(routes) is None
    assert answer(routes, {"x-envoy-internal": "no"}, internal=True) == "0"


@pytest.mark.parametrize(
    "name",
    ["x-envoy-decorator-operation", "x-envoy-downstream-service-cluster", "x-envoy-attempt-count"],
)
def test_other_envoy_headers_stay(name: str) -> None:
    assert answer(config(present(name)), {name: "1"}) == "0"


def test_client_certificate_header_is_always_removed() -> None:
    routes = config(present("x-forwarded-client-cert"))
    assert answer(routes, {"x-forwarded-client-cert": "By=x"}) is None
    assert answer(routes, {"x-forwarded-client-cert": "By=x"}, internal=True) is None


def test_request_id_and_forwarded_proto_are_added_when_absent() -> None:
    assert answer(config(present("x-request-id"))) == "0"
    assert answer(config(on_header("x-request-id", GENERATED_REQUEST_ID))) == "0"
    assert answer(config(on_header("x-request-id", "mine")), {"x-request-id": "mine"}) == "0"
    proto = config(on_header("x-forwarded-proto", "http"), on_header("x-forwarded-proto", "https"))
    assert answer(proto) == "0"
    assert answer(proto, tls=TlsFacts()) == "1"
    assert answer(proto, {"x-forwarded-proto": "https"}) == "1"  # the client's is kept


@pytest.mark.parametrize(
    ("lines", "routed"), [([""], False), (["", ""], False), (["", "abc"], True), ([], True)]
)
def test_empty_forwarded_proto_has_no_route(lines: list[str], routed: bool) -> None:
    # Envoy answers 404 even with a catch-all route; "" and "abc" joins into "abc".
    headers = {"x-forwarded-proto": lines} if lines else None
    assert (answer(config({"prefix": "/"}), headers) == "0") is routed


# ------------------------------------------------------------------ tls_context


def tls_route(**flags: bool) -> dict[str, Any]:
    return {"prefix": "/", "tls_context": flags}


@pytest.mark.parametrize(
    ("flags", "tls", "matches"),
    [
        ({"presented": True}, None, False),  # plaintext: never presented
        ({"presented": False}, None, True),
        ({"validated": True}, None, False),
        ({"validated": False}, None, True),
        ({}, None, True),  # an empty tls_context asks nothing
        ({"presented": True}, TlsFacts(), False),
        ({"presented": True}, TlsFacts(peer_certificate_presented=True), True),
        ({"presented": False}, TlsFacts(peer_certificate_presented=True), False),
        ({"presented": True, "validated": True}, TlsFacts(peer_certificate_presented=True), False),
        (
            {"presented": True, "validated": True},
            TlsFacts(peer_certificate_presented=True, peer_certificate_validated=True),
            True,
        ),
    ],
)
def test_tls_context_matches_the_connection(
    flags: dict[str, bool], tls: TlsFacts | None, matches: bool
) -> None:
    assert (answer(config(tls_route(**flags)), tls=tls) == "0") is matches


# ------------------------------------------------------------------ CORS inside Any

CORS_URL = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"


def cors(pattern: str) -> AnyProto:
    policy = CorsPolicy(
        allow_origin_string_match=[StringMatcher(safe_regex=RegexMatcher(regex=pattern))]
    )
    return AnyProto(type_url=CORS_URL, value=policy.SerializeToString())


def test_check_routes_looks_inside_a_per_route_cors_policy() -> None:
    routes = config({"prefix": "/"})
    route = routes.virtual_hosts[0].routes[0]
    route.typed_per_filter_config["envoy.filters.http.cors"].CopyFrom(cors("*.example.com"))
    (problem,) = check_routes(routes)
    assert problem.startswith(
        "route configuration 'rc': virtual_hosts[0] ('vh').routes[0]"
        ".typed_per_filter_config['envoy.filters.http.cors']"
        ".allow_origin_string_match[0].safe_regex: RE2 rejects '*.example.com'"
    )
    assert "no argument for repetition operator" in problem


def test_check_routes_looks_inside_a_per_vhost_cors_policy() -> None:
    routes = config({"prefix": "/"})
    routes.virtual_hosts[0].typed_per_filter_config["cors"].CopyFrom(cors("*.example.com"))
    assert len(check_routes(routes)) == 1
    routes.virtual_hosts[0].typed_per_filter_config["cors"].CopyFrom(cors(r".*\.example\.com"))
    assert check_routes(routes) == []


def test_check_routes_skips_an_any_it_cannot_read() -> None:
    routes = config({"prefix": "/"})
    per_filter = routes.virtual_hosts[0].typed_per_filter_config
    per_filter["unknown"].CopyFrom(AnyProto(type_url="type.googleapis.com/no.such.Type"))
    per_filter["corrupt"].CopyFrom(AnyProto(type_url=CORS_URL, value=b"\x0a\xff"))
    assert check_routes(routes) == []
