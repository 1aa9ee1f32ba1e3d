"""What checking ``(validate.rules)`` costs: a SotW push of N new clusters, rules on vs off.

Measured in the sans-I/O core, where the check runs (no network, no threads):
``SotwProtocol.receive`` of one response holding N new bench clusters (about 570
bytes each, with a TLS ``Any`` whose payload is checked too), parsed the way the
gRPC driver parses it (raw ``Any`` bytes). "SDK" is ``validate_rules=True`` (the
default), "raw" the same push with ``validate_rules=False``. A second row is the
re-push of the same bytes, which must stay free: unchanged resources are not
decoded, so not checked. The time is this process's CPU time (the core is
single-threaded and does no I/O), so other processes on a shared machine weigh
less than on a wall clock. Verdicts memoised by an earlier repetition are forgotten
before each one, so every push is a first push.

Then two rows per kind of resource (Cluster, Listener, RouteConfiguration,
ClusterLoadAssignment), beside decoding the same bytes: the full check
(``check_rules``) per fresh resource, and the verdict given the resource's bytes too,
as the core asks it, where a resource that fits a shape learnt from the ones before it
is proved from its bytes (``protocol/_shapes.py``). They have no target: they say
where validation spends.

Run alone with ``python -m bench.validation``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from bench._data import CDS, NODE_ID, make_cluster
from bench._harness import Config, Row, median, ratio_at_most

if TYPE_CHECKING:
    from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
    from envoy.config.listener.v3.listener_pb2 import Listener
    from envoy.config.route.v3.route_pb2 import RouteConfiguration
    from google.protobuf.message import Message


def make_listener(i: int) -> Listener:
    """A Listener of about 610 bytes: an HttpConnectionManager (RDS over ADS, a router
    filter, timeouts) and a DownstreamTlsContext, both in ``Any`` payloads."""
    from envoy.config.core.v3.base_pb2 import TrafficDirection
    from envoy.config.core.v3.config_source_pb2 import ApiVersion
    from envoy.config.listener.v3.listener_pb2 import Listener
    from envoy.extensions.filters.http.router.v3.router_pb2 import (  # type: ignore[import-untyped]
        Router,
    )
    from envoy.extensions.filters.network.http_connection_manager.v3 import (
        http_connection_manager_pb2 as hcm,
    )
    from envoy.extensions.transport_sockets.tls.v3.tls_pb2 import (  # type: ignore[import-untyped]
        DownstreamTlsContext,
    )

    listener = Listener(name=f"listener-{i:06d}", stat_prefix=f"ingress_{i}")
    address = listener.address.socket_address
    address.address = "0.0.0.0"
    address.port_value = 10000 + i % 50000
    listener.per_connection_buffer_limit_bytes.value = 1 << 20
    listener.listener_filters_timeout.FromSeconds(15)
    listener.traffic_direction = TrafficDirection.INBOUND
    chain = listener.filter_chains.add()
    chain.filter_chain_match.server_names.append(f"svc-{i}.example.com")
    chain.filter_chain_match.transport_protocol = "tls"
    manager = hcm.HttpConnectionManager(
        stat_prefix=f"ingress_http_{i}", codec_type=hcm.HttpConnectionManager.AUTO
    )
    manager.rds.route_config_name = f"route-{i:06d}"
    manager.rds.config_source.ads.SetInParent()
    manager.rds.config_source.resource_api_version = ApiVersion.V3
    manager.common_http_protocol_options.idle_timeout.FromSeconds(300)
    manager.http2_protocol_options.max_concurrent_streams.value = 100
    manager.use_remote_address.value = True
    manager.stream_idle_timeout.FromSeconds(60)
    manager.request_timeout.FromSeconds(30)
    manager.normalize_path.value = True
    manager.merge_slashes = True
    manager.access_log.add(name="envoy.access_loggers.stdout")
    router = manager.http_filters.add(name="envoy.filters.http.router")
    router.typed_config.Pack(Router(suppress_envoy_headers=True))
    chain.filters.add(name="envoy.filters.network.http_connection_manager").typed_config.Pack(
        manager
    )
    tls = DownstreamTlsContext()
    tls.require_client_certificate.value = False
    common = tls.common_tls_context
    cert = common.tls_certificate_sds_secret_configs.add(name=f"cert-{i}")
    cert.sds_config.ads.SetInParent()
    cert.sds_config.resource_api_version = ApiVersion.V3
    common.alpn_protocols.extend(["h2", "http/1.1"])
    common.tls_params.tls_minimum_protocol_version = 3  # TLSv1_2
    chain.transport_socket.name = "envoy.transport_sockets.tls"
    chain.transport_socket.typed_config.Pack(tls)
    return listener


def make_route(i: int, hosts: int = 3, routes: int = 5) -> RouteConfiguration:
    """A RouteConfiguration of about 1,800 bytes: ``hosts`` virtual hosts of ``routes``
    routes each (path or prefix match, a header match, timeout, retry policy, a header
    to add). Every route goes to its own cluster; matches, retry policies and headers
    repeat across routes and configurations, as a control plane's templates make them."""
    from envoy.config.route.v3.route_pb2 import RouteConfiguration

    config = RouteConfiguration(name=f"route-{i:06d}")
    config.validate_clusters.value = False
    for h in range(hosts):
        domains = [f"h{h}.svc-{i}.example.com", f"h{h}.alt-{i}"]
        host = config.virtual_hosts.add(name=f"vh-{i}-{h}", domains=domains)
        for r in range(routes):
            route = host.routes.add(name=f"r{r}")
            if r % 2:
                route.match.prefix = f"/api/v{r}/"
            else:
                route.match.path = f"/exact/{r}"
            route.match.headers.add(name="x-tenant").string_match.exact = f"tenant-{r}"
            route.route.cluster = f"cluster-{i:06d}-{h}-{r}"
            route.route.timeout.FromSeconds(15)
            retry = route.route.retry_policy
            retry.retry_on = "5xx,reset"
            retry.num_retries.value = 2
            retry.per_try_timeout.FromMilliseconds(500)
            added = route.request_headers_to_add.add()
            added.header.key = "x-route"
            added.header.value = f"r{r}"
        host.retry_policy.num_retries.value = 1
    return config


def make_cla(i: int, localities: int = 2, endpoints: int = 4) -> ClusterLoadAssignment:
    """A ClusterLoadAssignment of about 360 bytes: ``localities`` localities of
    ``endpoints`` endpoints each (addresses unique up to ``i`` of 62,500), weights, a
    drop policy."""
    from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment

    assignment = ClusterLoadAssignment(cluster_name=f"cluster-{i:06d}")
    for z in range(localities):
        group = assignment.endpoints.add(priority=z // 2)
        group.locality.region = "us-east1"
        group.locality.zone = f"us-east1-{'abc'[z % 3]}"
        group.load_balancing_weight.value = 10
        for e in range(endpoints):
            endpoint = group.lb_endpoints.add(health_status=1)  # HEALTHY
            address = endpoint.endpoint.address.socket_address
            address.address = f"10.{i // 250 % 250}.{i % 250}.{z * 16 + e + 1}"
            address.port_value = 8080
            endpoint.load_balancing_weight.value = 1
            endpoint.endpoint.health_check_config.port_value = 8081
    assignment.policy.overprovisioning_factor.value = 140
    assignment.policy.drop_overloads.add(category="throttle").drop_percentage.numerator = 1
    return assignment


def _response_bytes(count: int) -> bytes:
    from envoy.service.discovery.v3.discovery_pb2 import DiscoveryResponse

    response = DiscoveryResponse(type_url=CDS, version_info="1", nonce="n1")
    for i in range(count):
        response.resources.add().Pack(make_cluster(i))
    data: bytes = response.SerializeToString()
    return data


def _push_once(data: bytes, *, rules: bool, repush: bool) -> float:
    from envoy.config.core.v3.base_pb2 import Node

    from xds_client.protocol import ProtocolConfig, SotwProtocol
    from xds_client.protocol._raw import RawDiscoveryResponse, raw_response_class

    raw_class = raw_response_class()

    def parse(data: bytes) -> RawDiscoveryResponse:
        return cast("RawDiscoveryResponse", raw_class.FromString(data))

    config = ProtocolConfig(
        node=Node(id=NODE_ID), does_not_exist_timeout=None, validate_rules=rules
    )
    core = SotwProtocol(config)
    core.subscribe(CDS, None)
    core.connected(0.0)
    for request in core.requests_to_send():
        core.request_sent(request, 0.0)
    if repush:
        core.receive(parse(data), 0.0)
        for request in core.requests_to_send():
            core.request_sent(request, 0.0)
    response = parse(data)
    _forget_verdicts()  # each push is a first one: no verdict memoised by an earlier rep
    start = time.process_time()
    core.receive(response, 0.0)
    return time.process_time() - start


def _forget_verdicts() -> None:
    from xds_client.protocol import _rules

    _rules.forget_verdicts()


_KINDS: list[tuple[str, Callable[[int], Message]]] = [
    ("Clusters (the bench Cluster: TLS in an Any)", make_cluster),
    ("Listeners (HttpConnectionManager and TLS in Any payloads)", make_listener),
    ("RouteConfigurations (3 virtual hosts x 5 routes)", make_route),
    ("ClusterLoadAssignments (2 localities x 4 endpoints)", make_cla),
]


def _check_once(data: list[bytes], cls: type[Message]) -> tuple[float, float]:
    """(CPU seconds to check, to decode) ``data`` as fresh ``cls`` messages."""
    from xds_client.protocol._rules import check_rules

    start = time.process_time()
    fresh = [cls.FromString(item) for item in data]
    decoded = time.process_time() - start
    _forget_verdicts()
    start = time.process_time()
    for message in fresh:
        check_rules(message)
    return time.process_time() - start, decoded


def _verdict_once(data: list[bytes], cls: type[Message]) -> float:
    """CPU seconds of the verdicts of ``data`` as fresh ``cls`` messages, given their
    bytes (shapes learnt from the first ones prove the rest)."""
    from xds_client.protocol._rules import rules_verdict

    fresh = [cls.FromString(item) for item in data]
    _forget_verdicts()
    start = time.process_time()
    for message, item in zip(fresh, data, strict=True):
        rules_verdict(message, None, item)
    return time.process_time() - start


def _per_type_rows(cfg: Config) -> list[Row]:
    """What checking costs per resource of each kind, beside decoding the same bytes."""
    from xds_client.protocol._rules import check_rules

    count = max(cfg.sotw_clusters // 5, 20)
    rows: list[Row] = []
    for label, make in _KINDS:
        resources = [make(i) for i in range(count)]
        check_rules(resources[0])  # compiled before the clock runs
        data = [r.SerializeToString() for r in resources]
        cls = type(resources[0])
        checks: list[float] = []
        shaped: list[float] = []
        decodes: list[float] = []
        for _ in range(cfg.reps):
            checked, decoded = _check_once(data, cls)
            checks.append(checked * 1e6 / count)
            decodes.append(decoded * 1e6 / count)
            shaped.append(_verdict_once(data, cls) * 1e6 / count)
        note = "raw = decoding the same bytes (FromString); CPU time, one thread"
        for how, samples in (("full check", checks), ("verdict with the bytes", shaped)):
            rows.append(
                Row(
                    scenario=f"(validate.rules) of {count:,} new {label}",
                    metric=f"{how} per resource",
                    unit="µs",
                    sdk=median(samples),
                    raw=median(decodes),
                    note=note,
                    samples_sdk=samples,
                    samples_raw=decodes,
                )
            )
    return rows


def run(server: object, cfg: Config) -> list[Row]:
    """Rows for ``python -m bench`` (``server`` is unused: this runs in-process)."""
    count = cfg.sotw_clusters
    data = _response_bytes(count)
    rows: list[Row] = []
    for repush, label in ((False, "push"), (True, "re-push (same bytes)")):
        on: list[float] = []
        off: list[float] = []
        for _ in range(cfg.reps):
            off.append(_push_once(data, rules=False, repush=repush))
            on.append(_push_once(data, rules=True, repush=repush))
        rows.append(
            Row(
                scenario=f"SotW {label} of {count:,} new clusters, (validate.rules) on vs off",
                metric="core receive",
                unit="s",
                sdk=median(on),
                raw=median(off),
                # #25's target: validation on at most 1.5x off on a push of new
                # resources (a re-push stays free).
                target="<= 1.5x off",
                check=ratio_at_most(1.5),
                note="raw = validate_rules=False; the core only, no I/O",
                samples_sdk=on,
                samples_raw=off,
            )
        )
    return rows + _per_type_rows(cfg)


def main() -> int:
    cfg = Config.smoke_config() if "--smoke" in sys.argv else Config()
    for row in run(None, cfg):
        ratio = f"{row.ratio:.2f}x" if row.ratio is not None else "-"
        print(
            f"{row.scenario}, {row.metric}: {row.sdk:.3g} vs {row.raw:.3g} {row.unit}, "
            f"{ratio} ({row.target})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
