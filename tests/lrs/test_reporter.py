"""The LRS core without I/O: scripted LoadStatsResponses and a fake clock."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from envoy.config.core.v3.base_pb2 import Node as NodeProto
from envoy.service.load_stats.v3.lrs_pb2 import LoadStatsRequest, LoadStatsResponse
from hypothesis import given
from hypothesis import strategies as st

from xds_client.errors import ServerProtocolError, UsageError
from xds_client.lrs import SEND_ALL_CLUSTERS, LoadReporter, LoadStore
from xds_client.node import Locality

EAST = Locality(region="r", zone="east")
WEST = Locality(region="r", zone="west")


def plan(*clusters: str, interval: float = 10.0) -> LoadStatsResponse:
    response = LoadStatsResponse(clusters=clusters, send_all_clusters=not clusters)
    response.load_reporting_interval.FromNanoseconds(int(interval * 1e9))
    return response


def interval_of(request: LoadStatsRequest, cluster: str) -> float:
    (stats,) = [s for s in request.cluster_stats if s.cluster_name == cluster]
    return stats.load_report_interval.ToNanoseconds() / 1e9


def reporter(store: LoadStore, now: float = 100.0) -> LoadReporter:
    return LoadReporter(store, NodeProto(id="n", client_features=["x"]), now)


def test_a_stream_opens_with_the_node_and_reports_only_once_answered() -> None:
    store = LoadStore()
    store.cluster("a").locality().start()
    core = reporter(store)
    first = core.stream_started()
    assert first.node.id == "n"
    assert list(first.node.client_features) == ["x", SEND_ALL_CLUSTERS]
    assert not first.cluster_stats
    assert core.report(1e9) is None  # no plan yet: nothing is due, ever
    core.receive(plan(interval=10), now=101.0)
    assert core.next_report_at == 111.0
    assert core.report(110.9) is None
    report = core.report(111.0)
    assert report is not None
    assert not report.HasField("node")  # the node goes in a stream's first request only
    assert interval_of(report, "a") == 11.0  # since the reporter was made
    assert core.next_report_at == 121.0


def test_counts_per_locality_drops_and_named_metrics_then_start_over() -> None:
    store = LoadStore()
    backend = store.cluster("backend", service_name="eds-backend")
    east, west = backend.locality(EAST), backend.locality(WEST)
    for _ in range(3):
        east.start()
    east.finish()
    east.finish(error=True)
    east.record_load("cpu", 0.5)
    east.record_load("cpu", 0.25)
    west.start()
    west.finish()
    backend.drop("throttle")
    backend.drop("throttle")
    backend.drop()
    core = reporter(store)
    core.stream_started()
    core.receive(plan("backend", interval=5), now=100.0)
    report = core.report(105.0)
    assert report is not None
    (stats,) = report.cluster_stats
    assert (stats.cluster_name, stats.cluster_service_name) == ("backend", "eds-backend")
    assert stats.total_dropped_requests == 3
    assert [(d.category, d.dropped_count) for d in stats.dropped_requests] == [("throttle", 2)]
    by_zone = {s.locality.zone: s for s in stats.upstream_locality_stats}
    e = by_zone["east"]
    assert (e.total_issued_requests, e.total_successful_requests) == (3, 1)
    assert (e.total_error_requests, e.total_requests_in_progress) == (1, 1)
    assert e.locality.region == "r"
    ((name, n, total),) = [
        (m.metric_name, m.num_requests_finished_with_metric, m.total_metric_value)
        for m in e.load_metric_stats
    ]
    assert (name, n, total) == ("cpu", 2, 0.75)
    assert by_zone["west"].total_successful_requests == 1
    # The next interval starts from zero, but the request still in flight stays counted.
    again = core.report(110.0)
    assert again is not None
    (stats,) = again.cluster_stats
    (only,) = stats.upstream_locality_stats
    assert only.locality.zone == "east"
    assert (only.total_issued_requests, only.total_requests_in_progress) == (0, 1)
    assert stats.total_dropped_requests == 0
    assert interval_of(again, "backend") == 5.0


def test_only_the_clusters_asked_for_and_the_others_keep_their_counts() -> None:
    store = LoadStore()
    store.cluster("a").drop()
    store.cluster("b").drop()
    core = reporter(store)
    core.stream_started()
    core.receive(plan("a", interval=1), now=100.0)
    report = core.report(101.0)
    assert report is not None
    assert [s.cluster_name for s in report.cluster_stats] == ["a"]
    # The server now wants every cluster: b's drop, kept meanwhile, is reported with
    # the whole time since the reporter was made; a had nothing new and is left out.
    core.receive(plan(interval=2), now=101.5)
    report = core.report(103.5)
    assert report is not None
    assert [s.cluster_name for s in report.cluster_stats] == ["b"]
    assert interval_of(report, "b") == 3.5


def test_a_new_stream_reports_what_was_recorded_while_down_with_the_interval_it_covers() -> None:
    store = LoadStore()
    recorder = store.cluster("a").locality()
    core = reporter(store, now=0.0)
    core.stream_started()
    core.receive(plan(interval=10), now=0.0)
    recorder.start()
    assert core.report(10.0) is not None
    recorder.finish()  # the stream is down now
    core.stream_started()
    assert core.next_report_at is None
    core.receive(plan(interval=10), now=25.0)
    report = core.report(35.0)
    assert report is not None
    assert interval_of(report, "a") == 25.0
    (stats,) = report.cluster_stats
    assert stats.upstream_locality_stats[0].total_successful_requests == 1


def test_the_same_interval_keeps_the_schedule_and_another_restarts_it() -> None:
    core = reporter(LoadStore())
    core.stream_started()
    core.receive(plan(interval=10), now=0.0)
    core.receive(plan("a", interval=10), now=4.0)
    assert core.next_report_at == 10.0
    core.receive(plan("a", interval=3), now=5.0)
    assert core.next_report_at == 8.0
    assert core.plan is not None
    assert core.plan.clusters == frozenset({"a"})
    assert not core.plan.all_clusters


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_an_interval_that_is_not_positive_is_the_servers_error(seconds: float) -> None:
    core = reporter(LoadStore())
    core.stream_started()
    with pytest.raises(ServerProtocolError, match="load_reporting_interval"):
        core.receive(plan(interval=seconds), now=0.0)
    assert core.plan is None


def test_an_empty_report_still_goes_out_every_interval() -> None:
    core = reporter(LoadStore())
    core.stream_started()
    core.receive(plan(interval=1), now=0.0)
    report = core.report(1.0)
    assert report is not None
    assert not report.cluster_stats


def test_bad_names_are_usage_errors() -> None:
    store = LoadStore()
    with pytest.raises(UsageError):
        store.cluster("")
    with pytest.raises(UsageError):
        store.cluster("a").locality().record_load("", 1.0)


def test_recording_from_many_threads_loses_nothing() -> None:
    store = LoadStore()
    recorder = store.cluster("a").locality(EAST)

    def work() -> None:
        for _ in range(1000):
            recorder.start()
            recorder.finish()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ((counts),) = store.take()
    (one,) = counts.localities
    assert (one.issued, one.succeeded, one.in_progress) == (4000, 4000, 0)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("record"), st.sampled_from(["a", "b"]), st.booleans()),
            st.tuples(st.just("plan"), st.sampled_from([(), ("a",), ("b",)]), st.integers(1, 3)),
            st.tuples(st.just("restart"), st.none(), st.none()),
            st.tuples(st.just("tick"), st.none(), st.floats(0.1, 5.0)),
        ),
        max_size=40,
    )
)
def test_every_count_is_reported_once_and_intervals_never_overlap(
    steps: list[tuple[str, Any, Any]],
) -> None:
    store = LoadStore()
    core = reporter(store, now=0.0)
    core.stream_started()
    now = 0.0
    recorded: Counter[str] = Counter()
    reported: Counter[str] = Counter()
    last: dict[str, float] = {}

    def collect(request: LoadStatsRequest | None) -> None:
        for stats in request.cluster_stats if request is not None else ():
            name = stats.cluster_name
            reported[name] += sum(s.total_successful_requests + s.total_error_requests
                                  for s in stats.upstream_locality_stats)  # fmt: skip
            start = now - stats.load_report_interval.ToNanoseconds() / 1e9
            # Each report covers the time since the cluster's previous one, no overlap.
            assert start >= last.get(name, 0.0) - 1e-6
            last[name] = now

    for kind, arg, more in steps:
        if kind == "record":
            recorder = store.cluster(arg).locality()
            recorder.start()
            recorder.finish(error=more)
            recorded[arg] += 1
        elif kind == "plan":
            core.receive(plan(*arg, interval=more), now)
        elif kind == "restart":
            core.stream_started()
        else:
            now += more
            collect(core.report(now))
    # Finally the server asks for everything: nothing recorded is lost or counted twice.
    core.stream_started()
    core.receive(plan(interval=1), now)
    now += 1
    collect(core.report(now))
    assert reported == recorded
