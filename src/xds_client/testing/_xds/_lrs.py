"""The ControlPlane's LRS side: it answers each stream's node with the current plan,
pushes a new plan to every open stream, and records every request it receives."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from queue import SimpleQueue

import grpc
from envoy.config.endpoint.v3.load_report_pb2 import ClusterStats
from envoy.service.load_stats.v3.lrs_pb2 import LoadStatsRequest, LoadStatsResponse

from xds_client.errors import UsageError, WaitTimeoutError

__all__ = ["LoadReportService", "RecordedLoadReport"]

SERVICE = "envoy.service.load_stats.v3.LoadReportingService"


@dataclass(frozen=True)
class RecordedLoadReport:
    """One ``LoadStatsRequest`` the control plane received."""

    stream: int
    """Sequence number of the LRS stream, from 1."""
    node_id: str
    """``node.id`` of the stream's first request."""
    request: LoadStatsRequest
    """The request as received (the first of a stream carries the node)."""
    received_at: float
    """``time.monotonic()`` when it arrived."""

    def cluster(self, name: str) -> ClusterStats | None:
        """The stats of cluster ``name`` in this report, or None."""
        for stats in self.request.cluster_stats:
            if stats.cluster_name == name:
                return stats
        return None


class LoadReportService:
    """Serves ``StreamLoadStats`` and keeps what it received."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reports: list[RecordedLoadReport] = []
        self._ids = itertools.count(1)
        self._plan = _plan(None, 1.0)
        self._streams: dict[int, SimpleQueue[LoadStatsResponse | None]] = {}
        self._readers: list[threading.Thread] = []

    def set_plan(self, clusters: Sequence[str] | None, interval: float) -> None:
        """Ask for ``clusters`` (None: all) every ``interval`` seconds, on every stream."""
        if interval <= 0:
            raise UsageError("the load reporting interval must be positive")
        plan = _plan(clusters, interval)
        with self._cond:
            self._plan = plan
            for queue in self._streams.values():
                queue.put(plan)

    def reports(self, cluster: str | None = None) -> list[RecordedLoadReport]:
        """Every request received so far, in order (with ``cluster``: the ones that
        report it)."""
        with self._cond:
            reports = list(self._reports)
        return [r for r in reports if cluster is None or r.cluster(cluster) is not None]

    def wait_for(
        self, fits: Callable[[RecordedLoadReport], bool], what: str, timeout: float
    ) -> RecordedLoadReport:
        """The first report received that ``fits`` (waiting up to ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for report in self._reports:
                    if fits(report):
                        return report
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeoutError(
                        f"no load report {what} within {timeout} s "
                        f"({len(self._reports)} requests received)"
                    )
                self._cond.wait(remaining)

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "StreamLoadStats": grpc.stream_stream_rpc_method_handler(
                    self._serve,
                    request_deserializer=LoadStatsRequest.FromString,
                    response_serializer=LoadStatsResponse.SerializeToString,
                )
            },
        )

    def join_readers(self, timeout: float) -> None:
        """Join the request readers (call after the server stopped)."""
        with self._cond:
            readers, self._readers = self._readers, []
        for reader in readers:
            reader.join(timeout)

    def _serve(
        self, requests: Iterator[LoadStatsRequest], context: grpc.ServicerContext
    ) -> Iterator[LoadStatsResponse]:
        stream = next(self._ids)
        queue: SimpleQueue[LoadStatsResponse | None] = SimpleQueue()
        context.add_callback(lambda: queue.put(None))
        reader = threading.Thread(
            target=self._read, args=(stream, requests, queue), name=f"xds-cp-lrs-{stream}"
        )
        with self._cond:
            self._readers.append(reader)
        reader.start()
        try:
            while (response := queue.get()) is not None:
                yield response
        finally:
            with self._cond:
                self._streams.pop(stream, None)

    def _read(
        self,
        stream: int,
        requests: Iterator[LoadStatsRequest],
        queue: SimpleQueue[LoadStatsResponse | None],
    ) -> None:
        node_id = ""
        try:
            for request in requests:
                with self._cond:
                    if stream not in self._streams:  # the first request: answer its node
                        node_id = request.node.id
                        self._streams[stream] = queue
                        queue.put(self._plan)
                    self._reports.append(
                        RecordedLoadReport(stream, node_id, request, time.monotonic())
                    )
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # the stream was cancelled
        except Exception:  # a test double must not crash on odd input
            pass
        queue.put(None)


def _plan(clusters: Sequence[str] | None, interval: float) -> LoadStatsResponse:
    response = LoadStatsResponse(send_all_clusters=clusters is None, clusters=clusters or ())
    seconds, nanos = divmod(round(interval * 1e9), 10**9)
    response.load_reporting_interval.seconds = seconds
    response.load_reporting_interval.nanos = nanos
    return response
