"""``xds-client graph LISTENER``: the tree, --json, errors and timeouts."""

from __future__ import annotations

from typing import Any

import pytest

from xds_client.resources import CLUSTER
from xds_client.testing import ControlPlane

from .conftest import EXAMPLE_RESOURCES

pytestmark = pytest.mark.timeout(60)


def test_graph_prints_the_tree(cli: Any, served: ControlPlane) -> None:
    result = cli("graph", "-s", served.address, "ingress")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "listener ingress  (v1)",
        "└─ routes local-routes  (v1)",
        "   └─ vhost shop [*]",
        "      └─ prefix '/'",
        "         └─ cluster backend (EDS)  (v1)",
        "            └─ endpoints backend  (v1)",
        "               └─ 10.0.0.1:8080 UNKNOWN (zone-a w=1)",
    ]


def test_graph_json_and_errors_exit_1(cli: Any) -> None:
    # Wrapped resources carry their name outside the body, so the NACK can name it.
    with ControlPlane(wrap_sotw_resources=True) as cp:
        cp.load_file(EXAMPLE_RESOURCES)
        cp.update(CLUSTER, {"backend": b"\xff\xff not a Cluster"}, version="2")
        result = cli("graph", "-s", cp.address, "--json", "ingress")
    assert result.code == 1
    [doc] = result.json_lines()
    assert doc["listener"] == "ingress"
    assert list(doc["errors"]) == ["cds:backend"]
    assert doc["errors"]["cds:backend"].startswith("NACKed: ")
    assert doc["tree"]["children"][0]["label"] == "routes local-routes"
    assert "1 resource(s) of the graph have errors" in result.err


def test_graph_times_out_with_what_it_waits_for(cli: Any) -> None:
    with ControlPlane() as cp:
        result = cli("graph", "-s", cp.address, "--timeout", "0.3", "nothing")
    assert result.code == 1
    assert result.err.strip() == (
        "xds-client: error: no complete config of listener 'nothing' within 0.3s; "
        "still watching: ['lds:nothing']"
    )
