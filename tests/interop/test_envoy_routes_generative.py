"""Envoy 1.40 as the oracle of route selection and regex validation, on random route tables.

Each seed draws a RouteConfiguration: a few virtual hosts (domains drawn without
repeats, as Envoy requires unique domains), each with random routes (path, prefix,
RE2 regex, path_separated_prefix, case_sensitive, header matchers of every kind,
query parameter matchers, ``grpc``, ``tls_context``), some regexes being ones Envoy
refuses (also in a CORS policy under ``typed_per_filter_config``), and sometimes a
``vhost_header`` or ``ignore_path_parameters_in_path_matching``. Every
route answers with a ``direct_response`` naming itself. The configuration goes to
Envoy through the ControlPlane: Envoy's ACK or NACK must equal ``check_routes(...) ==
[]``. When Envoy accepts, random requests (authorities with ports, raw query strings,
``;`` path parameters, headers sent on one or several lines, among them inline ones
and the ``x-envoy-*`` control headers Envoy drops, the vhost header or not)
go through ``http.client`` to Envoy's listener, and the route that answers must be the
one ``select_route`` picks.

``XDS_CLIENT_GENERATIVE_SEEDS`` sets the number of seeds (default 15, a few seconds);
``XDS_CLIENT_GENERATIVE_FIRST_SEED`` the first one.
"""

from __future__ import annotations

import http.client
import os
import random
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.route.v3.route_components_pb2 import VirtualHost
from envoy.config.route.v3.route_pb2 import RouteConfiguration

# The CORS policy drawn into typed_per_filter_config: json_format finds it in the pool.
from envoy.extensions.filters.http.cors.v3 import cors_pb2  # type: ignore[import-untyped]  # noqa: F401
from google.protobuf import json_format, text_format
from google.protobuf.duration_pb2 import Duration

from xds_client.graph import check_routes, select_route
from xds_client.protocol._rules import rules_verdict
from xds_client.resources import CLUSTER, LISTENER, ROUTE
from xds_client.testing import ControlPlane

from ._interop_helpers import free_port, poll_until, serve_and_answer, tcp_listener
from .test_envoy import envoy_factory  # noqa: F401 - the fixture

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(600)]

SEEDS = int(os.environ.get("XDS_CLIENT_GENERATIVE_SEEDS", "15"))
FIRST_SEED = int(os.environ.get("XDS_CLIENT_GENERATIVE_FIRST_SEED", "0"))
REQUESTS = 40

DOMAINS = ["a.com", "*.a.com", "a.*", "a.com:8080", "[::1]", "[::1]:80", "b.a.com", "*.com"]
AUTHORITIES = [
    "a.com",
    "A.Com",
    "a.com:8080",
    "a.com:80",
    "b.a.com",
    "c.b.a.com",
    "a.org",
    "a.com:8080:80",
    "a.com:",
    "a.com:x",
    "a.com:8080x",
    "[::1]",
    "[::1]:80",
    "[::1]:80:",
    "x",
]
PATHS = [
    "/",
    "/a",
    "/A",
    "/a/b",
    "/ab",
    "/a.b",
    "/axb",
    "/123",
    "/a?q=1",
    "/a?q=a+b",
    "/a?q=a%20b",
    "/a?q=1&q=2",
    "/a?q=2&q=1",
    "/a?q",
    "/a?r=1&q=",
    "/a%62",
    "/a?a%62=1",
    "/Ab/c?q=1",
    "/a;x",
    "/a;x/b",
    "/a/b;c?q=1",
    "/;a",
    "/ab;",
    "/a;b?q;=1",
]
PREFIXES = ["/", "/a", "/A", "/a/", "/ab", ""]
REGEXES = [
    r"/a\z",
    r"/\w+",
    r"/[[:digit:]]+",
    r"/\Qa.b\E",
    r"/a.*",
    r"(?i)/a",
    r"/a|/ab",
    r"/\pL+",
    r"/(a",  # RE2 refuses: Envoy NACKs
    r"(a)\1",  # no backreferences in RE2
    r"((((a{20}){5}){2}))",  # a big program, which Envoy takes
]
STRINGS = ["1", "a", "A", "a b", "a+b", "a%20b", "", "2", "a,b", "prod", "application/grpc"]
VALUES = ["1", "5", "-5", "+5", "10", "1_0", "abc", "ABC", "prod", "", "a,b", "a", "2", "0x5"]
CONTENT_TYPES = [
    "application/grpc",
    "application/grpc+proto",
    "application/grpc-web",
    "application/grpcx",
    "application/grpc;x=1",
    "text/plain",
    "",
]


# x-a and x-b are ordinary headers (one entry per line); content-type, user-agent, via,
# if-none-match and authorization are inline in Envoy (the lines appended into one
# entry); Envoy drops the client's x-envoy-retry-on, x-envoy-internal and
# x-forwarded-client-cert before routing, and adds x-request-id and x-forwarded-proto
# to a request without them.
HEADER_NAMES = [
    "x-a",
    "x-b",
    "content-type",
    "user-agent",
    "via",
    "if-none-match",
    "authorization",
    "x-envoy-retry-on",
    "x-envoy-internal",
    "x-forwarded-client-cert",
    "x-forwarded-proto",
    "x-request-id",
]
VHOST_HEADER = "x-host"


def placeholder_cluster() -> Cluster:
    # Envoy holds LDS back until its first CDS answer: give it one cluster.
    return Cluster(name="unused", type=Cluster.STATIC, connect_timeout=Duration(seconds=1))


def string_matcher(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["exact", "prefix", "suffix", "contains", "safe_regex"])
    if kind == "safe_regex":
        return {"safe_regex": {"regex": rng.choice([r"a.*", r"\d+", r"[[:alpha:]]+", r"(a"])}}
    spec: dict[str, Any] = {kind: rng.choice(STRINGS)}
    if rng.random() < 0.4:
        spec["ignore_case"] = True
    return spec


def header_matcher(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": rng.choice(HEADER_NAMES)}
    kinds = ["none", "present", "exact", "string", "range", "prefix", "regex", "contains"]
    if spec["name"] == "x-request-id":  # Envoy makes up a random one: presence only
        kinds = ["none", "present"]
    kind = rng.choice(kinds)
    if kind == "present":
        spec["present_match"] = rng.random() < 0.5
    elif kind == "exact":
        spec["exact_match"] = rng.choice(STRINGS)
    elif kind == "string":
        spec["string_match"] = string_matcher(rng)
    elif kind == "range":
        start = rng.randrange(-10, 10)
        spec["range_match"] = {"start": str(start), "end": str(start + rng.randrange(1, 15))}
    elif kind == "prefix":
        spec["prefix_match"] = rng.choice(["a", "p", "application/grpc"])
    elif kind == "regex":
        spec["safe_regex_match"] = {"regex": rng.choice([r"\d+", r"a,b", r"[a-z]*", r"-?\d"])}
    elif kind == "contains":
        spec["contains_match"] = rng.choice([",", "b", "grpc"])
    if rng.random() < 0.3:
        spec["invert_match"] = True
    if rng.random() < 0.15:
        spec["treat_missing_header_as_empty"] = True
    return spec


def query_matcher(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": rng.choice(["q", "r", "a%62", "ab"])}
    roll = rng.random()
    if roll < 0.3:
        spec["present_match"] = rng.random() < 0.5
    elif roll < 0.85:
        spec["string_match"] = string_matcher(rng)
    return spec


def route_match(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["prefix", "prefix", "path", "safe_regex", "path_separated_prefix"])
    match: dict[str, Any] = {}
    if kind == "prefix":
        match["prefix"] = rng.choice(PREFIXES)
    elif kind == "path":
        match["path"] = rng.choice(PATHS).split("?", 1)[0]
    elif kind == "safe_regex":
        match["safe_regex"] = {"regex": rng.choice(REGEXES)}
    else:
        match["path_separated_prefix"] = rng.choice(["/a", "/A", "/ab"])
    if rng.random() < 0.25:
        match["case_sensitive"] = False
    if rng.random() < 0.5:
        match["headers"] = [header_matcher(rng) for _ in range(rng.randrange(1, 3))]
    if rng.random() < 0.35:
        match["query_parameters"] = [query_matcher(rng) for _ in range(rng.randrange(1, 3))]
    if rng.random() < 0.15:
        match["grpc"] = {}
    if rng.random() < 0.1:  # the requests are plaintext: no certificate
        flags = rng.choice(
            [
                {},
                {"presented": True},
                {"presented": False},
                {"validated": True},
                {"validated": False},
                {"presented": False, "validated": False},
            ]
        )
        match["tls_context"] = flags
    return match


CORS_URL = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"
CORS_ORIGINS = [r".*\.example\.com", "*.example.com", r"https://a\.com", "(a", r"\d+"]


def per_filter_cors(rng: random.Random) -> dict[str, Any]:
    """A typed_per_filter_config holding a CorsPolicy (an Any) with a regex origin."""
    origin = {"safe_regex": {"regex": rng.choice(CORS_ORIGINS)}}
    policy = {"@type": CORS_URL, "allow_origin_string_match": [origin]}
    return {"envoy.filters.http.cors": policy}


def random_routes(rng: random.Random, seed: int, clean: bool) -> RouteConfiguration:
    domains = rng.sample(DOMAINS, rng.randrange(2, len(DOMAINS) + 1))
    hosts: list[dict[str, Any]] = []
    count = rng.randrange(1, 4)
    for index in range(count):
        mine = domains[index::count]
        if index == count - 1 and rng.random() < 0.5:
            mine = [*mine, "*"]
        routes = [
            {
                "match": route_match(rng),
                "direct_response": {"status": 200, "body": {"inline_string": f"v{index}r{r}"}},
            }
            for r in range(rng.randrange(1, 6))
        ]
        for drawn in routes:
            if rng.random() < 0.1:
                drawn["typed_per_filter_config"] = per_filter_cors(rng)
        host: dict[str, Any] = {"name": f"v{index}", "domains": mine, "routes": routes}
        if rng.random() < 0.15:
            host["typed_per_filter_config"] = per_filter_cors(rng)
        hosts.append(host)
    # Envoy may not have routed the previous table yet: this host says which is live.
    probe = {
        "match": {"prefix": "/"},
        "direct_response": {"status": 200, "body": {"inline_string": f"s{seed}"}},
    }
    hosts.append({"name": "probe", "domains": [f"probe{seed}"], "routes": [probe]})
    config = json_format.ParseDict(
        {
            "name": "routes",
            "virtual_hosts": hosts,
            "ignore_port_in_host_matching": rng.random() < 0.5,
            "ignore_path_parameters_in_path_matching": rng.random() < 0.4,
        },
        RouteConfiguration(),
    )
    if rng.random() < 0.35:
        config.vhost_header = VHOST_HEADER
    if clean:  # drop what Envoy refuses, so two thirds of the seeds reach requests
        while check_routes(config):
            for vhost in config.virtual_hosts:
                alone = VirtualHost(typed_per_filter_config=vhost.typed_per_filter_config)
                if check_routes(RouteConfiguration(virtual_hosts=[alone])):
                    vhost.ClearField("typed_per_filter_config")
                for route in list(vhost.routes):
                    if check_routes(
                        RouteConfiguration(virtual_hosts=[VirtualHost(routes=[route])])
                    ):
                        vhost.routes.remove(route)
    return config


def random_request(rng: random.Random) -> tuple[str, str, list[tuple[str, str]]]:
    headers: list[tuple[str, str]] = []
    for name in HEADER_NAMES:
        if rng.random() < 0.45:
            pool = CONTENT_TYPES if name == "content-type" else VALUES
            headers += [(name, rng.choice(pool)) for _ in range(rng.choice([1, 1, 2]))]
    if rng.random() < 0.6:  # the vhost_header, when the table names one
        headers += [(VHOST_HEADER, rng.choice(AUTHORITIES)) for _ in range(rng.choice([1, 2]))]
    return rng.choice(AUTHORITIES), rng.choice(PATHS), headers


def envoy_answer(port: int, authority: str, path: str, headers: list[tuple[str, str]]) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", authority)
        for name, value in headers:  # one line each: a repeated name is several lines
            connection.putheader(name, value)
        connection.endheaders()
        reply = connection.getresponse()
        body = reply.read().decode()
        grpc_status = reply.getheader("grpc-status")
        if grpc_status is not None:
            # A gRPC request gets Envoy's local replies the gRPC way: HTTP 200, the
            # status in grpc-status (12, UNIMPLEMENTED, for no route), the body in
            # grpc-message.
            return reply.getheader("grpc-message") or ("404" if grpc_status == "12" else body)
        return body if reply.status == 200 else str(reply.status)
    finally:
        connection.close()


def library_answer(
    config: RouteConfiguration, authority: str, path: str, headers: list[tuple[str, str]]
) -> str:
    grouped: dict[str, list[str]] = {}
    for name, value in headers:
        grouped.setdefault(name, []).append(value)
    choice = select_route(config, authority, path, headers=grouped)
    if choice is None or choice.route is None:
        return "404"
    return choice.route.direct_response.body.inline_string


def test_random_route_tables_agree_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    verdict_mismatches: list[tuple[int, bool, list[str], str]] = []
    choice_mismatches: list[tuple[int, tuple[str, str, list[tuple[str, str]]], str, str]] = []
    accepted = rejected = requests = 0
    answers: set[str] = set()
    shown: dict[int, RouteConfiguration] = {}
    proxy_port = free_port()
    with ControlPlane() as cp:
        cp.set_snapshot(
            {
                CLUSTER: [placeholder_cluster()],
                LISTENER: [tcp_listener("ingress", proxy_port, "routes")],
            },
            version="0",
        )
        envoy_factory(cp, "GRPC")
        cp.wait_for_ack(LISTENER, "0", timeout=20)
        for seed in range(FIRST_SEED, FIRST_SEED + SEEDS):
            rng = random.Random(seed)
            config = random_routes(rng, seed, clean=seed % 3 != 0)
            shown[seed] = config
            rules, _ = rules_verdict(config)
            ours = check_routes(config) + ([rules] if rules else [])
            version = f"s{seed}"
            reply = serve_and_answer(cp, ROUTE, config, version)
            if reply.is_ack != (ours == []):
                detail = reply.error_detail.message if reply.error_detail is not None else ""
                verdict_mismatches.append((seed, reply.is_ack, ours, detail))
            if not reply.is_ack:
                rejected += 1
                continue
            accepted += 1
            live = f"s{seed}"
            poll_until(
                lambda s=seed, t=live: (  # type: ignore[misc]
                    True
                    if envoy_answer(proxy_port, f"probe{s}", "/", [(VHOST_HEADER, f"probe{s}")])
                    == t
                    else None
                ),
                20,
                f"route table {live}",
            )
            for _ in range(REQUESTS):
                request = random_request(rng)
                theirs = envoy_answer(proxy_port, *request)
                mine = library_answer(config, *request)
                requests += 1
                answers.add(theirs)
                if theirs != mine:
                    choice_mismatches.append((seed, request, theirs, mine))
    summary = (
        f"{SEEDS} route tables ({accepted} accepted, {rejected} rejected by Envoy), "
        f"{requests} requests, {len(verdict_mismatches)} verdict and "
        f"{len(choice_mismatches)} choice disagreements"
    )
    print(summary)
    for seed, *rest in verdict_mismatches[:5] + choice_mismatches[:8]:
        print(seed, rest[:3])
        print(text_format.MessageToString(shown[seed], as_one_line=True)[:3000])
    assert verdict_mismatches == [], summary
    assert choice_mismatches == [], summary
    if SEEDS >= 10:
        assert accepted, summary
        assert rejected, summary
        assert len(answers) > 5, (summary, answers)
