"""The ControlPlane's LRS side on a raw gRPC stream: the plan answers the node, a new plan
reaches the open stream, every request is kept, and the waits fail with a reason."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import Node
from envoy.config.endpoint.v3.load_report_pb2 import ClusterStats
from envoy.service.load_stats.v3.lrs_pb2 import LoadStatsRequest, LoadStatsResponse

from xds_client.errors import UsageError, WaitTimeoutError
from xds_client.testing import ControlPlane

METHOD = "/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats"


def test_the_plan_answers_the_node_and_a_new_plan_reaches_the_stream() -> None:
    with ControlPlane(heartbeat_interval=None, rest_port=None) as cp:
        cp.set_load_reporting(["a", "b"], interval=2.5)
        requests: queue.SimpleQueue[LoadStatsRequest | None] = queue.SimpleQueue()

        def send() -> Iterator[LoadStatsRequest]:
            while (request := requests.get()) is not None:
                yield request

        with grpc.insecure_channel(cp.address) as channel:
            call = channel.stream_stream(
                METHOD,
                request_serializer=LoadStatsRequest.SerializeToString,
                response_deserializer=LoadStatsResponse.FromString,
            )(send())
            requests.put(LoadStatsRequest(node=Node(id="raw")))
            first = next(call)
            assert list(first.clusters) == ["a", "b"]
            assert not first.send_all_clusters
            assert first.load_reporting_interval.ToMilliseconds() == 2500
            cp.set_load_reporting(interval=1.0)
            assert next(call).send_all_clusters
            requests.put(LoadStatsRequest(cluster_stats=[ClusterStats(cluster_name="a")]))
            report = cp.wait_for_load_report("a")
            assert report.node_id == "raw"  # from the stream's first request
            assert report.cluster("b") is None
            requests.put(None)
            call.cancel()
        assert [r.stream for r in cp.load_reports()] == [report.stream] * 2
        assert cp.load_reports("a") == [report]


def test_waits_and_plans_fail_with_a_reason() -> None:
    with ControlPlane(heartbeat_interval=None, rest_port=None) as cp:
        with pytest.raises(WaitTimeoutError, match="no load report of cluster 'a'"):
            cp.wait_for_load_report("a", timeout=0.05)
        with pytest.raises(UsageError, match="positive"):
            cp.set_load_reporting(interval=0)
