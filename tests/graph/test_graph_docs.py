"""docs/graph.md: its Python block runs as written, and its picture is what the code draws.

Regenerate the picture after a rendering change with
``XDS_CLIENT_UPDATE_DOCS=1 .venv/bin/pytest tests/graph/test_graph_docs.py``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from envoy.config.core.v3.health_check_pb2 import HealthStatus

from xds_client.graph import ConfigSnapshot, ConfigTracker, ResourceKey
from xds_client.protocol._events import ResourceDoesNotExist, ResourceUpdated

from ._graph_resources import aggregate, api_listener, eds_cluster, endpoints, routes

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "graph.md"
PICTURE = ROOT / "docs" / "graph-example.svg"

pytestmark = pytest.mark.timeout(60)


def example_snapshot() -> ConfigSnapshot:
    """The graph of the picture: weighted routes, an aggregate, endpoints, one missing cluster."""
    shop = endpoints("shop-v1", 8080)
    shop.endpoints[0].lb_endpoints.add().CopyFrom(shop.endpoints[0].lb_endpoints[0])
    shop.endpoints[0].lb_endpoints[1].endpoint.address.socket_address.port_value = 8081
    shop.endpoints[0].lb_endpoints[1].health_status = HealthStatus.UNHEALTHY
    shop.endpoints[0].lb_endpoints[0].health_status = HealthStatus.HEALTHY
    config = routes("shop-routes", "checkout", "legacy", weighted=("shop-v1", "shop-v2"))
    events: list[tuple[str, str, Any]] = [
        ("lds", "shop", api_listener("shop", "shop-routes")),
        ("rds", "shop-routes", config),
        ("cds", "shop-v1", eds_cluster("shop-v1")),
        ("cds", "shop-v2", eds_cluster("shop-v2")),
        ("cds", "checkout", aggregate("checkout", "checkout-east", "checkout-west")),
        ("cds", "checkout-east", eds_cluster("checkout-east")),
        ("cds", "checkout-west", eds_cluster("checkout-west")),
        ("eds", "shop-v1", shop),
        ("eds", "shop-v2", endpoints("shop-v2", 9090)),
        ("eds", "checkout-east", endpoints("checkout-east", 7070)),
        ("eds", "checkout-west", endpoints("checkout-west", 7071)),
        ("cds", "legacy", None),
    ]
    tracker = ConfigTracker("shop")
    tracker.start()
    snapshot = None
    for kind, name, message in events:
        key = ResourceKey(kind, name)  # type: ignore[arg-type]
        event = (
            ResourceDoesNotExist("C", name)
            if message is None
            else ResourceUpdated("T", name, "7", message)
        )
        snapshot = tracker.receive(key, event).snapshot or snapshot
    assert snapshot is not None
    return snapshot


def test_the_picture_is_what_the_code_draws() -> None:
    drawn = example_snapshot()._repr_svg_()
    if os.environ.get("XDS_CLIENT_UPDATE_DOCS"):
        PICTURE.write_text(drawn, encoding="utf-8")
    assert PICTURE.read_text(encoding="utf-8") == drawn
    assert 'stroke="#dc2626"' in drawn  # the missing cluster is red
    root = ElementTree.fromstring(drawn)  # well-formed, standalone SVG
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "graph-example.svg" in PAGE.read_text(encoding="utf-8")


def test_the_text_tree_in_the_page_is_current() -> None:
    tree = example_snapshot().to_text()
    assert f"```text\n{tree}```" in PAGE.read_text(encoding="utf-8")


def test_python_block_runs_as_written(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    [code] = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    monkeypatch.chdir(ROOT)
    exec(compile(code, str(PAGE), "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("listener ingress  (v1)\n")
    assert "backend ['10.0.0.1:8080']" in printed


def test_html_lists_the_errors_in_red() -> None:
    html = example_snapshot()._repr_html_()
    assert html.startswith("<div><svg")
    assert '<ul style="color:#b91c1c"><li><code>cds:legacy</code>: does not exist</li></ul>' in html


def test_labels_are_whole_and_reasons_are_written_out() -> None:
    # Issue #35: a width estimate cut long labels, version first; a reason was only a hover.
    long_name = "checkout-" + "x" * 70
    tracker = ConfigTracker("shop")
    tracker.start()
    snapshot = None
    events: list[tuple[str, str, Any]] = [
        ("lds", "shop", api_listener("shop", "shop-routes")),
        ("rds", "shop-routes", routes("shop-routes", long_name, "gone")),
        ("cds", long_name, eds_cluster(long_name)),
        ("eds", long_name, endpoints(long_name, 8080)),
        ("cds", "gone", None),
    ]
    for kind, name, message in events:
        event = (
            ResourceDoesNotExist("C", name)
            if message is None
            else ResourceUpdated("T", name, "7", message)
        )
        key = ResourceKey(kind, name)  # type: ignore[arg-type]
        snapshot = tracker.receive(key, event).snapshot or snapshot
    assert snapshot is not None
    root = ElementTree.fromstring(snapshot._repr_svg_())
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert f"cluster {long_name} (EDS) v7" in texts  # whole, version included
    assert not any("…" in t for t in texts)
    assert "!! does not exist" in texts  # the reason is drawn, not only a tooltip
