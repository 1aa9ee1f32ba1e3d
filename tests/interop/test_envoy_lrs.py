"""Envoy reports load to the ControlPlane's LRS side, and LrsClient's reports take the
shape of Envoy's.

go-control-plane has no LRS server to test against (it ships only the generated
service), so Envoy, a real LRS client, is the peer that proves the recording side.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from envoy.config.endpoint.v3.load_report_pb2 import ClusterStats

from xds_client import Node
from xds_client.lrs import SEND_ALL_CLUSTERS, LrsClient
from xds_client.node import Locality
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane, RecordedLoadReport

from ._interop_helpers import (
    Peer,
    eds_cluster,
    endpoints,
    free_port,
    http_backend,
    poll_until,
    route_config,
    tcp_listener,
)
from .test_envoy import bootstrap, envoy_binary, fetch

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(90)]

REQUESTS = 5


@pytest.fixture
def envoy_with_lrs(tmp_path: Path) -> Iterator[Any]:
    binary = envoy_binary()
    if binary is None:
        pytest.skip("Envoy binary not installed: run `make .peers/envoy/.installed-stamp`")
    started: list[Peer] = []

    def start(cp: ControlPlane) -> None:
        config = bootstrap(cp, "GRPC")
        config["cluster_manager"] = {
            "load_stats_config": {
                "api_type": "GRPC",
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": "xds_cluster"}}],
            }
        }
        path = tmp_path / "envoy-lrs.json"
        path.write_text(json.dumps(config))
        command = [binary, "-c", str(path), "--disable-hot-restart", "--concurrency", "1"]
        started.append(Peer([*command, "-l", "warning"]))

    yield start
    for peer in started:
        peer.stop()


def successes(reports: list[RecordedLoadReport], cluster: str) -> int:
    total = 0
    for report in reports:
        stats = report.cluster(cluster)
        if stats is not None:
            total += sum(s.total_successful_requests for s in stats.upstream_locality_stats)
    return total


def fields_set(stats: ClusterStats) -> set[str]:
    """The fields of a cluster's stats and of its localities that carry a value."""
    names = {f.name for f, _ in stats.ListFields()}
    for locality in stats.upstream_locality_stats:
        names |= {f"locality.{f.name}" for f, _ in locality.ListFields()}
    return names


def test_envoy_reports_to_the_control_plane_as_lrs_client_does(envoy_with_lrs: Any) -> None:
    with http_backend(b"ok") as backend_port, ControlPlane() as cp:
        proxy_port = free_port()
        cp.set_load_reporting(["backend"], interval=0.2)
        cp.set_snapshot(
            {
                CLUSTER: [eds_cluster("backend")],
                ENDPOINT: [endpoints("backend", backend_port)],
                LISTENER: [tcp_listener("ingress", proxy_port, "local_route")],
                ROUTE: [route_config("local_route", "backend")],
            },
            version="1",
        )
        envoy_with_lrs(cp)
        poll_until(lambda: fetch(f"http://127.0.0.1:{proxy_port}/"), 20, "a proxied reply")
        for _ in range(REQUESTS - 1):
            assert fetch(f"http://127.0.0.1:{proxy_port}/") == b"ok"
        poll_until(
            lambda: successes(cp.load_reports("backend"), "backend") >= REQUESTS or None,
            20,
            "Envoy's load reports of every request",
        )
        first = cp.load_reports()[0]
        assert first.node_id == "envoy-peer"
        assert SEND_ALL_CLUSTERS in first.request.node.client_features
        envoy_report = cp.load_reports("backend")[-1].cluster("backend")
        assert envoy_report is not None
        where = envoy_report.upstream_locality_stats[0].locality
        assert (where.region, where.zone) == ("local", "a")
        envoy_stream = first.stream

        # Our client, told of the same traffic, sends the same fields.
        with LrsClient(cp.address, node=Node(id="ours")) as lrs:
            recorder = lrs.store.cluster("backend").locality(Locality(region="local", zone="a"))
            for _ in range(REQUESTS):
                recorder.start()
                recorder.finish()
            ours = cp.wait_for_load_report(
                "backend", predicate=lambda r: r.node_id == "ours", timeout=10
            ).cluster("backend")
        assert ours is not None
        envoy_fields = {
            name
            for report in cp.load_reports("backend")
            if report.stream == envoy_stream and (stats := report.cluster("backend"))
            for name in fields_set(stats)
        }
        assert fields_set(ours) <= envoy_fields, fields_set(ours) - envoy_fields
        assert {"cluster_name", "load_report_interval", "upstream_locality_stats"} <= fields_set(
            ours
        )
