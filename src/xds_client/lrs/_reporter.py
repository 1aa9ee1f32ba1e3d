"""The LRS stream's decisions, sans I/O: ``now`` and the server's responses in, the
requests to send out.

A stream opens with the node (:meth:`LoadReporter.stream_started`). The server answers
with the clusters it wants (or ``send_all_clusters``) and a ``load_reporting_interval``;
from then on a report is due every interval. Each cluster's ``load_report_interval`` is
the time since that cluster was last reported (since the reporter was made, for its
first report), so counts recorded while the stream was down are reported with the
interval they cover. A new response with the same interval keeps the schedule; another
interval restarts it from that response.
"""

from __future__ import annotations

from dataclasses import dataclass

from envoy.config.core.v3.base_pb2 import Node as NodeProto
from envoy.config.endpoint.v3.load_report_pb2 import (
    ClusterStats,
    EndpointLoadMetricStats,
    UpstreamLocalityStats,
)
from envoy.service.load_stats.v3.lrs_pb2 import LoadStatsRequest, LoadStatsResponse

from xds_client.errors import ServerProtocolError

from ._load import ClusterCounts, LoadStore

__all__ = ["SEND_ALL_CLUSTERS", "LoadReporter", "ReportPlan"]

SEND_ALL_CLUSTERS = "envoy.lrs.supports_send_all_clusters"
"""The client feature that lets the server answer with ``send_all_clusters``."""


@dataclass(frozen=True)
class ReportPlan:
    """What the server last asked for."""

    clusters: frozenset[str]
    """The clusters to report (ignored when :attr:`all_clusters`)."""
    all_clusters: bool
    """Report every cluster the application records."""
    interval: float
    """Seconds between two reports."""


class LoadReporter:
    """Decides what an LRS stream sends, and when; the driver supplies ``now``."""

    def __init__(self, store: LoadStore, node: NodeProto, now: float) -> None:
        self.store = store
        self.node = NodeProto()
        self.node.CopyFrom(node)
        if SEND_ALL_CLUSTERS not in self.node.client_features:
            self.node.client_features.append(SEND_ALL_CLUSTERS)
        self.plan: ReportPlan | None = None
        """None until the current stream's server answered."""
        self.next_report_at: float | None = None
        """When the next report is due; None while there is no plan."""
        self._created = now
        self._last_report: dict[tuple[str, str], float] = {}

    def stream_started(self) -> LoadStatsRequest:
        """A new stream: its first request, with the node. Nothing is reported on it
        until its server answers."""
        self.plan = None
        self.next_report_at = None
        return LoadStatsRequest(node=self.node)

    def receive(self, response: LoadStatsResponse, now: float) -> None:
        """The server's (new) plan. Raises :class:`ServerProtocolError` for an interval
        that is not positive: the stream is then closed and opened again."""
        duration = response.load_reporting_interval
        interval = duration.seconds + duration.nanos / 1e9
        if interval <= 0:
            raise ServerProtocolError(
                f"LoadStatsResponse.load_reporting_interval must be positive, got {interval}s"
            )
        previous = self.plan
        self.plan = ReportPlan(frozenset(response.clusters), response.send_all_clusters, interval)
        if previous is None or previous.interval != interval or self.next_report_at is None:
            self.next_report_at = now + interval

    def report(self, now: float) -> LoadStatsRequest | None:
        """The report due at ``now``, or None when none is due yet."""
        plan, due = self.plan, self.next_report_at
        if plan is None or due is None or now < due:
            return None
        taken = self.store.take(None if plan.all_clusters else plan.clusters)
        stats = []
        for counts in taken:
            key = (counts.cluster, counts.service_name)
            since = self._last_report.get(key, self._created)
            self._last_report[key] = now
            if not counts.empty:
                stats.append(cluster_stats(counts, now - since))
        self.next_report_at = now + plan.interval
        return LoadStatsRequest(cluster_stats=stats)


def cluster_stats(counts: ClusterCounts, interval: float) -> ClusterStats:
    """The ``ClusterStats`` message of one cluster's counts over ``interval`` seconds."""
    stats = ClusterStats(
        cluster_name=counts.cluster,
        cluster_service_name=counts.service_name,
        total_dropped_requests=counts.total_dropped,
    )
    seconds, nanos = divmod(max(0, round(interval * 1e9)), 10**9)
    stats.load_report_interval.seconds = seconds
    stats.load_report_interval.nanos = nanos
    for category, dropped in sorted(counts.dropped.items()):
        if category:
            stats.dropped_requests.add(category=category, dropped_count=dropped)
    for one in counts.localities:
        locality = UpstreamLocalityStats(
            total_successful_requests=one.succeeded,
            total_requests_in_progress=one.in_progress,
            total_error_requests=one.errored,
            total_issued_requests=one.issued,
            load_metric_stats=[
                EndpointLoadMetricStats(
                    metric_name=name, num_requests_finished_with_metric=n, total_metric_value=total
                )
                for name, (n, total) in sorted(one.loads.items())
            ],
        )
        locality.locality.region = one.locality.region
        locality.locality.zone = one.locality.zone
        locality.locality.sub_zone = one.locality.sub_zone
        stats.upstream_locality_stats.append(locality)
    return stats
