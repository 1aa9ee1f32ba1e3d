"""Realistic test resources, built the same way in the server and in the clients."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    from xds_client.store import ResourceKey

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
NODE_ID = "bench-node"


def cluster_name(i: int) -> str:
    """Name of cluster number ``i``."""
    return f"cluster-{i:06d}"


def make_cluster(i: int, revision: int = 0) -> Cluster:
    """A Cluster of about 570 serialized bytes; ``revision`` changes its bytes."""
    from envoy.config.cluster.v3.cluster_pb2 import Cluster
    from envoy.config.core.v3.config_source_pb2 import ApiVersion
    from envoy.extensions.transport_sockets.tls.v3.tls_pb2 import (  # type: ignore[import-untyped]
        UpstreamTlsContext,
    )

    service = f"service-{i:06d}.default.svc.cluster.local"
    c = Cluster(name=cluster_name(i), type=Cluster.EDS, lb_policy=Cluster.LEAST_REQUEST)
    c.alt_stat_name = f"bench_{i:06d}_stats"
    c.connect_timeout.FromMilliseconds(1500)
    c.per_connection_buffer_limit_bytes.value = 32768
    c.eds_cluster_config.service_name = service
    c.eds_cluster_config.eds_config.ads.SetInParent()
    c.eds_cluster_config.eds_config.resource_api_version = ApiVersion.V3
    for priority, size in ((0, 1024), (1, 4096)):
        t = c.circuit_breakers.thresholds.add(priority=priority)
        t.max_connections.value = size
        t.max_pending_requests.value = size
        t.max_requests.value = size * 2
        t.max_retries.value = 3
    od = c.outlier_detection
    od.consecutive_5xx.value = 5
    od.interval.FromSeconds(10)
    od.base_ejection_time.FromSeconds(30)
    od.max_ejection_percent.value = 50
    hc = c.health_checks.add()
    hc.timeout.FromSeconds(1)
    hc.interval.FromSeconds(5)
    hc.unhealthy_threshold.value = 3
    hc.healthy_threshold.value = 2
    hc.http_health_check.path = "/healthz"
    hc.http_health_check.host = f"service-{i:06d}.internal"
    c.common_lb_config.healthy_panic_threshold.value = 40
    ctx = UpstreamTlsContext(sni=service)
    ctx.common_tls_context.alpn_protocols.extend(["h2", "http/1.1"])
    c.transport_socket.name = "envoy.transport_sockets.tls"
    c.transport_socket.typed_config.Pack(ctx)
    md = c.metadata.filter_metadata["bench"]
    md["team"] = "payments"
    md["owner"] = "platform-networking"
    md["revision"] = f"r{revision}"
    return c


def store_prefix(namespace: str) -> ResourceKey:
    """Where the benchmark's dashboards live."""
    from xds_client.store import ResourceKey

    return ResourceKey("dashboard.grafana.app", "dashboards", namespace)


def dashboard(key: ResourceKey, generation: int) -> dict[str, Any]:
    """A small Grafana-like dashboard document (about 400 bytes of JSON)."""
    return {
        "apiVersion": "dashboard.grafana.app/v1",
        "kind": "Dashboard",
        "metadata": {
            "name": key.name,
            "namespace": key.namespace,
            "labels": {"team": "payments", "tier": "gold"},
            "annotations": {"grafana.app/folder": "ops"},
        },
        "spec": {
            "title": f"Dashboard {key.name}",
            "generation": generation,
            "panels": [{"id": 1, "type": "timeseries", "title": "Requests per second"}],
        },
    }
