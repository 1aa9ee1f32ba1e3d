"""grpc-js-xds (Node) against ControlPlane: LDS -> RDS -> CDS -> EDS, then an endpoint move."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane

from ._interop_helpers import (
    Peer,
    eds_cluster,
    endpoints,
    grpc_backend,
    my_service_snapshot,
    write_bootstrap,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / ".peers" / "grpc-js-xds" / "node_modules"
PEER = Path(__file__).with_name("grpc_js_xds_peer.js")


def test_grpc_js_xds_resolves_and_follows_endpoint_moves(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "@grpc" / "grpc-js-xds").is_dir():
        pytest.skip("grpc-js-xds not installed: run `make .peers/grpc-js-xds/.installed-stamp`")
    with (
        grpc_backend("backend-a") as port_a,
        grpc_backend("backend-b") as port_b,
        ControlPlane() as cp,
    ):
        cp.set_snapshot(my_service_snapshot(port_a), version="1")
        bootstrap = tmp_path / "bootstrap.json"
        write_bootstrap(bootstrap, cp.address)
        peer = Peer(
            [node, str(PEER), "xds:///my-service", "60"],
            env={"GRPC_XDS_BOOTSTRAP": str(bootstrap), "NODE_PATH": str(NODE_MODULES)},
        )
        try:
            peer.wait_for_line(lambda line: line == "backend-a", timeout=30)
            for type_url in (LISTENER, ROUTE, CLUSTER, ENDPOINT):
                cp.wait_for_ack(type_url, "1", timeout=10)
            cp.set_resources(ENDPOINT, [endpoints("my-cluster", port_b)], version="2")
            cp.wait_for_ack(ENDPOINT, "2", timeout=10)
            peer.wait_for_line(lambda line: line == "backend-b", timeout=30)

            bad = eds_cluster("my-cluster")
            bad.type = Cluster.STATIC
            bad.ClearField("eds_cluster_config")
            cp.set_resources(CLUSTER, [bad], version="3")
            nack = cp.wait_for_nack(CLUSTER, "3", timeout=10)
            assert nack.error_detail is not None
            assert nack.error_detail.code == 14
        finally:
            peer.stop()
