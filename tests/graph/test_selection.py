"""Route and filter-chain selection rules that Envoy's differential table does not reach."""

from __future__ import annotations

import pytest
from envoy.api.v2 import listener_pb2 as v2_listener
from envoy.api.v2.core.address_pb2 import CidrRange as V2CidrRange
from envoy.api.v2.listener import listener_components_pb2 as v2
from envoy.config.core.v3.address_pb2 import CidrRange
from envoy.config.core.v3.base_pb2 import RuntimeFractionalPercent
from envoy.config.listener.v3.listener_components_pb2 import FilterChain, FilterChainMatch
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_components_pb2 import (
    HeaderMatcher,
    Route,
    RouteAction,
    RouteMatch,
    VirtualHost,
)
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.type.v3.percent_pb2 import FractionalPercent
from google.protobuf.wrappers_pb2 import UInt32Value

from xds_client.graph import (
    Connection,
    check_filter_chains,
    normalize_cidr,
    select_filter_chain,
    select_filter_chain_v2,
    select_route,
    select_virtual_host,
)
from xds_client.graph._filter_chains import Mode


def vhosts(*domains: list[str]) -> RouteConfiguration:
    return RouteConfiguration(
        virtual_hosts=[VirtualHost(name=str(i), domains=d) for i, d in enumerate(domains)]
    )


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("a.b.example.com", "1"),  # the longer suffix wins, wherever it is listed
        ("x.example.com", "0"),
        ("example.com", "3"),  # exact beats every wildcard, even listed last
        ("example.org", "2"),
        ("zzz", "4"),
        ("example.com:80", "2"),  # the port is part of the host by default
    ],
)
def test_virtual_host_order(host: str, expected: str) -> None:
    config = vhosts(["*.example.com"], ["*.b.example.com"], ["example.*"], ["example.com"], ["*"])
    found = select_virtual_host(config, host)
    assert found is not None
    assert found.name == expected


def test_port_stripping_and_no_match() -> None:
    config = vhosts(["example.com"])
    assert select_virtual_host(config, "example.com:80") is None
    found = select_virtual_host(config, "example.com:80", strip_port=True)
    assert found is not None
    assert found.name == "0"
    assert select_route(config, "nope", "/") is None


def route_config(*routes: Route) -> RouteConfiguration:
    return RouteConfiguration(
        virtual_hosts=[VirtualHost(name="v", domains=["*"], routes=list(routes))]
    )


def test_runtime_fraction_uses_the_given_random_value() -> None:
    half = RuntimeFractionalPercent(
        default_value=FractionalPercent(numerator=50, denominator=FractionalPercent.HUNDRED)
    )
    config = route_config(
        Route(match=RouteMatch(prefix="/", runtime_fraction=half), route=RouteAction(cluster="a")),
        Route(match=RouteMatch(prefix="/"), route=RouteAction(cluster="b")),
    )
    assert select_route(config, "h", "/", random_value=49).cluster == "a"  # type: ignore[union-attr]
    assert select_route(config, "h", "/", random_value=50).cluster == "b"  # type: ignore[union-attr]
    assert select_route(config, "h", "/", random_value=149).cluster == "a"  # type: ignore[union-attr]


def test_multi_valued_headers_match_line_by_line_and_grpc_match() -> None:
    config = route_config(
        Route(
            match=RouteMatch(prefix="/", headers=[HeaderMatcher(name="x", exact_match="2")]),
            route=RouteAction(cluster="joined"),
        ),
        Route(
            match=RouteMatch(prefix="/", grpc=RouteMatch.GrpcRouteMatchOptions()),
            route=RouteAction(cluster_header="x-cluster"),
        ),
    )
    choice = select_route(config, "h", "/", headers={"X": ["1", "2"]})
    assert choice is not None
    assert choice.cluster == "joined"  # one line matches: "1,2" is not what is tested
    assert select_route(config, "h", "/", headers={"X": ["1,2"]}) is None
    grpc = select_route(
        config, "h", "/", headers={"content-type": "application/grpc", "x-cluster": "c"}
    )
    assert grpc is not None
    assert (grpc.action, grpc.cluster) == ("cluster_header", "c")
    assert select_route(config, "h", "/") is None


def cidr(address: str, length: int) -> CidrRange:
    return CidrRange(address_prefix=address, prefix_len=UInt32Value(value=length))


def chain(name: str, **match: object) -> FilterChain:
    return FilterChain(name=name, filter_chain_match=FilterChainMatch(**match))  # type: ignore[arg-type]


def conn(destination: str = "10.0.0.1", source: str = "192.168.1.1", **kw: object) -> Connection:
    return Connection(destination, 8080, source, **kw)  # type: ignore[arg-type]


def pick(listener: Listener, connection: Connection, mode: Mode = "envoy") -> str | None:
    choice = select_filter_chain(listener, connection, mode=mode)
    return None if choice is None else choice.name


def pick_v2(listener: v2_listener.Listener, connection: Connection) -> str | None:
    choice = select_filter_chain_v2(listener, connection)
    return None if choice is None else choice.name


def test_cidr_normalisation() -> None:
    assert str(normalize_cidr("10.1.2.3", 8)) == "10.0.0.0/8"
    assert str(normalize_cidr("2001:db8::1", 32)) == "2001:db8::/32"
    with pytest.raises(ValueError, match="does not appear to be"):
        normalize_cidr("not-an-ip", 8)


def test_most_specific_destination_then_server_name() -> None:
    listener = Listener(
        filter_chains=[
            chain("wide", prefix_ranges=[cidr("10.0.0.0", 8)]),
            chain("narrow", prefix_ranges=[cidr("10.0.0.0", 24)]),
            chain("narrow-sni", prefix_ranges=[cidr("10.0.0.0", 24)], server_names=["*.a.com"]),
            chain("exact-sni", prefix_ranges=[cidr("10.0.0.0", 24)], server_names=["x.a.com"]),
        ]
    )
    assert pick(listener, conn()) == "narrow"
    assert pick(listener, conn("10.9.0.1")) == "wide"
    assert pick(listener, conn(server_name="y.a.com", transport_protocol="tls")) == "narrow-sni"
    assert pick(listener, conn(server_name="x.a.com", transport_protocol="tls")) == "exact-sni"
    assert (
        pick(listener, conn("11.0.0.1")) is None
    )  # no default_filter_chain: the connection closes


def test_source_type_and_grpc_mode() -> None:
    listener = Listener(
        filter_chains=[
            chain("local", source_type=FilterChainMatch.SAME_IP_OR_LOOPBACK),
            chain("external", source_type=FilterChainMatch.EXTERNAL),
            chain("alpn", application_protocols=["h2"]),
        ],
        default_filter_chain=FilterChain(),
    )
    assert pick(listener, conn(source="127.0.0.1")) == "local"
    assert pick(listener, conn(source="10.0.0.1")) == "local"  # the same IP as the destination
    assert pick(listener, conn(source="8.8.8.8")) == "external"
    assert pick(listener, conn(source="8.8.8.8", application_protocols=("h2",))) == "alpn"
    # gRFC A36: chains naming ALPN never match; the rest works as in Envoy.
    assert (
        pick(listener, conn(source="8.8.8.8", application_protocols=("h2",)), mode="grpc")
        == "external"
    )


def test_duplicate_criteria_are_reported_after_normalisation() -> None:
    listener = Listener(
        filter_chains=[
            chain("a", prefix_ranges=[cidr("10.1.2.3", 8), cidr("11.0.0.0", 8)]),
            chain("b", prefix_ranges=[cidr("10.0.0.0", 8)]),
            chain("c", prefix_ranges=[cidr("10.0.0.0", 16)]),
            chain("bad", prefix_ranges=[cidr("10.0.0.0", 129)]),
        ]
    )
    problems = check_filter_chains(listener)
    assert len(problems) == 2
    assert problems[0].startswith("filter_chains[1] ('b')")
    assert "filter_chains[0]" in problems[0]
    assert problems[1].startswith("filter_chains[3] ('bad')")
    assert (
        check_filter_chains(Listener(filter_chains=[chain("a"), chain("c", source_ports=[1])]))
        == []
    )


def v2_chain(name: str, **match: object) -> v2.FilterChain:
    return v2.FilterChain(name=name, filter_chain_match=v2.FilterChainMatch(**match))  # type: ignore[arg-type]


def test_v2_three_step_rule() -> None:
    def prefix(address: str, length: int) -> V2CidrRange:
        return V2CidrRange(address_prefix=address, prefix_len=UInt32Value(value=length))

    listener = v2_listener.Listener(
        filter_chains=[
            v2_chain("sni", server_names=["api.example.com"]),
            v2_chain("prefix16", prefix_ranges=[prefix("10.0.0.0", 16)]),
            v2_chain(
                "prefix16-suffix", prefix_ranges=[prefix("10.0.0.0", 16)], address_suffix=".7"
            ),
            v2_chain("any"),
        ]
    )
    # Step 1: with an SNI only the chains naming it are considered.
    assert pick_v2(listener, conn(server_name="api.example.com")) == "sni"
    assert pick_v2(listener, conn(server_name="other.example.com")) is None
    # Step 2: the longest destination prefix; step 3: the longest suffix.
    assert pick_v2(listener, conn("10.0.3.7")) == "prefix16-suffix"
    assert pick_v2(listener, conn("10.0.3.8")) == "prefix16"
    assert pick_v2(listener, conn("172.16.0.1")) == "any"
