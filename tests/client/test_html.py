"""Notebook tables: the client's cache renders as HTML and stays a plain dict."""

from __future__ import annotations

from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client import Node, XdsClient
from xds_client.client._html import html_table
from xds_client.testing import ControlPlane


def test_cache_renders_as_a_table() -> None:
    with ControlPlane() as cp:
        cp.set_resources("cds", [Cluster(name="backend"), Cluster(name="<b>odd</b>")])
        with XdsClient(cp.address, node=Node(id="n")) as client, client.watch(Cluster):
            client.wait_for(Cluster, "<b>odd</b>", timeout=10)
            cache = client.resources(Cluster)
    assert isinstance(cache, dict)
    assert sorted(cache) == ["<b>odd</b>", "backend"]
    table = cache._repr_html_()  # type: ignore[attr-defined]
    assert table.startswith("<table><thead><tr><th>name</th><th>version</th>")
    assert "<td>backend</td><td>1</td><td>Cluster</td>" in table
    assert "<td>&lt;b&gt;odd&lt;/b&gt;</td>" in table  # names are escaped


def test_html_table_escapes_every_cell() -> None:
    assert html_table(["a&b"], [["<x>"]]) == (
        "<table><thead><tr><th>a&amp;b</th></tr></thead><tbody><tr><td>&lt;x&gt;</td></tr>"
        "</tbody></table>"
    )


def test_a_cache_prints_as_a_text_table() -> None:
    from xds_client.client._html import ResourceCache

    assert repr(ResourceCache("type.googleapis.com/envoy.config.cluster.v3.Cluster", {})) == (
        "name  version  type  bytes  ttl"
    )
