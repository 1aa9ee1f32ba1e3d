"""XdsClient and AsyncXdsClient against the in-process ControlPlane.

Every test runs for both clients (the ``mode`` fixture); the protocol matrix
(SotW / delta, ADS / per-type, v3 / v2) is covered where it changes the wire.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from envoy.admin.v3.config_dump_shared_pb2 import ClientResourceStatus
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.extensions.transport_sockets.tls.v3.secret_pb2 import Secret
from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse

from xds_client import (
    ConnectivityChanged,
    CountingMetrics,
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)
from xds_client.errors import ResourceValidationError, WaitTimeoutError
from xds_client.resources import CLUSTER, V2_CLUSTER
from xds_client.testing import ControlPlane

from .conftest import ClientProxy, Mode

pytestmark = pytest.mark.timeout(60)

MakeClient = Callable[..., ClientProxy]


def cluster(name: str, seconds: int = 1) -> Cluster:
    c = Cluster(name=name)
    c.connect_timeout.seconds = seconds
    return c


def v2_cluster(name: str, seconds: int = 1) -> Any:
    from envoy.api.v2.cluster_pb2 import Cluster as V2Cluster

    c = V2Cluster(name=name)
    c.connect_timeout.seconds = seconds
    return c


def endpoints(name: str, overprovisioning: int = 0) -> ClusterLoadAssignment:
    cla = ClusterLoadAssignment(cluster_name=name)
    if overprovisioning:
        cla.policy.overprovisioning_factor.value = overprovisioning
    return cla


# ---------------------------------------------------------------------------- matrix


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
@pytest.mark.parametrize("ads", [True, False], ids=["ads", "per-type"])
@pytest.mark.parametrize("api_version", ["v3", "v2"])
def test_watch_and_update(
    cp: ControlPlane, make_client: MakeClient, protocol: str, ads: bool, api_version: str
) -> None:
    v2 = api_version == "v2"
    make = v2_cluster if v2 else cluster
    rtype: Any = "cds" if v2 else Cluster
    cp.set_resources(V2_CLUSTER if v2 else CLUSTER, {"a": make("a", 1)}, version="1")
    client = make_client(cp.address, protocol=protocol, ads=ads, api_version=api_version)
    with client.watch(rtype, ["a", "b"]) as watch:
        first = watch.next(ResourceUpdated)
        assert first.name == "a"
        assert first.resource.connect_timeout.seconds == 1
        assert first.type_url == (V2_CLUSTER if v2 else CLUSTER)
        cp.update(V2_CLUSTER if v2 else CLUSTER, {"a": make("a", 2)}, version="2")
        second = watch.next(ResourceUpdated)
        assert second.resource.connect_timeout.seconds == 2
        if protocol == "sotw":
            assert second.version == "2"
    stream = cp.streams()[0]
    assert stream.kind == protocol
    service = "AggregatedDiscoveryService" if ads else "ClusterDiscoveryService"
    assert service in stream.method
    assert (".v2." in stream.method) == v2
    cp.wait_for_ack(V2_CLUSTER if v2 else CLUSTER, version="2" if protocol == "sotw" else None)


def test_typed_watch_and_cache(cp: ControlPlane, make_client: MakeClient) -> None:
    cp.set_resources(Cluster, {"a": cluster("a", 7)}, version="1")
    client = make_client(cp.address)
    with client.watch(Cluster, "a"):
        got = client.wait_for(Cluster, "a", version="1", timeout=5)
        assert isinstance(got, Cluster)
        assert got.connect_timeout.seconds == 7
        cached = client.resources(Cluster)["a"]
        assert cached.version == "1"
        assert cached.resource == got
        with pytest.raises(WaitTimeoutError, match="version '9'"):
            client.wait_for(Cluster, "a", version="9", timeout=0.3)
        assert client.wait_for(Cluster, "a", predicate=lambda c: c.connect_timeout.seconds == 7)
    # wait_for subscribes only while it waits; with no watcher left the cache is dropped.
    assert client.resources(Cluster) == {}


# ---------------------------------------------------------------------------- subscriptions


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_wildcard(cp: ControlPlane, make_client: MakeClient, protocol: str) -> None:
    cp.set_resources(Cluster, {"a": cluster("a"), "b": cluster("b")}, version="1")
    client = make_client(cp.address, protocol=protocol)
    with client.watch(Cluster, None) as watch:
        names = {watch.next(ResourceUpdated).name, watch.next(ResourceUpdated).name}
        assert names == {"a", "b"}
        cp.update(Cluster, {"c": cluster("c")}, version="2")
        assert watch.next(ResourceUpdated).name == "c"
        cp.remove(Cluster, ["a"], version="3")
        removed = watch.next(ResourceRemoved)
        assert (removed.name, removed.reason) == ("a", "deleted")
        assert set(client.resources(Cluster)) == {"b", "c"}


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_shared_subscription_and_unsubscribe(
    cp: ControlPlane, make_client: MakeClient, protocol: str
) -> None:
    cp.set_resources(ClusterLoadAssignment, [endpoints("e1"), endpoints("e2")])
    client = make_client(cp.address, protocol=protocol)
    one = client.watch(ClusterLoadAssignment, "e1")
    assert one.next(ResourceUpdated).name == "e1"
    # A second watcher of the same name shares the subscription and gets the cache at once.
    mark = cp.mark()
    two = client.watch("eds", ["e1", "e2"])
    cached = two.next(ResourceUpdated, timeout=1)
    assert cached.name == "e1"
    assert two.next(ResourceUpdated).name == "e2"
    one.close()
    two_mark = cp.mark()
    # e1 is still watched by `two`: closing `one` must not unsubscribe it.
    cp.update(ClusterLoadAssignment, [endpoints("e1", overprovisioning=5)])
    assert two.next(ResourceUpdated).name == "e1"
    two.close()

    def unsubscribed(r: Any) -> bool:
        if protocol == "sotw":
            return "e1" not in r.resource_names and "e2" not in r.resource_names
        return {"e1", "e2"} <= set(r.message.resource_names_unsubscribe)

    cp.wait_for_request(ClusterLoadAssignment, unsubscribed, since=two_mark, timeout=5)
    subscribed = cp.requests(ClusterLoadAssignment)[mark:]
    assert subscribed, "the second watch must have sent a request for e2"


# ---------------------------------------------------------------------------- NACK


@pytest.mark.parametrize(
    ("protocol", "ads", "api_version"),
    [("sotw", True, "v3"), ("delta", True, "v3"), ("sotw", False, "v2"), ("delta", False, "v2")],
)
def test_nack_by_validator(
    cp: ControlPlane, make_client: MakeClient, protocol: str, ads: bool, api_version: str
) -> None:
    def no_long_timeouts(c: Any) -> None:
        if c.connect_timeout.seconds > 10:
            raise ResourceValidationError(f"connect_timeout {c.connect_timeout.seconds}s too long")

    v2 = api_version == "v2"
    make, type_url = (v2_cluster, V2_CLUSTER) if v2 else (cluster, CLUSTER)
    metrics = CountingMetrics()
    cp.set_resources(type_url, {"a": make("a", 1)}, version="1")
    client = make_client(
        cp.address, protocol=protocol, ads=ads, api_version=api_version,
        validators={"cds": no_long_timeouts}, metrics=metrics,
    )  # fmt: skip
    with client.watch("cds", "a") as watch:
        watch.next(ResourceUpdated)
        cp.update(type_url, {"a": make("a", 60)}, version="2")
        rejected = watch.next(ResponseRejected)
        assert "too long" in rejected.errors["a"]
        nack = cp.wait_for_nack(type_url, version="2")
        assert nack.error_detail is not None
        assert "connect_timeout 60s too long" in nack.error_detail.message
        if protocol == "sotw":
            assert nack.version_info == "1"  # the last good version stays
        # The cached value is the last good one; CSDS shows the NACK.
        assert client.resources("cds")["a"].resource.connect_timeout.seconds == 1
        dump = client.config_dump()
        (entry,) = [g for g in dump.generic_xds_configs if g.name == "a"]
        assert entry.type_url == type_url
        assert entry.client_status == ClientResourceStatus.NACKED
        assert "too long" in entry.error_state.details
        if protocol == "sotw":
            assert entry.error_state.version_info == "2"
        assert metrics.nacks[type_url] >= 1
        assert metrics.acks[type_url] >= 1
        assert metrics.resource_counts[type_url] == {"NACKED": 1}
        # A new watcher learns of the cached value and the cached error at once.
        with client.watch("cds", "a") as late:
            assert late.next(ResourceUpdated, timeout=1).resource.connect_timeout.seconds == 1
            assert "a" in late.next(ResponseRejected, timeout=1).errors


def test_ignore_resource_deletion(cp: ControlPlane, make_client: MakeClient) -> None:
    cp.set_resources(Cluster, {"a": cluster("a"), "b": cluster("b")}, version="1")
    client = make_client(cp.address, server_features=["ignore_resource_deletion"])
    with client.watch(Cluster, ["a", "b"]) as watch:
        watch.next(ResourceUpdated)
        watch.next(ResourceUpdated)
        cp.remove(Cluster, ["a"], version="2")
        assert watch.next(ResourceDeletionIgnored).name == "a"
        assert set(client.resources(Cluster)) == {"a", "b"}


# ---------------------------------------------------------------------------- timers


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_does_not_exist(cp: ControlPlane, make_client: MakeClient, protocol: str) -> None:
    cp.set_resources(ClusterLoadAssignment, {"e1": ClusterLoadAssignment(cluster_name="e1")})
    client = make_client(cp.address, protocol=protocol, does_not_exist_timeout=0.3)
    with client.watch(ClusterLoadAssignment, ["e1", "missing"]) as watch:
        start = time.monotonic()
        missing = watch.next(ResourceDoesNotExist, timeout=5)
        assert missing.name == "missing"
        if protocol == "sotw":
            assert time.monotonic() - start >= 0.25  # the timer ran out
        # delta: the server listed it in removed_resources, which says so at once
    # A late watcher gets the cached absence at once; it arrives if created later.
    with client.watch(ClusterLoadAssignment, "missing") as late:
        assert late.next(ResourceDoesNotExist, timeout=1).name == "missing"
        cp.update(ClusterLoadAssignment, {"missing": ClusterLoadAssignment(cluster_name="missing")})
        assert late.next(ResourceUpdated).name == "missing"


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_ttl_expiry_and_heartbeats(
    cp: ControlPlane, make_client: MakeClient, protocol: str
) -> None:
    cp.set_resources(Cluster, {"t": cluster("t")}, ttl=0.6, version="1")
    cp.start_heartbeats(0.15)
    client = make_client(cp.address, protocol=protocol)
    with client.watch(Cluster, "t") as watch:
        watch.next(ResourceUpdated)
        # Heartbeats keep it alive well past its TTL ...
        with pytest.raises(AssertionError, match="no ResourceRemoved"):
            watch.next(ResourceRemoved, timeout=1.5)
        assert "t" in client.resources(Cluster)
        # ... and without them it expires.
        cp.stop_heartbeats()
        removed = watch.next(ResourceRemoved, timeout=3)
        assert removed.reason == "ttl_expired"
    assert "t" not in client.resources(Cluster)


# ---------------------------------------------------------------------------- reconnects


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
@pytest.mark.parametrize("ads", [True, False], ids=["ads", "per-type"])
def test_server_restart_resumes_with_versions(
    cp: ControlPlane, make_client: MakeClient, protocol: str, ads: bool
) -> None:
    cp.set_resources(Cluster, {"a": cluster("a")}, version="1")
    metrics = CountingMetrics()
    client = make_client(cp.address, protocol=protocol, ads=ads, metrics=metrics)
    with client.watch(Cluster, "a") as watch:
        updated = watch.next(ResourceUpdated)
        cp.wait_for_ack(Cluster)
        mark = cp.mark()
        cp.stop_serving()
        down = watch.next(ConnectivityChanged, where=lambda e: not e.connected)
        assert down.server == cp.address
        # While down, the cache stays and nothing is reported deleted.
        assert "a" in client.resources(Cluster)
        cp.resume_serving()
        first = cp.wait_for_request(Cluster, since=mark, timeout=5)
        message = first.message
        if isinstance(message, DiscoveryRequest):
            # The last accepted version goes out again, with an empty nonce.
            assert protocol == "sotw"
            assert message.version_info == "1"
            assert message.response_nonce == ""
        else:
            assert dict(message.initial_resource_versions) == {"a": updated.version}
        assert first.message.node.id == "test-node"
        assert first.resource_names == ["a"]
        # Reported up again even when the server has nothing new to send (delta).
        watch.next(ConnectivityChanged, where=lambda e: e.connected)
        cp.update(Cluster, {"a": cluster("a", 5)}, version="2")
        assert watch.next(ResourceUpdated).resource.connect_timeout.seconds == 5
    assert metrics.reconnects[cp.address] >= 1


def test_reconnect_backoff_grows_and_resets(cp: ControlPlane, make_client: MakeClient) -> None:
    from xds_client import Backoff

    cp.set_resources(Cluster, {"a": cluster("a")}, version="1")
    cp.fail_streams(count=3)
    client = make_client(cp.address, backoff=Backoff(initial=0.1, multiplier=2, jitter=0))
    start = time.monotonic()
    held = client.watch(Cluster, "a")
    assert client.wait_for(Cluster, "a", timeout=5)
    # Three refused streams: waits of 0.1 + 0.2 + 0.4 s before the fourth.
    assert time.monotonic() - start >= 0.65
    assert len(cp.streams()) == 4
    # A stream that delivered a response restarts at once (gRFC A57).
    start = time.monotonic()
    mark = cp.mark()
    cp.stop_serving()
    cp.resume_serving()
    cp.wait_for_request(Cluster, since=mark, timeout=5)
    assert time.monotonic() - start < 1.0
    held.close()


def test_fallback_and_return_to_primary(make_client: MakeClient) -> None:
    with (
        ControlPlane(rest_port=None, heartbeat_interval=None) as primary,
        ControlPlane(rest_port=None, heartbeat_interval=None) as secondary,
    ):
        primary.set_resources(Cluster, {"a": cluster("a", 1)}, version="p1")
        secondary.set_resources(Cluster, {"a": cluster("a", 2)}, version="s1")
        primary.stop_serving()
        client = make_client([primary.address, secondary.address], fallback_probe_interval=0.2)
        with client.watch(Cluster, "a") as watch:
            got = watch.next(ResourceUpdated)
            assert (got.version, got.resource.connect_timeout.seconds) == ("s1", 2)
            assert client.current_server() == secondary.address
            primary.resume_serving()
            back = watch.next(ResourceUpdated, where=lambda e: e.version == "p1", timeout=10)
            assert back.resource.connect_timeout.seconds == 1
            assert client.current_server() == primary.address
            # The secondary stream is closed once the primary serves again.
            secondary.wait_for_streams_closed(timeout=5)


# ---------------------------------------------------------------------------- sizes and speed


@pytest.mark.slow
def test_20_mb_response(cp: ControlPlane, make_client: MakeClient) -> None:
    # ~20 MB of clusters in one SotW response: far above gRPC's 4 MB default.
    filler = "x" * 2000
    clusters = {}
    for i in range(10_000):
        c = Cluster(name=f"c{i:05d}")
        c.alt_stat_name = filler
        clusters[c.name] = c
    cp.set_resources(Cluster, clusters, version="big")
    client = make_client(cp.address)
    with client.watch(Cluster, None) as watch:
        got = watch.next(ResourceUpdated, timeout=30)
        assert got.version == "big"
        # One response carries them all, so the cache is complete with the first event.
        assert len(client.resources(Cluster)) == 10_000
    response = cp.responses(Cluster)[0].message
    assert isinstance(response, DiscoveryResponse)
    assert response.ByteSize() > 20_000_000


def test_slow_consumer_coalesces(cp: ControlPlane, make_client: MakeClient) -> None:
    names = [f"c{i}" for i in range(5)]
    cp.set_resources(Cluster, {n: cluster(n, 100) for n in names}, version="0")
    client = make_client(cp.address, queue_size=8)
    watch = client.watch(Cluster, names)
    seen = {watch.next(ResourceUpdated).name for _ in names}
    assert seen == set(names)
    for v in range(1, 41):
        cp.update(Cluster, {n: cluster(n, v) for n in names}, version=str(v))
    cp.wait_for_ack(Cluster, version="40", timeout=10)
    # Memory stays bounded: at most queue_size + one event per resource name.
    assert watch.pending <= 8 + len(names) + 1
    latest: dict[str, int] = {}
    while watch.pending:
        event = watch.get(1)
        if isinstance(event, ResourceUpdated):
            latest[event.name] = event.resource.connect_timeout.seconds
    # ... and the latest state of every resource is there.
    assert latest == dict.fromkeys(names, 40)
    watch.close()


def test_raising_callback_is_isolated(
    cp: ControlPlane, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    cp.set_resources(Cluster, {"a": cluster("a", 1)}, version="1")
    client = make_client(cp.address)
    seen: list[int] = []
    done = threading.Event()

    def callback(event: Any) -> None:
        if isinstance(event, ResourceUpdated):
            seen.append(event.resource.connect_timeout.seconds)
            if event.resource.connect_timeout.seconds == 1:
                raise RuntimeError("boom from a callback")
            done.set()

    with caplog.at_level(logging.ERROR, logger="xds_client"):
        client.watch(Cluster, "a", on_event=callback)
        other = client.watch(Cluster, "a")
        other.next(ResourceUpdated)
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        cp.update(Cluster, {"a": cluster("a", 2)}, version="2")
        assert done.wait(5), "the callback must keep receiving events after raising"
        assert other.next(ResourceUpdated).resource.connect_timeout.seconds == 2
    assert seen == [1, 2]
    assert any("callback raised" in r.getMessage() for r in caplog.records)
    assert any("boom from a callback" in (r.exc_text or "") for r in caplog.records)


# ---------------------------------------------------------------------------- secrets


def test_secrets_redacted_in_dump_and_logs(
    cp: ControlPlane, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    secret = Secret(name="s")
    secret.tls_certificate.private_key.inline_string = "PRIVATE-KEY-MATERIAL"
    secret.tls_certificate.certificate_chain.inline_string = "CERT"
    token = Secret(name="t")
    token.generic_secret.secret.inline_bytes = b"TOKEN-MATERIAL"
    cp.set_resources(Secret, {"s": secret, "t": token}, version="1")
    with caplog.at_level(logging.DEBUG, logger="xds_client"):
        client = make_client(cp.address, bearer_token="BEARER-MATERIAL")
        held = client.watch(Secret, ["s", "t"])
        got = client.wait_for(Secret, "s", timeout=5)
        assert got.tls_certificate.private_key.inline_string == "PRIVATE-KEY-MATERIAL"
        client.wait_for(Secret, "t", timeout=5)
        dump = client.config_dump()
    text = str(dump) + repr(dump.SerializeToString())
    for marker in ("PRIVATE-KEY-MATERIAL", "TOKEN-MATERIAL", "BEARER-MATERIAL"):
        assert marker not in text
        assert all(marker not in r.getMessage() for r in caplog.records)
    unpacked = Secret()
    (entry,) = [g for g in dump.generic_xds_configs if g.name == "s"]
    entry.xds_config.Unpack(unpacked)
    assert unpacked.tls_certificate.private_key.inline_string == "[redacted]"
    assert unpacked.tls_certificate.certificate_chain.inline_string == "CERT"
    held.close()
    # The token reached the server as call metadata.
    assert cp.streams()[0].method.endswith("StreamAggregatedResources")


# ---------------------------------------------------------------------------- lifecycle


def test_close_leaves_nothing_running(cp: ControlPlane, mode: Mode) -> None:
    from .conftest import FAST_BACKOFF, ClientProxy, LoopThread

    loop = LoopThread() if mode == "async" else None
    try:
        baseline = {t.ident for t in threading.enumerate()}
        cp.set_resources(Cluster, {"a": cluster("a")}, version="1")
        client = ClientProxy(mode, loop, [cp.address], backoff=FAST_BACKOFF, ads=False)
        client.watch(Cluster, "a").next(ResourceUpdated)
        client.watch("eds", "e")
        cp.wait_for_streams(2)
        start = time.monotonic()
        client.close()
        assert time.monotonic() - start < 1.0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            extra = [t for t in threading.enumerate() if t.ident not in baseline]
            # grpc.aio keeps one process-wide poller thread once used.
            extra = [
                t
                for t in extra
                if not t.name.startswith("xds-cp") and "_poll_wrapper" not in t.name
            ]
            if not extra:
                break
            time.sleep(0.02)
        assert not extra, extra
        cp.wait_for_streams_closed(timeout=5)
    finally:
        if loop is not None:
            loop.close()
