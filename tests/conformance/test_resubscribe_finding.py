"""The finding the checker made about our own ControlPlane (issue #33).

A SotW client that unsubscribes from an EDS resource and subscribes to it
again, with the version unchanged, must be answered. Before the fix the
ControlPlane stayed silent, so a second ``watch_config`` on one client, for a
listener whose routes name the same EDS cluster as a closed first one, never
completed.
"""

from __future__ import annotations

import pytest
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest

from tests.graph._graph_resources import api_listener, eds_cluster, endpoints, routes
from xds_client import Node, XdsClient
from xds_client.conformance import run
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane, RecordedRequest

pytestmark = pytest.mark.timeout(60)


def _serve_two_listeners_one_cluster(cp: ControlPlane) -> None:
    cp.set_snapshot(
        {
            LISTENER: [api_listener("A", "RA"), api_listener("B", "RB")],
            ROUTE: [routes("RA", "shared"), routes("RB", "shared")],
            CLUSTER: [eds_cluster("shared")],
            ENDPOINT: [endpoints("shared", 1001)],
        },
        version="1",
    )


def unsubscribed_all(request: RecordedRequest) -> bool:
    message = request.message
    return isinstance(message, DiscoveryRequest) and not message.resource_names


@pytest.mark.parametrize("ads", [True, False], ids=["ads", "per-type"])
def test_second_watch_config_sharing_an_eds_cluster_completes(ads: bool) -> None:
    with ControlPlane() as cp:
        _serve_two_listeners_one_cluster(cp)
        with XdsClient(cp.address, node=Node(id="finding"), ads=ads) as client:
            for _ in range(2):
                with client.watch_config("A") as watch:
                    assert watch.get(timeout=5).ok
                unsubscribed = cp.mark()
                cp.wait_for_request(ENDPOINT, unsubscribed_all, since=unsubscribed)
                with client.watch_config("B") as watch:
                    snapshot = watch.get(timeout=5)
                    assert snapshot.ok, snapshot.errors
                    assert set(snapshot.endpoints) == {"shared"}


def test_the_checker_finds_it_and_the_control_plane_passes() -> None:
    with ControlPlane() as cp:
        _serve_two_listeners_one_cluster(cp)
        report = run(cp.address, protocols=["sotw"], only=["sotw-resubscribe-answered"])
    assert [r.outcome for r in report.results] == ["passed", "passed"], report.results
