"""The Fleet against go-control-plane (the server most control planes are built on).

go-control-plane keeps one snapshot per node id (``IDHash``): every simulated node
gets its own, as a real control plane would do for its proxies. The update driver
changes each node's snapshot (EDS), or, with a LinearCache for EDS, one endpoint
shared by every node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.peers.go_control_plane import GoControlPlane, peer_binary
from xds_client.load import CallableDriver, Fleet, FleetOptions, sample_config, sample_endpoints
from xds_client.resources import resource_type

binary, why = peer_binary()
if binary is None:
    pytest.skip(why, allow_module_level=True)

pytestmark = pytest.mark.interop

CLUSTERS = 4
NODES = [f"node-{i}" for i in range(3)]


def _by_url(config: dict[str, list[object]]) -> dict[str, list[object]]:
    return {resource_type(alias).type_url: items for alias, items in config.items()}


@pytest.fixture
def peer() -> Iterator[GoControlPlane]:
    with GoControlPlane() as go:
        for node in NODES:
            go.set_snapshot(node, _by_url(sample_config(CLUSTERS)), "1")  # type: ignore[arg-type]
        yield go


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_every_node_gets_its_config_and_acks_every_push(
    peer: GoControlPlane, protocol: str
) -> None:
    def push(step: int) -> None:
        config = sample_config(CLUSTERS)
        config["eds"] = sample_endpoints(CLUSTERS, revision=step)
        for node in NODES:
            peer.set_snapshot(node, _by_url(config), str(step + 1))  # type: ignore[arg-type]

    options = FleetOptions(
        server=peer.address, nodes=len(NODES), duration=1.0, push_interval=0.3,
        protocol=protocol,  # type: ignore[arg-type]
    )  # fmt: skip
    report = asyncio.run(Fleet(options, driver=CallableDriver(push)).run())
    assert report.clients_complete == len(NODES)
    assert report.errors == {}
    assert report.nacks == 0
    pushed = [v for v in report.versions if v.type == "EDS"]
    assert pushed
    assert all(v.acks == len(NODES) for v in pushed[:-1])  # the last may still be in flight
    assert report.push_to_ack["EDS"].count >= len(NODES)
