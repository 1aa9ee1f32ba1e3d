"""Filter-chain selection and validation as Envoy 1.40's FilterChainManagerImpl does them.

Each test pins one behaviour measured against Envoy (see
``tests/interop/test_envoy_chains_generative.py`` for the differential run).
"""

from __future__ import annotations

import pytest
from envoy.config.core.v3.address_pb2 import CidrRange
from envoy.config.listener.v3.listener_components_pb2 import FilterChain, FilterChainMatch
from envoy.config.listener.v3.listener_pb2 import Listener
from google.protobuf.wrappers_pb2 import UInt32Value

from xds_client.graph import (
    Connection,
    check_filter_chains,
    normalize_cidr,
    select_filter_chain,
)


def cidr(address: str, length: int) -> CidrRange:
    return CidrRange(address_prefix=address, prefix_len=UInt32Value(value=length))


def chain(name: str, **match: object) -> FilterChain:
    return FilterChain(name=name, filter_chain_match=FilterChainMatch(**match))  # type: ignore[arg-type]


def pick(listener: Listener, **kw: object) -> str | None:
    fields: dict[str, object] = {
        "destination_address": "10.0.0.1",
        "destination_port": 8080,
        "source_address": "192.168.1.1",
    }
    fields.update(kw)
    choice = select_filter_chain(listener, Connection(**fields))  # type: ignore[arg-type]
    return None if choice is None else choice.name


def test_direct_source_ip_comes_after_the_application_protocols() -> None:
    """Envoy's tree: ... server name, transport, ALPN, then direct source IP."""
    listener = Listener(
        filter_chains=[
            chain("direct", direct_source_prefix_ranges=[cidr("192.168.0.0", 16)]),
            chain("sni", server_names=["x.com"]),
            chain("alpn", application_protocols=["h2"]),
        ]
    )
    assert pick(listener, server_name="x.com") == "sni"
    assert pick(listener, application_protocols=("h2",)) == "alpn"
    assert pick(listener) == "direct"
    # No backtracking: the SNI chain wins the server-name step, then fails nothing.
    assert pick(listener, server_name="x.com", direct_source_address="8.8.8.8") == "sni"


def test_same_ip_or_loopback_is_127_0_0_1_or_the_destination_itself() -> None:
    listener = Listener(
        filter_chains=[
            chain("local", source_type=FilterChainMatch.SAME_IP_OR_LOOPBACK),
            chain("external", source_type=FilterChainMatch.EXTERNAL),
        ]
    )
    assert pick(listener, source_address="127.0.0.1") == "local"
    assert pick(listener, source_address="::1", destination_address="::2") == "local"
    assert pick(listener, source_address="10.0.0.1") == "local"  # the destination's IP
    assert pick(listener, source_address="127.0.0.7") == "external"  # not all of 127/8
    assert pick(listener, source_address="127.0.0.7", destination_address="127.0.0.7") == "local"


def test_application_protocols_follow_the_client_preference() -> None:
    listener = Listener(
        filter_chains=[
            chain("h1", application_protocols=["http/1.1"]),
            chain("h2", application_protocols=["h2", "h2c"]),
            chain("any"),
        ]
    )
    assert pick(listener, application_protocols=("h2", "http/1.1")) == "h2"
    assert pick(listener, application_protocols=("http/1.1", "h2")) == "h1"
    assert pick(listener, application_protocols=("h3", "h2c", "http/1.1")) == "h2"
    assert pick(listener, application_protocols=("h3",)) == "any"


def test_ipv4_prefix_len_over_32_is_clamped_to_32() -> None:
    assert str(normalize_cidr("10.0.0.1", 33)) == "10.0.0.1/32"
    assert str(normalize_cidr("10.0.0.1", 128)) == "10.0.0.1/32"
    assert str(normalize_cidr("2001:db8::1", 200)) == "2001:db8::1/128"
    listener = Listener(
        name="l",
        filter_chains=[chain("one", prefix_ranges=[cidr("10.0.0.1", 33)]), chain("rest")],
    )
    assert check_filter_chains(listener) == []
    assert pick(listener) == "one"
    assert pick(listener, destination_address="10.0.0.2") == "rest"


def test_a_listed_source_port_0_is_the_same_as_no_source_ports() -> None:
    listener = Listener(
        filter_chains=[
            chain("zero", source_ports=[0, 5], source_prefix_ranges=[cidr("192.168.0.0", 16)]),
            chain("any-port"),
        ]
    )
    assert pick(listener, source_port=5) == "zero"
    assert pick(listener, source_port=6) == "zero"


def test_the_wildcard_keys_envoy_tries() -> None:
    listener = Listener(
        filter_chains=[
            chain("com", server_names=["*.com"]),
            chain("a", server_names=["*.a.com"]),
            chain("exact", server_names=["A.com"]),
            chain("plain"),
        ]
    )
    assert pick(listener, server_name="x.b.a.com") == "a"
    assert pick(listener, server_name="a.com") == "exact"
    assert pick(listener, server_name="b.com") == "com"
    assert pick(listener, server_name="com") == "plain"


@pytest.mark.parametrize(
    ("match", "field", "words"),
    [
        ({"server_names": ["a.com", "A.com"]}, "server_names[1]", "repeats"),
        (
            {"prefix_ranges": [cidr("10.0.0.1", 8), cidr("10.0.0.0", 8)]},
            "prefix_ranges[1]",
            "repeats",
        ),
        ({"source_ports": [80, 80]}, "source_ports[1]", "repeats"),
        ({"application_protocols": ["h2", "h2"]}, "application_protocols[1]", "repeats"),
        (
            {"source_prefix_ranges": [cidr("1.2.3.4", 32), cidr("1.2.3.4", 40)]},
            "source_prefix_ranges[1]",
            "repeats",
        ),
        ({"server_names": ["*"]}, "server_names[0]", "partial wildcards"),
        ({"server_names": ["ok.com", "*x.com"]}, "server_names[1]", "partial wildcards"),
        ({"server_names": ["a.*"]}, "server_names[0]", "partial wildcards"),
        ({"destination_port": UInt32Value(value=0)}, "destination_port", "range [1, 65535]"),
        ({"address_suffix": "1"}, "filter_chain_match", "address_suffix"),
        ({"suffix_len": UInt32Value(value=0)}, "filter_chain_match", "suffix_len"),
        ({"prefix_ranges": [cidr("10.0.0.0", 129)]}, "prefix_ranges[0].prefix_len", "128"),
        ({"prefix_ranges": [cidr("not-an-ip", 8)]}, "prefix_ranges", "malformed IP"),
    ],
)
def test_check_rejects_what_envoy_rejects(match: dict[str, object], field: str, words: str) -> None:
    listener = Listener(name="shop", filter_chains=[chain("ok"), chain("bad", **match)])
    problems = check_filter_chains(listener)
    assert len(problems) == 1, problems
    assert problems[0].startswith("listener 'shop': filter_chains[1] ('bad').")
    assert field in problems[0]
    assert words in problems[0]


def test_check_names_both_chains_of_an_overlap() -> None:
    listener = Listener(
        name="shop",
        filter_chains=[
            chain("a", server_names=["a.com", "b.com"]),
            chain("b", server_names=["b.com"], transport_protocol="tls"),
            chain("c", server_names=["B.com", "c.com"]),
            chain("d", server_names=["b.com"], transport_protocol="tls"),
        ],
    )
    assert check_filter_chains(listener) == [
        "listener 'shop': filter_chains[2] ('c').filter_chain_match: overlaps "
        "filter_chains[0] ('a') (server_names='b.com'), so the most specific match is not unique",
        "listener 'shop': filter_chains[3] ('d').filter_chain_match: the same matching "
        "rules as filter_chains[1] ('b')",
    ]
