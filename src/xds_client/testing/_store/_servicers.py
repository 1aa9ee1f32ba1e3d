"""The gRPC servicers of the test ResourceStore (ResourceStore, BulkStore, Diagnostics),
each a thin translation of calls to a :class:`~._engine.StoreEngine`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc

from xds_client.errors import UsageError
from xds_client.store import _bulk, _dialect
from xds_client.store._dialect import Dialect
from xds_client.store._keys import ResourceKey
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._proto import resource_pb2_grpc as pb_grpc
from xds_client.store._selector import Requirement, matches

from . import _quota
from ._engine import (
    StoreEngine,
    _labels,
    _now_ms,
    _Prefix,
    _Watcher,
)
from ._faults import _Failure

__all__ = ["BulkServicer", "DiagnosticsServicer", "StoreServicer"]


class StoreServicer(pb_grpc.ResourceStoreServicer):
    def __init__(self, store: StoreEngine) -> None:
        self.s = store

    def _unary(self, context: grpc.ServicerContext, method: str, fn: Any, resp_cls: Any) -> Any:
        s = self.s
        try:
            failure = s._fault_failure(context, method)
            if failure is not None:
                raise failure
            with s._cond:
                return fn()
        except _Failure as failure:
            # The seed's ListResponse has no error field: its list errors are status details.
            seed_list = resp_cls is pb.ListResponse and s.dialect is Dialect.SEED
            if s.errors_as_details or seed_list:
                s._deliver(context, failure)
            return resp_cls(error=failure.result)

    def Read(  # noqa: N802 - gRPC method name
        self, request: pb.ReadRequest, context: grpc.ServicerContext
    ) -> pb.ReadResponse:
        def run() -> pb.ReadResponse:
            at = _dialect.requested_read_version(request, self.s.dialect)
            rv, value = self.s._read(request.key, at)
            return pb.ReadResponse(resource_version=rv, value=value)

        result: pb.ReadResponse = self._unary(context, "Read", run, pb.ReadResponse)
        return result

    def Create(  # noqa: N802 - gRPC method name
        self, request: pb.CreateRequest, context: grpc.ServicerContext
    ) -> pb.CreateResponse:
        def run() -> pb.CreateResponse:
            self._check_quota(request.key)
            rv = self.s._write_create(request.key, request.value)
            return pb.CreateResponse(resource_version=rv, value=self.s._read(request.key, 0)[1])

        result: pb.CreateResponse = self._unary(context, "Create", run, pb.CreateResponse)
        return result

    def _check_quota(self, key: pb.ResourceKey) -> None:
        # As Grafana: only a create is checked, before anything else.
        limit = _quota.quota_limit(self.s.quotas, key.namespace)
        if limit is not None:
            used = self.s._count(ResourceKey.from_proto(key).prefix())
            if used >= limit:
                message = _quota.quota_refusal(key.resource, key.namespace, used, limit)
                raise _Failure(403, "", message)

    def ListStoredResources(  # noqa: N802 - gRPC method name
        self, request: pb.ListStoredResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListStoredResourcesResponse:
        s = self.s
        if s.dialect is Dialect.SEED:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "method ListStoredResources not implemented"
            )
        try:
            failure = s._fault_failure(context, "ListStoredResources")
            if failure is not None:
                raise failure
            with s._cond:
                return _quota.stored_resources(s, request)
        except _Failure as failure:
            s._deliver(context, failure)  # the response has no error field
            raise

    def Update(  # noqa: N802 - gRPC method name
        self, request: pb.UpdateRequest, context: grpc.ServicerContext
    ) -> pb.UpdateResponse:
        def run() -> pb.UpdateResponse:
            rv = self.s._write_update(request.key, request.value, request.resource_version)
            return pb.UpdateResponse(resource_version=rv, value=self.s._read(request.key, 0)[1])

        result: pb.UpdateResponse = self._unary(context, "Update", run, pb.UpdateResponse)
        return result

    def Delete(  # noqa: N802 - gRPC method name
        self, request: pb.DeleteRequest, context: grpc.ServicerContext
    ) -> pb.DeleteResponse:
        def run() -> pb.DeleteResponse:
            rv = self.s._write_delete(request.key, request.resource_version, request.uid)
            return pb.DeleteResponse(resource_version=rv)

        result: pb.DeleteResponse = self._unary(context, "Delete", run, pb.DeleteResponse)
        return result

    def List(  # noqa: N802 - gRPC method name
        self, request: pb.ListRequest, context: grpc.ServicerContext
    ) -> pb.ListResponse:
        result: pb.ListResponse = self._unary(
            context, "List", lambda: self.s._list_page(request), pb.ListResponse
        )
        return result

    def Watch(  # noqa: N802 - gRPC method name
        self, request: pb.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.WatchEvent]:
        s = self.s
        try:
            failure = s._fault_failure(context, "Watch")
            if failure is not None:
                raise failure
            yield from self._watch(request, context)
        except _Failure as failure:
            if s.errors_as_details:
                s._deliver(context, failure)
            status = {
                "kind": "Status",
                "status": "Failure",
                "code": failure.result.code,
                "reason": failure.result.reason,
                "message": failure.result.message,
                "details": {
                    "causes": [
                        {"reason": c.reason, "message": c.message, "field": c.field}
                        for c in failure.result.details.causes
                    ]
                },
            }
            yield pb.WatchEvent(
                timestamp=_now_ms(),
                type=pb.WatchEvent.ERROR,
                resource=pb.WatchEvent.Resource(value=json.dumps(status).encode()),
            )

    def _watch(
        self, request: pb.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.WatchEvent]:
        s = self.s
        opts = request.options
        prefix = _Prefix(opts.key.group, opts.key.resource, opts.key.namespace)
        reqs = tuple(Requirement.from_proto(r) for r in opts.labels)
        watcher = _Watcher()

        def cancelled() -> None:
            with s._cond:
                watcher.cancelled = True
                s._cond.notify_all()

        context.add_callback(cancelled)

        def wanted(value: bytes | None, prev: bytes | None) -> bool:
            if not reqs or not s.filter_labels:
                return True
            # An object that leaves the selection still reaches the client,
            # which turns it into a deletion.
            return matches(reqs, _labels(value)) or (
                prev is not None and matches(reqs, _labels(prev))
            )

        with s._cond:
            if request.send_initial_events:
                initial = s._snapshot(prefix)
                last = s._rv
            else:
                initial = []
                last = request.since or s._rv
                if request.since > s._rv:
                    # As the Kubernetes watch cache: the client is ahead of us.
                    raise _Failure(
                        504,
                        "Timeout",
                        f"Too large resource version: {request.since}, current: {s._rv}",
                        causes=[
                            pb.ErrorCause(
                                reason="ResourceVersionTooLarge",
                                message="Too large resource version",
                            )
                        ],
                    )
                if request.since and request.since < s._compacted_rv:
                    raise _Failure(
                        410,
                        "Expired",
                        f"too old resource version: {request.since} ({s._compacted_rv})",
                    )
            s._watchers.append(watcher)
            s._cond.notify_all()
        try:
            for rv, value in initial:
                if s.initial_event_delay:
                    time.sleep(s.initial_event_delay)
                if watcher.flag == "drop":
                    context.abort(grpc.StatusCode.UNAVAILABLE, "injected: watch dropped")
                if watcher.flag == "end":
                    return
                if wanted(value, None):
                    yield pb.WatchEvent(
                        timestamp=_now_ms(),
                        type=pb.WatchEvent.ADDED,
                        resource=pb.WatchEvent.Resource(version=rv, value=value),
                    )
            if request.send_initial_events:
                yield pb.WatchEvent(
                    timestamp=_now_ms(),
                    type=pb.WatchEvent.BOOKMARK,
                    resource=pb.WatchEvent.Resource(version=last),
                )
            while True:
                with s._cond:
                    while not (
                        s._rv > last
                        or watcher.flag
                        or watcher.bookmark
                        or watcher.cancelled
                        or s._closed
                    ):
                        s._cond.wait(0.5)
                    if watcher.cancelled or s._closed:
                        return
                    if watcher.flag == "end":
                        return
                    if watcher.flag == "drop":
                        context.abort(grpc.StatusCode.UNAVAILABLE, "injected: watch dropped")
                    if last < s._compacted_rv:
                        raise _Failure(410, "Expired", f"too old resource version: {last}")
                    rows, reached = s._events_after(prefix, last)
                    bookmark = watcher.bookmark
                    watcher.bookmark = False
                for rv, etype, value, prev_rv, prev_value in rows:
                    if watcher.flag == "drop":
                        # Lose what is in flight, as a broken connection would.
                        context.abort(grpc.StatusCode.UNAVAILABLE, "injected: watch dropped")
                    if watcher.flag == "end":
                        return
                    last = rv
                    if not wanted(value, prev_value):
                        continue
                    event = pb.WatchEvent(
                        timestamp=_now_ms(),
                        type=etype,
                        resource=pb.WatchEvent.Resource(version=rv, value=value),
                    )
                    if prev_rv:
                        event.previous.version = prev_rv
                        event.previous.value = prev_value or b""
                    yield event
                last = max(last, reached)
                if bookmark and request.allow_watch_bookmarks:
                    yield pb.WatchEvent(
                        timestamp=_now_ms(),
                        type=pb.WatchEvent.BOOKMARK,
                        resource=pb.WatchEvent.Resource(version=last),
                    )
        finally:
            with s._cond:
                if watcher in s._watchers:
                    s._watchers.remove(watcher)
                s._cond.notify_all()


class BulkServicer(pb_grpc.BulkStoreServicer):
    """Grafana's BulkProcess: a rebuild of whole collections, all or nothing."""

    def __init__(self, store: StoreEngine) -> None:
        self.s = store

    def BulkProcess(  # noqa: N802 - gRPC method name
        self, request_iterator: Iterator[pb.BulkRequest], context: grpc.ServicerContext
    ) -> pb.BulkResponse:
        s = self.s
        md = context.invocation_metadata() or ()
        names = [str(v) for k, v in md if k == _bulk.COLLECTION_KEY]
        rebuild = any(k == _bulk.REBUILD_KEY and v == "true" for k, v in md)
        if not names:
            return _bulk_error(400, "Missing target collection(s) in request header")
        if not rebuild:
            return _bulk_error(400, "Bulk currently only supports RebuildCollection")
        try:
            targets = [_bulk.parse_collection_id(n) for n in names]
        except UsageError as exc:
            return _bulk_error(412, "error reading settings", reason=str(exc))
        # As Grafana: nothing is written (and no event sent) before the stream completes.
        items = list(request_iterator)
        resp = pb.BulkResponse()
        try:
            with s._cond, s._transaction():
                summary = self._rebuild(targets, items, resp)
                if not context.is_active():
                    # A cancelled stream (the client's items raised) ends like a
                    # complete one in Python's gRPC: roll back what is known to be
                    # cancelled by now. Grafana (Go) tells the two apart; this server
                    # only narrows the race.
                    raise _Failure(499, "Cancelled", "the bulk stream was cancelled")
        except _Failure as failure:
            resp.ClearField("summary")
            resp.error.CopyFrom(failure.result)
            return resp
        resp.processed = len(items)
        resp.summary.extend(summary)
        return resp

    def _rebuild(
        self,
        targets: list[ResourceKey],
        items: list[pb.BulkRequest],
        resp: pb.BulkResponse,
    ) -> list[pb.BulkResponse.Summary]:
        s = self.s
        wanted = {t.prefix() for t in targets}
        previous = {t: s._count(t) for t in targets}
        sent: set[tuple[str, str, str, str]] = set()
        for req in items:
            key = req.key
            if ResourceKey.from_proto(key).prefix() not in wanted:
                message = f"{key.resource} {key.name!r} is outside the bulk's collections"
                resp.rejected.add(key=key, action=req.action, error=message)
                raise _Failure(400, "BadRequest", message, key=key)
            if req.action not in (pb.BulkRequest.ADDED, pb.BulkRequest.MODIFIED):
                continue  # DELETED: a rebuilt collection simply does not have it
            sent.add((key.group, key.resource, key.namespace, key.name))
            try:
                row = s._get(key)
                if row is None:
                    s._write_create(key, req.value, checked=True)
                else:
                    s._write_update(key, req.value, 0, row=row)
            except _Failure as failure:
                resp.rejected.add(key=key, action=req.action, error=failure.result.message)
                raise
        out = []
        for target in targets:
            for grp, res, ns, name in s._names(target):
                if (grp, res, ns, name) not in sent:
                    gone = pb.ResourceKey(group=grp, resource=res, namespace=ns, name=name)
                    s._write_delete(gone, 0, "")
            out.append(
                pb.BulkResponse.Summary(
                    namespace=target.namespace,
                    group=target.group,
                    resource=target.resource,
                    count=s._count(target),
                    previous_count=previous[target],
                    resource_version=s._rv,
                )
            )
        return out


def _bulk_error(code: int, message: str, *, reason: str = "") -> pb.BulkResponse:
    return pb.BulkResponse(error=pb.ErrorResult(code=code, message=message, reason=reason))


class DiagnosticsServicer(pb_grpc.DiagnosticsServicer):
    def __init__(self, store: StoreEngine) -> None:
        self.s = store

    def IsHealthy(  # noqa: N802 - gRPC method name
        self, request: pb.HealthCheckRequest, context: grpc.ServicerContext
    ) -> pb.HealthCheckResponse:
        failure = self.s._fault_failure(context, "IsHealthy")
        status = pb.HealthCheckResponse.NOT_SERVING if failure else pb.HealthCheckResponse.SERVING
        return pb.HealthCheckResponse(status=status)
