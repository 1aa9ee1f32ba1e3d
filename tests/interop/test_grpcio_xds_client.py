"""grpcio's built-in xDS client (C-core) against ControlPlane: LDS -> RDS -> CDS -> EDS."""

from __future__ import annotations

from pathlib import Path

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client.client import load_bootstrap
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane

from ._interop_helpers import (
    api_listener,
    eds_cluster,
    endpoints,
    grpc_backend,
    my_service_snapshot,
    python_peer,
    route_config,
    write_bootstrap,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(90)]

PEER = Path(__file__).with_name("grpc_xds_client_peer.py")


def test_grpcio_resolves_and_follows_endpoint_moves(tmp_path: Path) -> None:
    with (
        grpc_backend("backend-a") as port_a,
        grpc_backend("backend-b") as port_b,
        ControlPlane() as cp,
    ):
        cp.set_snapshot(my_service_snapshot(port_a), version="1")
        bootstrap = tmp_path / "bootstrap.json"
        write_bootstrap(bootstrap, cp.address)
        peer = python_peer(
            PEER, "xds:///my-service", "60", env={"GRPC_XDS_BOOTSTRAP": str(bootstrap)}
        )
        try:
            peer.wait_for_line(lambda line: line == "backend-a", timeout=30)
            for type_url in (LISTENER, ROUTE, CLUSTER, ENDPOINT):
                cp.wait_for_ack(type_url, "1", timeout=10)
            lds = cp.requests(LISTENER)[0]
            assert lds.resource_names == ["my-service"]
            assert lds.message.node.id == "grpcio-peer"

            cp.set_resources(ENDPOINT, [endpoints("my-cluster", port_b)], version="2")
            cp.wait_for_ack(ENDPOINT, "2", timeout=10)
            peer.wait_for_line(lambda line: line == "backend-b", timeout=30)

            # C-core rejects a STATIC cluster; its NACK carries INVALID_ARGUMENT.
            bad = eds_cluster("my-cluster")
            bad.type = Cluster.STATIC
            bad.ClearField("eds_cluster_config")
            cp.set_resources(CLUSTER, [bad], version="3")
            nack = cp.wait_for_nack(CLUSTER, "3", timeout=10)
            assert nack.error_detail is not None
            assert nack.error_detail.code == 3
            assert nack.version_info == "1"
        finally:
            peer.stop()


FED = "fed.example"
FED_LISTENER = f"xdstp://{FED}/envoy.config.listener.v3.Listener/my-service"
FED_ROUTE = f"xdstp://{FED}/envoy.config.route.v3.RouteConfiguration/my-route"


@pytest.mark.parametrize(
    "target",
    ["xds:///my-service", f"xds://{FED}/my-service"],
    ids=["default-template", "target-authority"],
)
def test_grpcio_federation_across_two_control_planes(tmp_path: Path, target: str) -> None:
    """gRFC A47 with C-core as the oracle: the xdstp Listener and route come from the
    authority's ControlPlane, the old-style cluster and endpoints from the top-level one,
    all from a bootstrap the ControlPlane wrote. ``xds:///`` goes through
    client_default_listener_resource_name_template, ``xds://fed.example/`` through the
    authority's default template; both name the same Listener, as our listener_name says."""
    with grpc_backend("backend-fed") as port, ControlPlane() as top, ControlPlane() as fed:
        fed.set_snapshot(
            {
                LISTENER: [api_listener(FED_LISTENER, FED_ROUTE)],
                ROUTE: [route_config(FED_ROUTE, "my-cluster")],
            },
            version="1",
        )
        top.set_snapshot(
            {CLUSTER: [eds_cluster("my-cluster")], ENDPOINT: [endpoints("my-cluster", port)]},
            version="1",
        )
        path = top.write_bootstrap(
            tmp_path / "bootstrap.json",
            node_id="grpcio-peer",
            authorities={FED: fed},
            default_listener_template=f"xdstp://{FED}/envoy.config.listener.v3.Listener/%s",
        )
        assert load_bootstrap(path).listener_name(target) == FED_LISTENER
        peer = python_peer(
            PEER,
            target,
            "60",
            env={"GRPC_XDS_BOOTSTRAP": str(path), "GRPC_EXPERIMENTAL_XDS_FEDERATION": "true"},
        )
        try:
            peer.wait_for_line(lambda line: line == "backend-fed", timeout=30)
            fed.wait_for_ack(LISTENER, "1", timeout=10)
            fed.wait_for_ack(ROUTE, "1", timeout=10)
            top.wait_for_ack(CLUSTER, "1", timeout=10)
            assert fed.requests(LISTENER)[0].resource_names == [FED_LISTENER]
            assert fed.requests(ROUTE)[0].resource_names == [FED_ROUTE]
            assert top.requests(LISTENER) == []
            assert fed.requests(CLUSTER) == []
        finally:
            peer.stop()
