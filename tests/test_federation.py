"""xdstp:// names (xRFC TP1) and the listener name templates of gRFC A47."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xds_client.client._bootstrap import parse_bootstrap
from xds_client.errors import BootstrapError, ResourceNameError, UsageError
from xds_client.federation import (
    XdstpName,
    expand_listener_template,
    glob_collection_of,
    is_glob_collection,
    normalize_name,
    parse_xdstp,
    percent_encode_path,
)

LDS = "envoy.config.listener.v3.Listener"


def test_parse_parts() -> None:
    name = parse_xdstp(f"xdstp://xds.authority.com/{LDS}/grpc/client/svc?project_id=1234")
    assert name == XdstpName("xds.authority.com", LDS, "grpc/client/svc", (("project_id", "1234"),))
    assert name.type_url == f"type.googleapis.com/{LDS}"
    assert not name.is_glob


def test_empty_authority_is_allowed() -> None:
    # A47: a new-style name without an authority is keyed by "".
    assert parse_xdstp(f"xdstp:///{LDS}/svc").authority == ""


def test_context_params_sorted_and_last_value_wins() -> None:
    assert normalize_name(f"xdstp://a/{LDS}/x?b=2&a=1&b=3") == f"xdstp://a/{LDS}/x?a=1&b=3"
    assert normalize_name(f"xdstp://a/{LDS}/x?") == f"xdstp://a/{LDS}/x"


def test_percent_encoding_round_trips_in_params() -> None:
    name = normalize_name(f"xdstp://a/{LDS}/x?k=a%26b&z=%3D")
    assert name == f"xdstp://a/{LDS}/x?k=a%26b&z=%3D"
    assert parse_xdstp(name).context_params == (("k", "a&b"), ("z", "="))


def test_old_style_names_unchanged() -> None:
    for name in ("listener_0", "foo?b=2&a=1", "xds:///svc", "*"):
        assert normalize_name(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("xdstp:/a/T/x", "starts with 'xdstp://'"),
        ("xdstp://a", "no resource type"),
        ("xdstp://a//x", "empty resource type"),
        ("xdstp://a/T", "no id"),
        ("xdstp://a/T/", "no id"),
        ("xdstp://a/T/x#alt=y", "processing directives"),
        ("xdstp://a/T/x?novalue", "not 'key=value'"),
        ("xdstp://u@a/T/x", "user information"),
    ],
)
def test_malformed_names(name: str, reason: str) -> None:
    with pytest.raises(ResourceNameError, match=reason) as info:
        parse_xdstp(name)
    assert isinstance(info.value, UsageError)
    assert info.value.name == name


def test_globs() -> None:
    assert is_glob_collection(f"xdstp://a/{LDS}/foo/*")
    assert is_glob_collection(f"xdstp://a/{LDS}/*?k=v")
    assert not is_glob_collection(f"xdstp://a/{LDS}/foo")
    assert not is_glob_collection("foo/*")
    assert parse_xdstp(f"xdstp://a/{LDS}/foo/*").is_glob
    assert glob_collection_of(f"xdstp://a/{LDS}/foo/bar?k=v") == f"xdstp://a/{LDS}/foo/*?k=v"
    assert glob_collection_of(f"xdstp://a/{LDS}/bar") == f"xdstp://a/{LDS}/*"
    assert glob_collection_of("bar") is None
    assert glob_collection_of("xdstp://a/T") is None


def test_percent_encode_path_keeps_path_characters() -> None:
    # RFC 3986 section 3.3 pchar and "/" stay; anything else is encoded.
    assert percent_encode_path("a/b:c@d!$&'()*+,;=-._~") == "a/b:c@d!$&'()*+,;=-._~"
    assert percent_encode_path("a b?c#d%") == "a%20b%3Fc%23d%25"


def test_template_expansion() -> None:
    assert expand_listener_template("%s", "a b") == "a b"  # old style: no encoding
    assert (
        expand_listener_template(f"xdstp://a/{LDS}/%s", "svc?x y") == f"xdstp://a/{LDS}/svc%3Fx%20y"
    )


# The bootstrap examples of gRFC A47, section "Example: Multiple Authorities".
A47_MULTIPLE = {
    "xds_servers": [
        {"server_uri": "xds-server.authority.com", "channel_creds": [{"type": "insecure"}]}
    ],
    "client_default_listener_resource_name_template": (
        f"xdstp://xds.authority.com/{LDS}/grpc/client/%s?project_id=1234"
    ),
    "authorities": {
        "xds.authority.com": {
            "client_listener_resource_name_template": (
                f"xdstp://xds.authority.com/{LDS}/grpc/client/%s?project_id=1234"
            )
        },
        "xds.other.com": {
            "xds_servers": [
                {"server_uri": "xds-server.other.com", "channel_creds": [{"type": "insecure"}]}
            ]
        },
    },
}


def test_a47_no_new_fields() -> None:
    boot = parse_bootstrap({"xds_servers": A47_MULTIPLE["xds_servers"]})
    assert boot.listener_name("xds:server.example.com") == "server.example.com"
    assert boot.listener_name("xds:///server.example.com") == "server.example.com"
    with pytest.raises(ResourceNameError, match="not in the bootstrap's authorities"):
        boot.listener_name("xds://xds.authority.com/server.example.com")


def test_a47_new_style_names_on_client() -> None:
    boot = parse_bootstrap(
        {
            "xds_servers": A47_MULTIPLE["xds_servers"],
            "client_default_listener_resource_name_template": f"xdstp://xds.authority.com/{LDS}/%s",
            "authorities": {"xds.authority.com": {}},
        }
    )
    expected = f"xdstp://xds.authority.com/{LDS}/server.example.com"
    assert boot.listener_name("xds:server.example.com") == expected
    assert boot.listener_name("xds://xds.authority.com/server.example.com") == expected
    assert boot.authorities["xds.authority.com"].servers == ()  # top-level servers


def test_a47_multiple_authorities() -> None:
    boot = parse_bootstrap(A47_MULTIPLE)
    client = f"xdstp://xds.authority.com/{LDS}/grpc/client/server.example.com?project_id=1234"
    assert boot.listener_name("xds:server.example.com") == client
    assert boot.listener_name("xds://xds.authority.com/server.example.com") == client
    assert (
        boot.listener_name("xds://xds.other.com/server.other.com")
        == f"xdstp://xds.other.com/{LDS}/server.other.com"
    )
    assert [s.uri for s in boot.authorities["xds.other.com"].servers] == ["xds-server.other.com"]


def test_authority_template_must_match_its_authority() -> None:
    bad = {
        "xds_servers": A47_MULTIPLE["xds_servers"],
        "authorities": {"a.com": {"client_listener_resource_name_template": "xdstp://b.com/T/%s"}},
    }
    with pytest.raises(BootstrapError, match=r"authorities\['a.com'\].*xdstp://a.com/"):
        parse_bootstrap(bad)


def test_bad_authorities_are_named() -> None:
    servers = A47_MULTIPLE["xds_servers"]
    with pytest.raises(BootstrapError, match="authorities"):
        parse_bootstrap({"xds_servers": servers, "authorities": []})
    with pytest.raises(BootstrapError, match=r"authorities\['a'\]\.xds_servers\[0\]\.server_uri"):
        parse_bootstrap({"xds_servers": servers, "authorities": {"a": {"xds_servers": [{}]}}})
    with pytest.raises(BootstrapError, match="client_default_listener_resource_name_template"):
        parse_bootstrap(
            {"xds_servers": servers, "client_default_listener_resource_name_template": 3}
        )


_segment = st.text(alphabet="abcxyz09-._", min_size=1, max_size=6)


@given(
    authority=_segment,
    rid=st.lists(_segment, min_size=1, max_size=3).map("/".join),
    params=st.dictionaries(_segment, st.text(max_size=5), max_size=4),
)
def test_normalisation_is_order_free_and_idempotent(
    authority: str, rid: str, params: dict[str, str]
) -> None:
    from urllib.parse import quote

    items = [f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params.items()]
    one = normalize_name(f"xdstp://{authority}/{LDS}/{rid}?{'&'.join(items)}")
    other = normalize_name(f"xdstp://{authority}/{LDS}/{rid}?{'&'.join(reversed(items))}")
    assert one == other
    assert normalize_name(one) == one
    assert dict(parse_xdstp(one).context_params) == params


def test_a95_flag_is_read_and_checked() -> None:
    servers = A47_MULTIPLE["xds_servers"]
    boot = parse_bootstrap(
        {"xds_servers": servers, "authorities": {"e": {"fallback_on_reachability_only": True}}}
    )
    assert boot.authorities["e"].fallback_on_reachability_only
    with pytest.raises(BootstrapError, match="fallback_on_reachability_only"):
        parse_bootstrap(
            {"xds_servers": servers, "authorities": {"e": {"fallback_on_reachability_only": 1}}}
        )


def test_same_server_in_two_authorities_is_one_target() -> None:
    server = {
        "server_uri": "x:1",
        "channel_creds": [{"type": "insecure"}],
        "call_creds": [{"type": "jwt_token_file", "config": {"jwt_token_file": "/t"}}],
    }
    boot = parse_bootstrap(
        {
            "xds_servers": [server],
            "authorities": {"a": {"xds_servers": [server]}, "b": {"xds_servers": [dict(server)]}},
        }
    )
    assert boot.authorities["a"].servers[0] is boot.servers[0]
    assert boot.authorities["b"].servers[0] is boot.servers[0]
