"""Envoy 1.40 as the oracle of route selection, on random route tables and requests.

Each seed draws a RouteConfiguration (virtual hosts with exact, suffix, prefix and
catch-all domains; routes matching by prefix, path, RE2 regex or separated prefix, case
or not, with header, query-parameter and gRPC matchers, inverted or not) whose routes
answer with a direct response naming themselves. It goes to Envoy through the
ControlPlane; then random requests (authority with or without a port, paths with query
strings, headers sent on one line or several) go to Envoy as raw HTTP/1.1 bytes, and
the route that answers (or Envoy's 404) must be the one ``select_route`` picks.

``XDS_CLIENT_GENERATIVE_SEEDS`` sets the number of seeds (default 10, a few seconds);
``XDS_CLIENT_GENERATIVE_FIRST_SEED`` the first one.

Not drawn: what this host cannot make Envoy see the same way (HTTP/2 only behaviour,
a TLS context for ``RouteMatch.tls_context``), runtime fractions (random by design)
and the configurations Envoy or the library refuse (a seed whose table Envoy NACKs is
counted and skipped: its verdict belongs to the validation test).
"""

from __future__ import annotations

import functools
import os
import random
import socket
from typing import Any

import pytest
from envoy.config.route.v3.route_components_pb2 import HeaderMatcher, RouteMatch
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from google.protobuf import text_format

from xds_client.errors import WaitTimeoutError
from xds_client.graph import select_route
from xds_client.protocol._rules import check_rules
from xds_client.resources import CLUSTER, LISTENER, ROUTE
from xds_client.testing import ControlPlane, RecordedRequest

from ._interop_helpers import free_port, poll_until, tcp_listener
from .test_envoy import envoy_factory  # noqa: F401 - the fixture
from .test_envoy_chains_generative import placeholder_cluster

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(600)]

SEEDS = int(os.environ.get("XDS_CLIENT_GENERATIVE_SEEDS", "10"))
FIRST_SEED = int(os.environ.get("XDS_CLIENT_GENERATIVE_FIRST_SEED", "0"))
REQUESTS = 30

HOSTS = ["a.com", "b.a.com", "x.b.a.com", "a.org", "api.a.com", "other"]
DOMAINS = ["a.com", "*.a.com", "b.a.com", "a.*", "api.*", "*.com", "*", "other"]
PATHS = ["/", "/api", "/api/", "/api/v1", "/API/v1", "/api/v1/x", "/apix", "/a/b", "/q"]
QUERIES = ["", "?q=1", "?q=2&q=1", "?q=a%20b", "?q=a+b", "?r=1", "?q", "?Q=1", "?q=&r=2"]
HEADER_NAMES = ["x-a", "x-b", "content-type"]
HEADER_VALUES = ["1", "10", "abc", "ABC", "a,b", "", "-5", "application/grpc", "x1_0"]
CONTENT_TYPES = [
    "application/grpc",
    "application/grpc+proto",
    "application/grpc-web",
    "application/grpcx",
    "application/grpc;charset=utf-8",
    "text/plain",
]
REGEXES = ["/api/.*", "/[a-z]+", r"/api/v\d", "/A.*", "/a/b", r"\/q"]


def _string_matcher(rng: random.Random, matcher: Any, values: list[str]) -> None:
    kind = rng.choice(["exact", "prefix", "suffix", "contains", "safe_regex"])
    if kind == "safe_regex":
        # (Envoy refuses ignore_case on a regex, and an empty prefix/suffix/contains.)
        matcher.safe_regex.regex = rng.choice([".*", "a.*", "[0-9]+", "abc|1", r"\w+"])
        return
    value = rng.choice(values if kind == "exact" else [v[:3] for v in values if v])
    setattr(matcher, kind, value)
    if rng.random() < 0.3:
        matcher.ignore_case = True


def _header_matcher(rng: random.Random, header: HeaderMatcher) -> None:
    header.name = rng.choice(HEADER_NAMES)
    kind = rng.choice(["string", "present", "range", "absent"])
    if kind == "string":
        _string_matcher(rng, header.string_match, HEADER_VALUES)
    elif kind == "present":
        header.present_match = True
    elif kind == "range":
        header.range_match.start = rng.choice([-10, 0, 5])
        header.range_match.end = rng.choice([6, 11, 100])
    if rng.random() < 0.3:
        header.invert_match = True


def _route_match(rng: random.Random, match: RouteMatch) -> None:
    kind = rng.choice(["prefix", "prefix", "path", "safe_regex", "path_separated_prefix"])
    if kind == "prefix":
        match.prefix = rng.choice(["/", "/api", "/api/", "/a"])
    elif kind == "path":
        match.path = rng.choice(PATHS)
    elif kind == "safe_regex":
        match.safe_regex.regex = rng.choice(REGEXES)
    else:
        match.path_separated_prefix = rng.choice(["/api", "/a", "/api/v1"])
    if rng.random() < 0.2:
        match.case_sensitive.value = False
    for _ in range(rng.choice([0, 0, 1, 2])):
        _header_matcher(rng, match.headers.add())
    if rng.random() < 0.3:
        query = match.query_parameters.add(name=rng.choice(["q", "r"]))
        if rng.random() < 0.4:
            query.present_match = True
        else:
            _string_matcher(rng, query.string_match, ["1", "2", "a b", "a+b", "a%20b", ""])
    if rng.random() < 0.1:
        match.grpc.SetInParent()


def random_routes(rng: random.Random, name: str) -> RouteConfiguration:
    config = RouteConfiguration(name=name)
    domains = rng.sample(DOMAINS, rng.randint(1, 5))
    hosts = min(len(domains), rng.randint(1, 3))
    for h in range(hosts):
        vhost = config.virtual_hosts.add(name=f"vh{h}", domains=domains[h::hosts])
        for r in range(rng.randint(1, 6)):
            route = vhost.routes.add(name=f"vh{h}-r{r}")
            _route_match(rng, route.match)
            route.direct_response.status = 200
            # Read from a header: a gRPC request's direct response has no body.
            added = route.response_headers_to_add.add().header
            added.key = "x-route"
            added.value = route.name
    if rng.random() < 0.3:
        config.ignore_port_in_host_matching = True
    return config


def random_request(rng: random.Random) -> tuple[str, str, list[tuple[str, str]]]:
    authority = rng.choice(HOSTS)
    if rng.random() < 0.3:
        authority += rng.choice([":80", ":8080", ":8080:80"])
    path = rng.choice(PATHS) + rng.choice(QUERIES)
    headers: list[tuple[str, str]] = []
    for name in HEADER_NAMES:
        if rng.random() < 0.5:
            continue
        pool = CONTENT_TYPES if name == "content-type" else HEADER_VALUES
        for _ in range(rng.choice([1, 1, 2])):  # one line, or the same header twice
            headers.append((name, rng.choice(pool)))
    return authority, path, headers


def envoy_answer(port: int, authority: str, path: str, headers: list[tuple[str, str]]) -> str:
    lines = [f"GET {path} HTTP/1.1", f"Host: {authority}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        reply = b""
        while b"\r\n\r\n" not in reply and (chunk := sock.recv(65536)):
            reply += chunk
    head = reply.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "x-route":
            return value.strip()
    return "404"


def library_answer(
    config: RouteConfiguration, authority: str, path: str, headers: list[tuple[str, str]]
) -> str:
    grouped: dict[str, list[str]] = {}
    for name, value in headers:
        grouped.setdefault(name, []).append(value)
    choice = select_route(
        config, authority, path, headers=grouped, strip_port=config.ignore_port_in_host_matching
    )
    if choice is None or choice.route is None:
        return "404"
    return choice.route.name


def _live(port: int, marker: str) -> bool | None:
    return envoy_answer(port, "probe.invalid", "/", []) == marker or None


def test_random_route_tables_agree_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    mismatches: list[tuple[int, tuple[Any, ...], str, str]] = []
    served = nacked = requests = 0
    answers: set[str] = set()
    port = free_port()
    with ControlPlane() as cp:
        cp.set_snapshot(
            {
                CLUSTER: [placeholder_cluster()],
                LISTENER: [tcp_listener("ingress", port, "routes")],
                ROUTE: [RouteConfiguration(name="routes")],
            },
            version="0",
        )
        envoy_factory(cp, "GRPC")
        for type_url in (CLUSTER, LISTENER, ROUTE):
            cp.wait_for_ack(type_url, "0", timeout=20)
        for seed in range(FIRST_SEED, FIRST_SEED + SEEDS):
            rng = random.Random(seed)
            config = random_routes(rng, "routes")
            # A host no request names, answering with the seed: the table is live when
            # Envoy answers it (it swaps tables in on its worker after the ACK).
            probe = config.virtual_hosts.add(name="probe", domains=["probe.invalid"])
            marker = probe.routes.add(name=f"probe-{seed}")
            marker.match.prefix = "/"
            marker.direct_response.status = 200
            header = marker.response_headers_to_add.add().header
            header.key = "x-route"
            header.value = marker.name
            version = f"s{seed}"
            since = cp.mark()
            cp.set_resources(ROUTE, [config], version=version)

            def answered(r: RecordedRequest, v: str = version) -> bool:
                return r.response_version == v and (r.is_ack or r.is_nack)

            try:
                reply = cp.wait_for_request(ROUTE, answered, since=since, timeout=20)
            except WaitTimeoutError:
                shown = text_format.MessageToString(config, as_one_line=True)
                pytest.fail(f"seed {seed}: Envoy (crashed?) answered nothing to {shown}")
            if not reply.is_ack:
                nacked += 1
                if os.environ.get("XDS_CLIENT_GENERATIVE_VERBOSE"):
                    detail = reply.error_detail.message if reply.error_detail else ""
                    print(f"seed {seed} NACKed: {detail[-200:]}")
                continue
            assert check_rules(config) is None
            served += 1
            poll_until(functools.partial(_live, port, f"probe-{seed}"), 10, f"seed {seed}'s table")
            for _ in range(REQUESTS):
                request = random_request(rng)
                theirs = envoy_answer(port, *request)
                try:
                    mine = library_answer(config, *request)
                except Exception as exc:  # counted, so a run reports every kind of miss
                    mine = f"(error: {exc!r})"
                requests += 1
                answers.add(theirs)
                if theirs != mine:
                    mismatches.append((seed, request, theirs, mine))
    summary = (
        f"{SEEDS} route tables ({served} served, {nacked} NACKed by Envoy), "
        f"{requests} requests, {len(mismatches)} disagreements"
    )
    print(summary)
    for seed, request, theirs, mine in mismatches[:10]:
        print(f"seed {seed}: {request}: Envoy {theirs!r}, library {mine!r}")
    assert mismatches == [], summary
    if SEEDS >= 10:
        assert len(answers) > 3, (summary, answers)
