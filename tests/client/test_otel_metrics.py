"""gRFC A78's instruments through OpenTelemetry (the ``otel`` extra), read back with the
SDK's InMemoryMetricReader: a real client against the in-process ControlPlane, and the
optional hooks found through their protocols."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from tests._waiting import wait_until
from xds_client import Backoff, CountingMetrics, Node, XdsClient
from xds_client.client._metrics import metrics_hooks
from xds_client.otel import OpenTelemetryMetrics
from xds_client.testing import ControlPlane

CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
FAST = Backoff(initial=0.05, maximum=0.2)

Labels = tuple[tuple[str, str], ...]


@dataclass
class Meter:
    reader: InMemoryMetricReader
    provider: MeterProvider

    def points(self, name: str) -> dict[Labels, float]:
        """The data points of instrument ``name``: sorted labels -> value."""
        out: dict[Labels, float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            assert isinstance(point, NumberDataPoint)
                            attributes = {k: str(v) for k, v in (point.attributes or {}).items()}
                            out[tuple(sorted(attributes.items()))] = point.value
        return out

    def units(self) -> dict[str, str | None]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {
            m.name: m.unit
            for r in data.resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
        }  # fmt: skip


@pytest.fixture
def meter() -> Iterator[Meter]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield Meter(reader, provider)
    provider.shutdown()


def key(**labels: str) -> Labels:
    return tuple(sorted(labels.items()))


def test_a_real_client_reports_a78_instruments(meter: Meter) -> None:
    with ControlPlane(heartbeat_interval=None) as cp:
        cp.set_resources("cds", [Cluster(name="a"), Cluster(name="b")])
        metrics = OpenTelemetryMetrics(meter.provider, target="my-app")
        server = key(**{"grpc.target": "my-app", "grpc.xds.server": cp.address})
        with (
            XdsClient(cp.address, node=Node(id="n"), metrics=metrics, backoff=FAST) as client,
            client.watch(Cluster, ["a", "b", "missing"]),
        ):
            client.wait_for(Cluster, "a")
            client.wait_for(Cluster, "b")
            wait_until(lambda: meter.points("grpc.xds_client.connected") == {server: 1})

            def resources() -> Mapping[Labels, float]:
                return meter.points("grpc.xds_client.resources")

            def row(state: str) -> Labels:
                return key(**{
                    "grpc.target": "my-app",
                    "grpc.xds.authority": "#old",
                    "grpc.xds.cache_state": state,
                    "grpc.xds.resource_type": "envoy.config.cluster.v3.Cluster",
                })  # fmt: skip

            expected = {row("acked"): 2, row("requested"): 1}
            wait_until(lambda: resources() == expected, what=f"resources {expected}")
            assert meter.points("grpc.xds_client.server_failure") == {}

            # A stream that ends after a response is no failure (A57): the client opens
            # a new one at once, which is answered; nothing counts, connected stays 1.
            mark = cp.mark()
            assert len(cp.drop_streams()) == 1
            cp.wait_for_ack("cds", since=mark, timeout=10)
            assert meter.points("grpc.xds_client.server_failure") == {}
            assert meter.points("grpc.xds_client.connected") == {server: 1}

            # The server goes: that stream ended after a response, but the next one cannot
            # reach the server and ends without a response: one failure, connected 0.
            cp.stop_serving()
            wait_until(
                lambda: meter.points("grpc.xds_client.server_failure") == {server: 1},
                what="one server failure",
            )
            assert meter.points("grpc.xds_client.connected") == {server: 0}
            cp.resume_serving()
            wait_until(lambda: meter.points("grpc.xds_client.connected") == {server: 1})
            # Failing again and again while down counted once: healthy -> unhealthy.
            assert meter.points("grpc.xds_client.server_failure") == {server: 1}
        assert meter.units() == {
            "grpc.xds_client.connected": "{bool}",
            "grpc.xds_client.server_failure": "{failure}",
            "grpc.xds_client.resource_updates_valid": "{resource}",
            "grpc.xds_client.resources": "{resource}",
        }


def _refuse_bad(cluster: Cluster) -> None:
    if cluster.alt_stat_name == "bad":
        raise ValueError("alt_stat_name 'bad' is refused")


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_a_real_client_counts_valid_and_invalid_resources(
    meter: Meter, protocol: Literal["sotw", "delta"]
) -> None:
    metrics = OpenTelemetryMetrics(meter.provider, target="my-app")
    with ControlPlane(heartbeat_interval=None) as cp:
        labels = key(**{
            "grpc.target": "my-app",
            "grpc.xds.server": cp.address,
            "grpc.xds.resource_type": "envoy.config.cluster.v3.Cluster",
        })  # fmt: skip
        cp.set_resources("cds", [Cluster(name="a"), Cluster(name="b"), Cluster(name="x")])
        with (
            XdsClient(
                cp.address, node=Node(id="n"), metrics=metrics, backoff=FAST, protocol=protocol,
                validators={Cluster: _refuse_bad},
            ) as client,
            client.watch(Cluster, ["a", "b"]),
        ):  # fmt: skip
            mark = cp.mark()
            client.wait_for(Cluster, "b")
            cp.wait_for_ack("cds", since=mark)
            # Counted per resource: a and b (x was not asked for).
            wait_until(
                lambda: meter.points("grpc.xds_client.resource_updates_valid") == {labels: 2},
                what="2 valid resources",
            )
            assert meter.points("grpc.xds_client.resource_updates_invalid") == {}
            mark = cp.mark()
            cp.set_resources("cds", [Cluster(name="a"), Cluster(name="b", alt_stat_name="bad")])
            cp.wait_for_nack("cds", since=mark)
            # SotW sends a again, unchanged, and it counts (A78); delta sends only b.
            valid = 3 if protocol == "sotw" else 2
            wait_until(
                lambda: meter.points("grpc.xds_client.resource_updates_invalid") == {labels: 1},
                what="1 invalid resource",
            )
            assert meter.points("grpc.xds_client.resource_updates_valid") == {labels: valid}


def test_resource_updates_count_resources_per_server_and_type(meter: Meter) -> None:
    metrics = OpenTelemetryMetrics(meter.provider, target="t")
    hooks = metrics_hooks(metrics)
    assert hooks.resource_updates is not None
    hooks.resource_updates(CLUSTER, "cp:1", 3, 0)
    hooks.resource_updates(CLUSTER, "cp:1", 1, 2)
    labels = key(**{
        "grpc.target": "t",
        "grpc.xds.server": "cp:1",
        "grpc.xds.resource_type": "envoy.config.cluster.v3.Cluster",
    })  # fmt: skip
    assert meter.points("grpc.xds_client.resource_updates_valid") == {labels: 4}
    assert meter.points("grpc.xds_client.resource_updates_invalid") == {labels: 2}
    assert meter.units()["grpc.xds_client.resource_updates_valid"] == "{resource}"
    assert meter.units()["grpc.xds_client.resource_updates_invalid"] == "{resource}"


def test_connected_is_1_from_the_first_stream_and_after_a_failure_from_a_response(
    meter: Meter,
) -> None:
    metrics = OpenTelemetryMetrics(meter.provider, target="t")
    server = key(**{"grpc.target": "t", "grpc.xds.server": "cp:1"})
    assert meter.points("grpc.xds_client.connected") == {}
    metrics.stream_opened("cp:1")  # gRFC A78: 1 when the stream is created
    assert meter.points("grpc.xds_client.connected") == {server: 1}
    metrics.reconnect("cp:1")  # it ended before any response: a failure (A57)
    assert meter.points("grpc.xds_client.connected") == {server: 0}
    metrics.stream_opened("cp:1")  # a new stream is not yet a working one
    assert meter.points("grpc.xds_client.connected") == {server: 0}
    metrics.nack(CLUSTER, "cp:1")  # its first response, even one rejected
    assert meter.points("grpc.xds_client.connected") == {server: 1}
    assert meter.points("grpc.xds_client.server_failure") == {server: 1}


def test_resources_gauge_maps_csds_statuses_and_drops_gone_authorities(meter: Meter) -> None:
    metrics = OpenTelemetryMetrics(meter.provider, target="t")
    metrics.resources(CLUSTER, {"NACKED": 1, "TIMEOUT": 1})
    metrics.authority_resources(CLUSTER, "#old", {"NACKED": 1})
    metrics.authority_resources(CLUSTER, "a.example", {"TIMEOUT": 1, "ACKED": 0})
    states = {dict(k)["grpc.xds.cache_state"]: v
              for k, v in meter.points("grpc.xds_client.resources").items()}  # fmt: skip
    assert states == {"nacked": 1, "timeout": 1}
    metrics.resources(CLUSTER, {"DOES_NOT_EXIST": 1})
    metrics.authority_resources(CLUSTER, "#old", {"DOES_NOT_EXIST": 1})
    rows = meter.points("grpc.xds_client.resources")
    assert [(dict(k)["grpc.xds.authority"], dict(k)["grpc.xds.cache_state"]) for k in rows] == [
        ("#old", "does_not_exist")
    ]


class _FourHooks:
    """A user's metrics object with only the required hooks."""

    def ack(self, type_url: str, server: str) -> None: ...
    def nack(self, type_url: str, server: str) -> None: ...
    def reconnect(self, server: str) -> None: ...
    def resources(self, type_url: str, counts: Mapping[str, int]) -> None: ...


class _PlusSwitches(_FourHooks):
    def server_switch(self, previous: str, current: str, reason: str) -> None: ...


def test_optional_hooks_are_found_through_their_protocols() -> None:
    plain = metrics_hooks(_FourHooks())
    assert (plain.authority_resources, plain.response, plain.server_switch) == (None, None, None)
    assert (plain.resource_updates, plain.stream_opened) == (None, None)
    switches = metrics_hooks(_PlusSwitches())
    assert switches.server_switch is not None
    assert switches.response is None
    counting = metrics_hooks(CountingMetrics())
    assert None not in (
        counting.authority_resources,
        counting.response,
        counting.server_switch,
        counting.resource_updates,
        counting.stream_opened,
    )


def test_the_base_package_imports_without_opentelemetry() -> None:
    # A meta-path finder refusing opentelemetry stands for an install without the extra.
    script = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import xds_client, xds_client.client, xds_client.testing\n"
        "from xds_client import XdsClient, CountingMetrics, Node\n"
        "XdsClient('127.0.0.1:1', node=Node(id='n'), metrics=CountingMetrics()).close()\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "try:\n"
        "    import xds_client.otel\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'xds-client[otel]'" in done.stdout
