"""Envoy 1.40 as the oracle of the request headers route matching sees (#31).

Two facts about a request's headers decide a header matcher besides its value: whether
Envoy keeps the header inline (several lines become one value, joined with ``,``) and
whether its HttpConnectionManager drops or adds the header before routing. The first
test reads Envoy's own inline list from its start-up log; the second routes, for every
header of that list and a few others, a request without it, with one line and with
two lines, through a default HttpConnectionManager, and compares the route Envoy takes
with ``select_route``'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from google.protobuf import json_format

from xds_client.graph._routing import _INLINE_HEADERS
from xds_client.resources import CLUSTER, LISTENER, ROUTE
from xds_client.testing import ControlPlane

from ._interop_helpers import Peer, free_port, poll_until, serve_and_answer, tcp_listener
from .test_envoy import envoy_binary, envoy_factory  # noqa: F401 - the fixture
from .test_envoy_routes_generative import envoy_answer, library_answer, placeholder_cluster

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(120)]

# Framing and hop-by-hop headers: the HTTP/1 codec acts on them before any route does.
FRAMING = {
    "connection",
    "content-length",
    "expect",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
}
OTHERS = [
    "x-a",
    "cookie",
    "traceparent",
    "x-b3-traceid",
    "x-envoy-foo",
    "x-envoy-upstream-canary",
    "x-envoy-degraded",
    "x-envoy-peer-metadata",
]


def test_inline_headers_are_the_ones_envoy_prints(tmp_path: Path) -> None:
    binary = envoy_binary()
    if binary is None:
        pytest.skip("Envoy binary not installed: run `make .peers/envoy/.installed-stamp`")
    config = tmp_path / "bootstrap.json"
    config.write_text(json.dumps({"node": {"id": "probe", "cluster": "probe"}}))
    argv = [binary, "-c", str(config), "--disable-hot-restart", "--concurrency", "1"]
    peer = Peer([*argv, "-l", "info"])
    try:
        line = peer.wait_for_line(lambda text: "request header map:" in text, 20)
    finally:
        peer.stop()
    printed = line.split("bytes: ", 1)[1].strip().split(",")
    assert {name for name in printed if not name.startswith(":")} == _INLINE_HEADERS


def probe_routes(names: list[str]) -> RouteConfiguration:
    """Per header: /p<i> matches when it is present, /j<i> tells one line from joined."""
    routes: list[dict[str, Any]] = []

    def answering(match: dict[str, Any], body: str) -> dict[str, Any]:
        return {"match": match, "direct_response": {"status": 200, "body": {"inline_string": body}}}

    for index, name in enumerate(names):
        present = {"name": name, "present_match": True}
        routes.append(answering({"path": f"/p{index}", "headers": [present]}, "present"))
        for value, body in (("e1", "line"), ("e1,e1", "joined")):
            header = {"name": name, "string_match": {"exact": value}}
            routes.append(answering({"path": f"/j{index}", "headers": [header]}, body))
    routes.append(answering({"prefix": "/"}, "none"))
    return json_format.ParseDict(
        {"name": "routes", "virtual_hosts": [{"name": "v", "domains": ["*"], "routes": routes}]},
        RouteConfiguration(),
    )


def test_header_lines_and_sanitizing_agree_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    names = sorted(_INLINE_HEADERS - FRAMING) + OTHERS
    config = probe_routes(names)
    port = free_port()
    mismatches: list[tuple[str, str, list[tuple[str, str]], str, str]] = []
    with ControlPlane() as cp:
        cp.set_snapshot(
            {CLUSTER: [placeholder_cluster()], LISTENER: [tcp_listener("ingress", port, "routes")]},
            version="0",
        )
        envoy_factory(cp, "GRPC")
        cp.wait_for_ack(LISTENER, "0", timeout=20)
        assert serve_and_answer(cp, ROUTE, config, "1").is_ack
        poll_until(
            lambda: True if envoy_answer(port, "a.com", "/x", []) == "none" else None,
            20,
            "the route table",
        )
        for index, name in enumerate(names):
            for path, headers in (
                (f"/p{index}", []),
                (f"/p{index}", [(name, "e1")]),
                (f"/j{index}", [(name, "e1"), (name, "e1")]),
            ):
                theirs = envoy_answer(port, "a.com", path, headers)
                mine = library_answer(config, "a.com", path, headers)
                if theirs != mine:
                    mismatches.append((name, path, headers, theirs, mine))
    assert mismatches == [], f"{len(mismatches)} of {3 * len(names)} requests: {mismatches}"
