"""Envoy 1.40 as the oracle of ``(validate.rules)``, on randomly mutated resources.

Each seed takes a valid Cluster or RouteConfiguration and changes one to three fields
that carry a rule (or sit inside an ``Any`` payload whose type has rules), with values
drawn from both sides of the rule: the edges Envoy's generated C++ checks read their own
way (NaN in a bounded double, a trailing newline against a header regex, ',' in a header
name, RE2 patterns) and plain breaches. The resource goes to Envoy through the
ControlPlane; Envoy's ACK or NACK must equal ``check_rules(resource) is None``, and
the verdict the client's core gets with the resource's bytes (``rules_verdict(...,
data)``, proved by a shape learnt from the seeds before it when it fits one).

``XDS_CLIENT_GENERATIVE_SEEDS`` sets the number of seeds (default 60, under a second);
``XDS_CLIENT_GENERATIVE_FIRST_SEED`` the first one.

Only mutations that Envoy refuses for a ``(validate.rules)`` reason, or accepts, are
drawn: values Envoy's own C++ code refuses beyond PGV (a cluster name its stats cannot
carry, a pseudo-header added to requests) are not the library's to predict and are
left out. Each resource carries its seed (a stat name, a virtual host's name), so that
no push repeats the one before: the ControlPlane sends nothing for an unchanged one.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.transport_sockets.tls.v3.tls_pb2 import (  # type: ignore[import-untyped]
    UpstreamTlsContext,
)
from google.protobuf import text_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from xds_client.errors import WaitTimeoutError
from xds_client.protocol._rules import check_rules, rules_verdict
from xds_client.resources import CLUSTER, LISTENER, ROUTE
from xds_client.testing import ControlPlane

from ._interop_helpers import free_port, serve_and_answer, tcp_listener
from .test_envoy import envoy_factory  # noqa: F401 - the fixture

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(600)]

SEEDS = int(os.environ.get("XDS_CLIENT_GENERATIVE_SEEDS", "60"))
FIRST_SEED = int(os.environ.get("XDS_CLIENT_GENERATIVE_FIRST_SEED", "0"))

HEADER_VALUES = ["ok", "a b", "tab\there", "trailing\n", "cr\rin", "", "x,y", "nul\x00"]
HEADER_NAMES = ["x-ok", "x,y", "x y", "x-name\n", ":authority", "a\rb", "x_y", ""]
# Not NaN: Envoy 1.40's (validate.rules) pass a NaN Percent, as PGV's comparisons do,
# and then Envoy aborts ("Value not in the range of 0..100", uncaught) on the cluster.
PERCENTS = [0.0, 50.0, 100.0, 100.5, -1.0, math.inf]
RATIOS = [math.nan, 0.5, 1.0, 1.5, 3.0, 3.5, 100.0, math.inf]


def base_cluster(name: str) -> Cluster:
    cluster = Cluster(name=name, type=Cluster.STATIC, connect_timeout=Duration(seconds=1))
    check = cluster.health_checks.add()
    check.timeout.FromSeconds(1)
    check.interval.FromSeconds(5)
    check.unhealthy_threshold.value = 3
    check.healthy_threshold.value = 2
    check.http_health_check.path = "/healthz"
    check.http_health_check.host = "svc.internal"
    tls = UpstreamTlsContext(sni="svc.example.com")
    cluster.transport_socket.name = "envoy.transport_sockets.tls"
    cluster.transport_socket.typed_config.Pack(tls)
    return cluster


def base_routes(name: str) -> RouteConfiguration:
    config = RouteConfiguration(name=name)
    host = config.virtual_hosts.add(name="vh", domains=["*"])
    route = host.routes.add(name="r")
    route.match.prefix = "/"
    route.direct_response.status = 200
    return config


def _tls(cluster: Cluster, change: Callable[[Any], None]) -> None:
    tls = UpstreamTlsContext()
    cluster.transport_socket.typed_config.Unpack(tls)
    change(tls)
    cluster.transport_socket.typed_config.Pack(tls)


def _set_sni(rng: random.Random) -> Callable[[Any], None]:
    value = rng.choice(["a" * 255, "a" * 256, "svc.example.com", ""])

    def change(tls: Any) -> None:
        tls.sni = value

    return change


def _add_header(options: Any, rng: random.Random) -> None:
    header = options.add().header
    # Not ':authority': Envoy's C++ refuses to add a pseudo-header, no (validate.rules).
    header.key = rng.choice([n for n in HEADER_NAMES if not n.startswith(":")])
    header.value = rng.choice(HEADER_VALUES)


CLUSTER_MUTATIONS: list[Callable[[Cluster, random.Random], object]] = [
    lambda c, r: setattr(c.health_checks[0].http_health_check, "host", r.choice(HEADER_VALUES)),
    lambda c, r: setattr(
        c.health_checks[0].http_health_check, "path", r.choice(["/ok", "/x\n", "", "/a b"])
    ),
    lambda c, r: setattr(c.common_lb_config.healthy_panic_threshold, "value", r.choice(PERCENTS)),
    lambda c, r: setattr(
        c.preconnect_policy.per_upstream_preconnect_ratio, "value", r.choice(RATIOS)
    ),
    lambda c, r: c.connect_timeout.FromNanoseconds(r.choice([0, 1, -1, 10**9])),
    lambda c, r: setattr(
        c.outlier_detection.max_ejection_percent, "value", r.choice([0, 100, 101])
    ),
    lambda c, r: _tls(c, _set_sni(r)),
    lambda c, r: _add_header(c.health_checks[0].http_health_check.request_headers_to_add, r),
]

ROUTE_MUTATIONS: list[Callable[[RouteConfiguration, random.Random], object]] = [
    lambda c, r: setattr(c, "vhost_header", r.choice(HEADER_NAMES)),
    lambda c, r: (
        c.virtual_hosts[0]
        .routes[0]
        .match.headers.add(name=r.choice(HEADER_NAMES), present_match=True)
    ),
    lambda c, r: _add_header(c.request_headers_to_add, r),
    lambda c, r: setattr(
        c.virtual_hosts[0].routes[0].match,
        "path_separated_prefix",
        r.choice(["/api", "/api/", "/a?b", "/a\n", "/"]),
    ),
]


def mutated(seed: int) -> tuple[str, Message]:
    rng = random.Random(seed)
    if rng.random() < 0.5:
        cluster = base_cluster("gen")
        cluster.alt_stat_name = f"seed{seed}"
        for change in rng.sample(CLUSTER_MUTATIONS, rng.randint(1, 3)):
            change(cluster, rng)
        return CLUSTER, cluster
    config = base_routes("routes")
    config.virtual_hosts[0].name = f"seed{seed}"
    for edit in rng.sample(ROUTE_MUTATIONS, rng.randint(1, 2)):
        edit(config, rng)
    return ROUTE, config


def test_mutated_resources_agree_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    mismatches: list[tuple[int, bool, str | None, str, str]] = []
    accepted = rejected = 0
    with ControlPlane() as cp:
        cp.set_snapshot(
            {
                CLUSTER: [base_cluster("gen")],
                LISTENER: [tcp_listener("ingress", free_port(), "routes")],
                ROUTE: [base_routes("routes")],
            },
            version="0",
        )
        envoy_factory(cp, "GRPC")
        for type_url in (CLUSTER, LISTENER, ROUTE):
            cp.wait_for_ack(type_url, "0", timeout=20)
        for seed in range(FIRST_SEED, FIRST_SEED + SEEDS):
            type_url, resource = mutated(seed)
            ours = check_rules(resource)
            data = resource.SerializeToString()
            with_bytes = rules_verdict(type(resource).FromString(data), None, data)[0]
            version = f"s{seed}"
            try:
                reply = serve_and_answer(cp, type_url, resource, version)
            except WaitTimeoutError:
                shown = text_format.MessageToString(resource, as_one_line=True)
                pytest.fail(f"seed {seed}: Envoy (crashed?) answered nothing to {shown}")
            accepted += reply.is_ack
            rejected += not reply.is_ack
            error = reply.error_detail
            for verdict in (ours, with_bytes):
                if reply.is_ack != (verdict is None):
                    detail = error.message if error is not None else ""
                    shown = text_format.MessageToString(resource, as_one_line=True)
                    mismatches.append((seed, reply.is_ack, verdict, detail[:300], shown[:400]))
    summary = (
        f"{SEEDS} resources ({accepted} accepted, {rejected} rejected by Envoy), "
        f"{len(mismatches)} disagreements"
    )
    print(summary)
    for seed, envoy_acked, reason, detail, shown in mismatches[:8]:
        print(f"seed {seed}: Envoy ACK {envoy_acked}, ours {reason!r}, Envoy {detail!r}: {shown}")
    assert mismatches == [], summary
    if SEEDS >= 10:
        assert accepted, summary
        assert rejected, summary
