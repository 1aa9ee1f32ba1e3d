"""Route selection details where Envoy 1.40 answers differently from a naive reading (#25)."""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from google.protobuf import json_format

from xds_client.errors import ResourceValidationError
from xds_client.graph import check_routes, select_route, select_virtual_host, validate_routes
from xds_client.graph._routing import Headers


def config(match: dict[str, Any], **top: Any) -> RouteConfiguration:
    return json_format.ParseDict(
        {
            "name": "rc",
            "virtual_hosts": [
                {
                    "name": "vh",
                    "domains": ["*"],
                    "routes": [{"match": match, "direct_response": {"status": 200}}],
                }
            ],
            **top,
        },
        RouteConfiguration(),
    )


def hits(match: dict[str, Any], path: str = "/", headers: Headers | None = None) -> bool:
    return select_route(config(match), "a.com", path, headers=headers) is not None


def regex(pattern: str) -> dict[str, Any]:
    return {"safe_regex": {"regex": pattern}}


# 1. regexes are RE2's


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        (r"/a\z", "/a", True),  # \z: Python's re has \Z instead
        (r"/\Qa.b\E", "/a.b", True),
        (r"/\Qa.b\E", "/axb", False),
        (r"/\pL+", "/héllo", True),
        (r"/[[:digit:]]+", "/123", True),
        (r"/[[:digit:]]+", "/:", False),
        (r"/\w+", "/héllo", False),  # \w is ASCII in RE2
        (r"/\d+", "/١٢", False),  # so is \d
        (r"/a", "/ab", False),  # full match
    ],
)
def test_path_regex_is_re2(pattern: str, path: str, expected: bool) -> None:
    assert hits(regex(pattern), path) is expected


def test_string_matcher_ignore_case_is_ascii_only() -> None:
    def exact(spec: dict[str, Any]) -> dict[str, Any]:
        return {"prefix": "/", "headers": [{"name": "x", "string_match": spec}]}

    folded = exact({"exact": "\u01c5", "ignore_case": True})  # Dz with caron, title case
    assert hits(folded, headers={"x": "\u01c5"})
    assert not hits(folded, headers={"x": "\u01c6"})  # Python's lower() would fold it
    assert hits(exact({"exact": "AbC", "ignore_case": True}), headers={"x": "aBc"})
    kelvin = exact({"contains": "K", "ignore_case": True})
    assert not hits(kelvin, headers={"x": "\u212a"})  # KELVIN SIGN lowers to k in Python


def test_header_regex_uses_re2() -> None:
    match = {"prefix": "/", "headers": [{"name": "x", "safe_regex_match": {"regex": r"\d+\z"}}]}
    assert hits(match, headers={"x": "12"})
    assert not hits(match, headers={"x": "1a"})


def test_invalid_regex_is_a_typed_error_on_arrival_and_no_match_at_request() -> None:
    bad = config(regex(r"/(a"))
    problems = check_routes(bad)
    assert len(problems) == 1
    for part in ("'rc'", "virtual_hosts[0] ('vh')", "routes[0].match.safe_regex", "'/(a'"):
        assert part in problems[0]
    with pytest.raises(ResourceValidationError, match="safe_regex"):
        validate_routes(bad)
    assert select_route(bad, "a.com", "/(a") is None  # never raises
    backref = config(
        {"prefix": "/", "headers": [{"name": "x", "safe_regex_match": {"regex": r"(a)\1"}}]}
    )
    assert any("headers[0].safe_regex_match" in p for p in check_routes(backref))
    assert select_route(backref, "a.com", "/", headers={"x": "aa"}) is None
    assert check_routes(config(regex(r"/\z"))) == []


def test_query_and_string_matcher_regexes_are_checked() -> None:
    bad = config(
        {
            "prefix": "/",
            "query_parameters": [{"name": "q", "string_match": {"safe_regex": {"regex": "("}}}],
        }
    )
    assert any("query_parameters[0].string_match.safe_regex" in p for p in check_routes(bad))


# 2. query parameters


def query(name: str, **spec: Any) -> dict[str, Any]:
    return {"prefix": "/", "query_parameters": [{"name": name, **spec}]}


def test_query_values_are_not_decoded() -> None:
    exact = query("q", string_match={"exact": "a b"})
    assert not hits(exact, "/?q=a+b")
    assert not hits(exact, "/?q=a%20b")
    assert hits(query("q", string_match={"exact": "a%20b"}), "/?q=a%20b")
    assert hits(query("q", string_match={"exact": "a+b"}), "/?q=a+b")
    assert hits(query("a%62", string_match={"exact": "1"}), "/?a%62=1")
    assert not hits(query("ab", string_match={"exact": "1"}), "/?a%62=1")


def test_query_repeated_key_uses_first_value() -> None:
    exact = query("q", string_match={"exact": "2"})
    assert not hits(exact, "/?q=1&q=2")
    assert hits(exact, "/?q=2&q=1")


def test_query_present_match_false_means_absent() -> None:
    absent = query("q", present_match=False)
    assert hits(absent, "/")
    assert hits(absent, "/?r=1")
    assert not hits(absent, "/?q=1")
    assert not hits(absent, "/?q")
    assert hits(query("q", present_match=True), "/?q")
    assert hits(query("q"), "/?q")


# 3. headers


def header(**spec: Any) -> dict[str, Any]:
    return {"prefix": "/", "headers": [{"name": "x", **spec}]}


def test_header_on_several_lines_is_tested_value_by_value() -> None:
    exact = header(string_match={"exact": "b"})
    assert hits(exact, headers={"x": ["a", "b"]})
    assert not hits(exact, headers={"x": ["a", "c"]})
    assert not hits(header(string_match={"exact": "a,b"}), headers={"x": ["a", "b"]})
    inverted = header(string_match={"exact": "b"}, invert_match=True)
    assert not hits(inverted, headers={"x": ["a", "b"]})
    assert hits(inverted, headers={"x": ["a", "c"]})


def test_name_only_inverted_matches_absent_header() -> None:
    assert hits(header(invert_match=True))
    assert not hits(header(invert_match=True), headers={"x": "1"})
    assert hits(header(present_match=True, invert_match=True))
    assert not hits(header(present_match=True, invert_match=True), headers={"x": ""})
    assert not hits(header(string_match={"exact": "1"}, invert_match=True))


def test_deprecated_empty_exact_match_matches_any_value() -> None:
    assert hits(header(exact_match=""), headers={"x": "anything"})
    assert not hits(header(exact_match=""))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", True),
        ("-5", True),
        ("10", False),  # [start, end)
        ("0", True),
        ("1_0", False),
        ("\u0665", False),  # ARABIC-INDIC DIGIT FIVE  # not ASCII
        ("5.0", False),
        ("", False),
        ("-", False),
        ("0x5", False),
        ("9223372036854775808", False),  # past int64
        # absl::SimpleAtoi (what Envoy calls) takes a sign and surrounding ASCII space.
        ("+5", True),
        (" 5 ", True),
        ("\t5", True),
        ("+-5", False),
        ("5\u00a0", False),
    ],
)
def test_range_match_parses_like_envoy(value: str, expected: bool) -> None:
    assert hits(header(range_match={"start": "-10", "end": "10"}), headers={"x": value}) is expected


def test_range_match_int64_edges() -> None:
    edge = header(range_match={"start": "-9223372036854775808", "end": "9223372036854775807"})
    assert hits(edge, headers={"x": "-9223372036854775808"})
    assert not hits(edge, headers={"x": "-9223372036854775809"})


# 4. grpc


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/grpc", True),
        ("application/grpc+proto", True),
        ("application/grpc-web", False),
        ("application/grpc-web+proto", False),
        ("application/grpcx", False),
        ("application/grpc;charset=utf-8", False),
        ("Application/grpc", False),
        # content-type is inline in Envoy: lines are appended, an empty one adds nothing
        (["application/grpc", ""], True),
        (["", "application/grpc"], True),
        (["application/grpc+a", "b"], True),  # "application/grpc+a,b"
        (["application/grpc", "b"], False),  # "application/grpc,b"
    ],
)
def test_grpc_match_content_type(content_type: str | list[str], expected: bool) -> None:
    assert hits({"prefix": "/", "grpc": {}}, headers={"content-type": content_type}) is expected


def test_inline_header_lines_are_one_value() -> None:
    # Envoy's codec appends the lines of an inline header (content-type, user-agent...)
    # into one entry, so a matcher sees "a,b" there and not "a" then "b".
    match = {"prefix": "/", "headers": [{"name": "content-type", "exact_match": "a,b"}]}
    assert hits(match, headers={"content-type": ["a", "b"]})
    assert hits(match, headers={"content-type": ["a", "", "b"]})
    assert not hits(match, headers={"x-other": ["a", "b"]} | {"content-type": "a"})
    suffix = {"prefix": "/", "headers": [{"name": "user-agent", "suffix_match": "a"}]}
    assert not hits(suffix, headers={"user-agent": ["xa", "b"]})


def test_program_size_over_envoy_default_is_rejected() -> None:
    assert any("program" in p for p in check_routes(config(regex(r"((((a{20}){5}){2}))"))))
    assert check_routes(config(regex(r"/\pL+"))) == []  # Envoy takes it (its RE2 counts less)


# 5. ignore_port_in_host_matching


@pytest.mark.parametrize(
    ("authority", "vhost"),
    [
        ("a.com:8080", "a"),
        ("a.com:8080:80", "a8080"),
        ("a.com:", "a"),
        ("[::1]:80", "v6"),
        ("[::1]:80:", "v6port"),
        ("[::1]", "v6"),
        ("a.com:x", "a"),  # the route table strips whatever follows the last ':'
    ],
)
def test_ignore_port_in_host_matching_strips_after_last_colon(authority: str, vhost: str) -> None:
    rc = json_format.ParseDict(
        {
            "ignore_port_in_host_matching": True,
            "virtual_hosts": [
                {"name": "a", "domains": ["a.com"]},
                {"name": "a8080", "domains": ["a.com:8080"]},
                {"name": "v6", "domains": ["[::1]"]},
                {"name": "v6port", "domains": ["[::1]:80"]},
                {"name": "other", "domains": ["*"]},
            ],
        },
        RouteConfiguration(),
    )
    chosen = select_virtual_host(rc, authority)
    assert chosen is not None
    assert chosen.name == vhost


# vhost_header and ignore_path_parameters_in_path_matching, as Envoy 1.40 honours them


def two_hosts(**top: Any) -> RouteConfiguration:
    return json_format.ParseDict(
        {
            "name": "rc",
            "virtual_hosts": [
                {
                    "name": "a",
                    "domains": ["a.com"],
                    "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 200}}],
                },
                {
                    "name": "b",
                    "domains": ["b.com"],
                    "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 200}}],
                },
            ],
            **top,
        },
        RouteConfiguration(),
    )


@pytest.mark.parametrize(
    ("headers", "vhost"),
    [
        ({"x-host": "b.com"}, "b"),  # the named header, not the authority
        ({"X-Host": ["b.com", "a.com"]}, "b"),  # its first line
        ({}, None),  # not sent: no virtual host (Envoy does not fall back on Host)
        ({"x-host": "c.com"}, None),
    ],
)
def test_vhost_header_picks_the_virtual_host(headers: Headers, vhost: str | None) -> None:
    choice = select_route(two_hosts(vhost_header="x-host"), "a.com", "/", headers=headers)
    assert (choice.virtual_host if choice is not None else None) == vhost


@pytest.mark.parametrize(
    ("match", "path", "expected"),
    [
        ({"path": "/a"}, "/a;x", True),
        ({"path": "/a/b"}, "/a;x/b", True),  # each segment's parameters go
        ({"prefix": "/a/"}, "/a;x/b", True),  # Envoy matches; cutting at ';' would not
        ({"path": "/a/b"}, "/a;x/b;y?q=1", True),
        ({"safe_regex": {"regex": "/a"}}, "/a;x?q=1", True),
        ({"path_separated_prefix": "/a"}, "/a;x", True),
        ({"path": "/"}, "/;a", True),
    ],
)
def test_path_parameters_are_ignored_when_asked(
    match: dict[str, Any], path: str, expected: bool
) -> None:
    on = config(match, ignore_path_parameters_in_path_matching=True)
    assert (select_route(on, "a.com", path) is not None) is expected
    assert select_route(config(match), "a.com", path) is None  # part of the path otherwise


def test_path_parameters_ignored_keep_the_query() -> None:
    match = {"prefix": "/a", "query_parameters": [{"name": "q", "string_match": {"exact": "1"}}]}
    on = config(match, ignore_path_parameters_in_path_matching=True)
    assert select_route(on, "a.com", "/a;x?q=1") is not None
