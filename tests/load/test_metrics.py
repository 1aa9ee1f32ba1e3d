"""The pieces without sockets: percentiles, the report's table, the plot, references."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from xds_client.load import Report, Sample, Summary, VersionResult, render_svg, summarize
from xds_client.load._profile import CDS, EDS, LDS, RDS, References
from xds_client.load._sample import SAMPLE_LISTENER, sample_config

SVG = "{http://www.w3.org/2000/svg}"


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1 .. 100
    assert summarize(reversed(values)) == Summary(100, 50.0, 90.0, 99.0, 100.0)
    assert summarize([3.0]) == Summary(1, 3.0, 3.0, 3.0, 3.0)
    assert summarize([]) == Summary(0, None, None, None, None)


def _report(**more: object) -> Report:
    base: dict[str, object] = {
        "server": "127.0.0.1:1", "protocol": "sotw", "profile": "envoy", "nodes": 2,
        "duration": 3.0, "clients_started": 2, "clients_complete": 2, "peak_connected": 2,
        "first_config": summarize([0.1, 0.2]),
        "push_to_ack": {"EDS": summarize([0.01, 0.03])},
        "versions": [VersionResult("EDS", "7", 1.5, 2, 0, 0.03)],
        "nacks": 0, "reconnects": 2, "errors": {"UNAVAILABLE": 1},
        "bytes_received": 1000, "bytes_sent": 100, "resources_held": 20,
        "series": [Sample(float(t), 2, t, t, 0, 0, 0) for t in range(3)],
    }  # fmt: skip
    base.update(more)
    return Report(**base)  # type: ignore[arg-type]


def test_the_table_shows_every_latency_in_milliseconds() -> None:
    table = _report().table()
    assert "first config                 2    100.0    200.0    200.0    200.0" in table
    assert "push to ACK EDS              2     10.0     30.0     30.0     30.0" in table
    assert "convergence                  1     30.0" in table
    assert "errors UNAVAILABLE 1" in table
    storm = {"at": 1.0, "clients": 2, "recovered": 2, "recovery": 0.25}
    assert "2 back and complete, all back in 0.250 s" in _report(storm=storm).table()


def test_the_plot_is_an_svg_with_series_versions_and_storm() -> None:
    storm = {"at": 1.0, "clients": 2, "recovered": 2, "recovery": 0.25}
    svg = ET.fromstring(render_svg(_report(storm=storm), title="a <run>"))
    assert svg.tag == f"{SVG}svg"
    assert len(svg.findall(f"{SVG}polyline")) == 3  # started, connected, complete
    assert len(svg.findall(f"{SVG}circle")) == 1  # one pushed version
    assert any(line.get("stroke-dasharray") for line in svg.findall(f"{SVG}line"))
    assert svg.findall(f"{SVG}text")[0].text == "a <run>"  # escaped, then parsed back


def test_references_follow_the_sample_config_and_decode_each_resource_once() -> None:
    config = sample_config(3)
    refs = References()
    listener = config["lds"][0].SerializeToString()
    route = config["rds"][0].SerializeToString()
    clusters = [c.SerializeToString() for c in config["cds"]]
    assert refs.wanted(LDS, [listener]) == {RDS: {"load-routes"}}
    assert refs.wanted(RDS, [route]) == {CDS: {"cluster-0000", "cluster-0001", "cluster-0002"}}
    assert refs.wanted(CDS, clusters) == {EDS: {"cluster-0000", "cluster-0001", "cluster-0002"}}
    assert refs.decodes == 5
    for _ in range(100):  # a hundred clients holding the same bytes
        refs.wanted(CDS, clusters)
    assert refs.decodes == 5


def test_references_of_inline_routes_and_eds_service_names() -> None:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.config.listener.v3.listener_pb2 import Listener
    from envoy.extensions.filters.network.http_connection_manager.v3 import (
        http_connection_manager_pb2 as hcm_pb2,
    )

    manager = hcm_pb2.HttpConnectionManager(stat_prefix="x")
    entry = manager.route_config.virtual_hosts.add(name="v", domains=["*"]).routes.add()
    entry.match.prefix = "/"
    entry.route.weighted_clusters.clusters.add(name="a")
    entry.route.weighted_clusters.clusters.add(name="b")
    listener = Listener(name=SAMPLE_LISTENER)
    listener.api_listener.api_listener.Pack(manager)
    refs = References()
    assert refs.wanted(LDS, [listener.SerializeToString()]) == {RDS: set(), CDS: {"a", "b"}}
    eds = Cluster(name="c", type=Cluster.EDS)
    eds.eds_cluster_config.service_name = "svc"
    static = Cluster(name="s", type=Cluster.STATIC)
    raws = [eds.SerializeToString(), static.SerializeToString()]
    assert refs.wanted(CDS, raws) == {EDS: {"svc"}}
