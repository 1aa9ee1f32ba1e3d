"""A second ResourceStore test server, written from Grafana's server code, not from ours.

It follows ``pkg/storage/unified/resource/server.go`` and the SQL backend as a
client meets them, including their rough edges:

- every failure is an ``ErrorResult`` in the response with an OK status
  (``ListResponse.error`` too; the seed dialect has no such field, so there list
  failures are a gRPC status);
- a stale ``resource_version`` on update or delete is the SQL backend's bare
  ``optimistic locking failed`` with code 500 and no reason;
- create of an existing key is 409 ``AlreadyExists``; a missing key is 404;
- names follow Grafana's ``IsValidGrafanaName`` (and namespace, group, resource
  rules), bad ones are 400;
- list pages stop at ``limit`` or once 2 MiB of values are collected, and carry
  a continue token of the list's version and an offset;
- ``require_token`` answers every call without an ``authorization`` header
  with 401 Unauthorized;
- ``access_secret`` checks Grafana's ``X-Access-Token`` on every call: an HS256
  JWT signed with the secret, not expired, for the ``resourceStore`` audience
  (else gRPC UNAUTHENTICATED, as authlib's interceptor), whose ``namespace`` claim
  is ``*`` or the request's (else a 403 ``ErrorResult``, as the access checker);
  ``id_tokens`` records the ``X-Id-Token`` of each call ('' without one);
- ``quotas`` (namespace -> limit) makes ``Create`` check the collection's count
  first, as ``server.go`` does: at the limit it is 403 with a message about the
  quota and no reason; ``Quotas/GetQuotaUsage`` answers usage and limit (501
  without ``quotas``), ``ListStoredResources`` the collections that hold objects;
- ``deleted_without_previous`` sends DELETED events with neither the object nor
  ``previous`` (seen from some backends);
- a list whose field selector is ``metadata.name=X`` is answered from a read of
  X: its resource version is X's, not the store's (older than any watch since);
- ``compact()`` forgets the events so far: a watch from before is a 410 ERROR
  event; ``drop_watches()`` breaks every open watch stream (UNAVAILABLE);
- ``calls`` counts the calls by method.

The state lives in memory: a dict of objects and a list of events.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._proto import resource_pb2_grpc as pb_grpc

_NAME = re.compile(r"^[a-zA-Z0-9:\-\_\.]*\Z")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_RESOURCE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*\Z")
_MAX_PAGE_BYTES = 2 * 1024 * 1024


def _problems(key: pb.ResourceKey) -> list[str]:
    out = []
    n = len(key.name.encode())
    if n == 0:
        out.append("name may not be empty")
    elif n > 253:
        out.append("name is too long")
    elif not _NAME.match(key.name):
        out.append("name must consist of alphanumeric characters, '-', '_', ':' or '.'")
    ns = len(key.namespace.encode())
    if ns and (ns > 40 or ns < 3 or not _QUALIFIED.match(key.namespace)):
        out.append("namespace is invalid")
    g = len(key.group.encode())
    if g > 60 or g < 3 or not _QUALIFIED.match(key.group):
        out.append("group is invalid")
    r = len(key.resource.encode())
    if r > 40 or r < 3 or not _RESOURCE.match(key.resource):
        out.append("resource is invalid")
    return out


@dataclass
class _Event:
    rv: int
    kind: pb.WatchEvent.Type.ValueType
    key: tuple[str, str, str, str]
    value: bytes
    previous: bytes | None
    previous_rv: int


class GrafanaLikeServer:
    """In memory, on 127.0.0.1 and a free port; ``with GrafanaLikeServer() as srv``."""

    def __init__(
        self,
        *,
        dialect: str = "grafana",
        require_token: bool = False,
        deleted_without_previous: bool = False,
        access_secret: bytes | None = None,
        quotas: dict[str, int] | None = None,
    ) -> None:
        self.dialect = dialect
        self.require_token = require_token
        self.access_secret = access_secret
        self.quotas = quotas
        self.id_tokens: list[str] = []
        self.deleted_without_previous = deleted_without_previous
        # Grafana's resource versions are clock-like: even an empty store lists at one
        # of at least 1, and every write is later than anything listed before it.
        self.rv = 1
        self.objects: dict[tuple[str, str, str, str], tuple[int, bytes]] = {}
        self.events: list[_Event] = []
        self.cond = threading.Condition()
        self.compacted = 0
        """Watches from before this version are 410 (see :meth:`compact`)."""
        self.calls: collections.Counter[str] = collections.Counter()
        self._drops = 0
        self._server: grpc.Server | None = None
        self._port = 0
        self._stopped = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}"

    def __enter__(self) -> GrafanaLikeServer:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pb_grpc.add_ResourceStoreServicer_to_server(_Store(self), server)
        pb_grpc.add_DiagnosticsServicer_to_server(_Diagnostics(), server)
        pb_grpc.add_QuotasServicer_to_server(_Quotas(self), server)
        self._port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        return self

    def __exit__(self, *exc: object) -> None:
        with self.cond:
            self._stopped = True
            self.cond.notify_all()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)

    def compact(self) -> None:
        """Forget the history so far: a watch from an older version is 410 Expired."""
        with self.cond:
            self.compacted = self.rv
            self.cond.notify_all()

    def drop_watches(self) -> None:
        """Break every open watch stream, as a lost connection would."""
        with self.cond:
            self._drops += 1
            self.cond.notify_all()

    # ------------------------------------------------------------ the backend

    def write(
        self, kind: pb.WatchEvent.Type.ValueType, key: pb.ResourceKey, value: bytes, expected: int
    ) -> int:
        k = (key.namespace, key.group, key.resource, key.name)
        with self.cond:
            current = self.objects.get(k)
            if kind == pb.WatchEvent.ADDED and current is not None:
                raise _Error(409, "AlreadyExists", f"{key.name} already exists")
            if kind != pb.WatchEvent.ADDED:
                if current is None:
                    raise _Error(404, "NotFound", f"{key.name} not found")
                if expected and expected != current[0]:
                    raise _Error(500, "", "optimistic locking failed")
            self.rv += 1
            if kind == pb.WatchEvent.DELETED:
                assert current is not None
                del self.objects[k]
                stored = current[1]
            else:
                doc = json.loads(value)
                meta = doc.setdefault("metadata", {})
                meta["resourceVersion"] = str(self.rv)
                stored = json.dumps(doc).encode()
                self.objects[k] = (self.rv, stored)
            self.events.append(
                _Event(
                    self.rv,
                    kind,
                    k,
                    stored,
                    current[1] if current else None,
                    current[0] if current else 0,
                )
            )
            self.cond.notify_all()
            return self.rv

    def at(self, rv: int) -> dict[tuple[str, str, str, str], tuple[int, bytes]]:
        """The objects as they were at ``rv`` (replayed from the event log)."""
        state: dict[tuple[str, str, str, str], tuple[int, bytes]] = {}
        for event in self.events:
            if event.rv > rv:
                break
            if event.kind == pb.WatchEvent.DELETED:
                state.pop(event.key, None)
            else:
                state[event.key] = (event.rv, event.value)
        return state


class _Error(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.result = pb.ErrorResult(code=code, reason=reason, message=message)


def _token_claims(token: str, secret: bytes) -> dict[str, Any] | None:
    """The claims of an HS256 JWT signed with ``secret``, or None."""
    try:
        head, body, sig = token.split(".")
        want = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
        got = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError:
        return None
    ok = hmac.compare_digest(want, got) and isinstance(claims, dict)
    return claims if ok else None


_GRPC = {401: grpc.StatusCode.UNAUTHENTICATED, 400: grpc.StatusCode.INVALID_ARGUMENT}


class _Store(pb_grpc.ResourceStoreServicer):
    def __init__(self, s: GrafanaLikeServer) -> None:
        self.s = s

    def _check(
        self, context: grpc.ServicerContext, key: pb.ResourceKey | None, namespace: str = ""
    ) -> None:
        headers = dict(context.invocation_metadata())
        if self.s.require_token and "authorization" not in headers:
            raise _Error(401, "Unauthorized", "no identity found for request")
        if self.s.access_secret is not None:
            self.s.id_tokens.append(str(headers.get("x-id-token", "")))
            claims = _token_claims(str(headers.get("x-access-token", "")), self.s.access_secret)
            audience = claims.get("aud") if claims else None
            if (
                claims is None
                or not isinstance(claims.get("exp"), int)
                or claims["exp"] < time.time()
                or not isinstance(audience, list)
                or "resourceStore" not in audience
            ):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated: invalid token")
            assert claims is not None
            wanted = key.namespace if key is not None else namespace
            if claims.get("namespace") not in ("*", wanted):
                raise _Error(403, "Forbidden", f"namespace mismatch: {wanted}")
        if key is not None:
            problems = _problems(key)
            if problems:
                raise _Error(400, "BadRequest", "; ".join(problems))

    def Create(self, request: Any, context: Any) -> pb.CreateResponse:  # noqa: N802
        s = self.s
        limit = None if s.quotas is None else s.quotas.get(request.key.namespace)
        if limit is not None:  # as server.go: the quota comes first, a plain 403 message
            with s.cond:
                used = _count(s, request.key.namespace, request.key.group, request.key.resource)
            if used >= limit:
                message = (
                    f"Quota exceeded: {request.key.resource} has {used} of its {limit} objects"
                )
                return pb.CreateResponse(error=pb.ErrorResult(code=403, message=message))
        try:
            self._check(context, request.key)
            rv = self.s.write(pb.WatchEvent.ADDED, request.key, request.value, 0)
        except _Error as e:
            return pb.CreateResponse(error=e.result)
        return pb.CreateResponse(resource_version=rv)

    def Update(self, request: Any, context: Any) -> pb.UpdateResponse:  # noqa: N802
        try:
            self._check(context, request.key)
            rv = self.s.write(
                pb.WatchEvent.MODIFIED, request.key, request.value, request.resource_version
            )
        except _Error as e:
            return pb.UpdateResponse(error=e.result)
        return pb.UpdateResponse(resource_version=rv)

    def Delete(self, request: Any, context: Any) -> pb.DeleteResponse:  # noqa: N802
        try:
            self._check(context, request.key)
            rv = self.s.write(pb.WatchEvent.DELETED, request.key, b"", request.resource_version)
        except _Error as e:
            return pb.DeleteResponse(error=e.result)
        return pb.DeleteResponse(resource_version=rv)

    def Read(self, request: Any, context: Any) -> pb.ReadResponse:  # noqa: N802
        s = self.s
        at = request.seed_resource_version if s.dialect == "seed" else request.resource_version
        k = (request.key.namespace, request.key.group, request.key.resource, request.key.name)
        try:
            self._check(context, request.key)
            with s.cond:
                found = s.at(at).get(k) if at else s.objects.get(k)
            if found is None:
                raise _Error(404, "NotFound", f"{request.key.name} not found")
        except _Error as e:
            return pb.ReadResponse(error=e.result)
        return pb.ReadResponse(resource_version=found[0], value=found[1])

    def List(self, request: Any, context: Any) -> pb.ListResponse:  # noqa: N802
        s = self.s
        s.calls["List"] += 1
        try:
            self._check(context, None, request.options.key.namespace)
            return self._list(request)
        except _Error as e:
            if s.dialect == "seed":  # no ListResponse.error in the first proto
                context.abort(_GRPC.get(e.result.code, grpc.StatusCode.UNKNOWN), str(e))
            return pb.ListResponse(error=e.result)

    def _list(self, request: Any) -> pb.ListResponse:
        s = self.s
        key = request.options.key
        offset = 0
        with s.cond:
            rv = s.rv
            if request.next_page_token:
                token = json.loads(base64.b64decode(request.next_page_token))
                rv, offset = int(token["v"]), int(token["o"])
            elif request.resource_version:
                # Today's Grafana migrates the deprecated field when v2 is unset.
                v2 = request.version_match_v2
                old = request.HasField("version_match") and (
                    request.version_match == pb.DEPRECATED_Exact
                )
                exact = old if s.dialect == "seed" or v2 == pb.UNKNOWN else v2 == pb.Exact
                if exact:
                    rv = request.resource_version
            objects = s.at(rv) if rv != s.rv else dict(s.objects)
            name = _name_selected(request.options.fields)
            if name is not None and not request.next_page_token:
                # Grafana's shortcut: one read, and the list is at that object's version.
                objects = {k: v for k, v in objects.items() if k[3] == name}
                found = [v[0] for k, v in objects.items() if k[1:3] == (key.group, key.resource)]
                rv = found[0] if found else rv
        rows = sorted(
            (k, v)
            for k, v in objects.items()
            if k[1] == key.group
            and k[2] == key.resource
            and (not key.namespace or k[0] == key.namespace)
        )
        limit = request.limit or 500
        resp = pb.ListResponse(resource_version=rv)
        size = 0
        index = offset
        for index in range(offset, len(rows)):
            _k, (obj_rv, value) = rows[index]
            resp.items.add(resource_version=obj_rv, value=value)
            size += len(value)
            if len(resp.items) >= limit or size >= _MAX_PAGE_BYTES:
                break
        following = offset + len(resp.items)
        if following < len(rows):
            token = {"v": rv, "o": following}
            resp.next_page_token = base64.b64encode(json.dumps(token).encode()).decode()
            resp.remaining_item_count = len(rows) - following
        return resp

    def Watch(self, request: Any, context: Any) -> Iterator[pb.WatchEvent]:  # noqa: N802
        s = self.s
        s.calls["Watch"] += 1
        key = request.options.key
        try:
            self._check(context, None, key.namespace)
        except _Error as e:
            status = {"kind": "Status", "code": e.result.code, "message": e.result.message}
            yield pb.WatchEvent(
                type=pb.WatchEvent.ERROR,
                resource=pb.WatchEvent.Resource(value=json.dumps(status).encode()),
            )
            return

        def mine(k: tuple[str, str, str, str]) -> bool:
            return (
                k[1] == key.group
                and k[2] == key.resource
                and (not key.namespace or k[0] == key.namespace)
            )

        with s.cond:
            drops = s._drops
            if request.since and request.since < s.compacted:
                status = {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": f"too old resource version: {request.since}",
                }
                yield pb.WatchEvent(
                    type=pb.WatchEvent.ERROR,
                    resource=pb.WatchEvent.Resource(value=json.dumps(status).encode()),
                )
                return
            since = request.since if request.since else s.rv
            initial = sorted(s.objects.items()) if request.send_initial_events else []
            if request.send_initial_events:
                since = s.rv
        for k, (rv, value) in initial:
            if mine(k):
                yield pb.WatchEvent(
                    timestamp=int(time.time() * 1000),
                    type=pb.WatchEvent.ADDED,
                    resource=pb.WatchEvent.Resource(version=rv, value=value),
                )
        if request.send_initial_events and request.allow_watch_bookmarks:
            yield pb.WatchEvent(
                type=pb.WatchEvent.BOOKMARK, resource=pb.WatchEvent.Resource(version=since)
            )
        sent = since
        while context.is_active():
            with s.cond:
                while s.rv <= sent and not s._stopped and context.is_active() and s._drops == drops:
                    s.cond.wait(0.2)
                if s._stopped:
                    return
                if s._drops != drops:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "watch dropped")
                new = [e for e in s.events if e.rv > sent]
            for event in new:
                sent = event.rv
                if not mine(event.key):
                    continue
                out = pb.WatchEvent(timestamp=int(time.time() * 1000), type=event.kind)
                out.resource.version = event.rv
                if event.kind == pb.WatchEvent.DELETED and s.deleted_without_previous:
                    yield out
                    continue
                out.resource.value = event.value
                if event.previous is not None:
                    out.previous.version = event.previous_rv
                    out.previous.value = event.previous
                yield out

    def ListStoredResources(self, request: Any, context: Any) -> Any:  # noqa: N802
        s = self.s
        if s.dialect == "seed":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method ListStoredResources")
        try:
            self._check(context, None, request.namespace)
        except _Error as e:  # the response has no error field: a status, as Go's
            context.abort(_GRPC.get(e.result.code, grpc.StatusCode.PERMISSION_DENIED), str(e))
        with s.cond:
            found = {
                (ns, grp, res)
                for ns, grp, res, _ in s.objects
                if all(
                    not want or want == got
                    for want, got in (
                        (request.namespace, ns),
                        (request.group, grp),
                        (request.resource, res),
                    )
                )
            }
        resp = pb.ListStoredResourcesResponse()
        for ns, grp, res in sorted(found):
            resp.items.add(namespace=ns, group=grp, resource=res)
        return resp


def _count(s: GrafanaLikeServer, namespace: str, group: str, resource: str) -> int:
    return sum(1 for k in s.objects if k[:3] == (namespace, group, resource))


class _Quotas(pb_grpc.QuotasServicer):
    def __init__(self, s: GrafanaLikeServer) -> None:
        self.s = s

    def GetQuotaUsage(self, request: Any, context: Any) -> pb.QuotaUsageResponse:  # noqa: N802
        s = self.s
        if s.quotas is None:
            return pb.QuotaUsageResponse(
                error=pb.ErrorResult(
                    code=501, message="overrides service not configured on resource server"
                )
            )
        try:
            _Store(s)._check(context, None, request.key.namespace)
        except _Error as e:
            return pb.QuotaUsageResponse(error=e.result)
        key = request.key
        with s.cond:
            used = _count(s, key.namespace, key.group, key.resource)
        return pb.QuotaUsageResponse(usage=used, limit=s.quotas.get(key.namespace, 0))


def _name_selected(fields: Any) -> str | None:
    for f in fields:
        if f.key == "metadata.name" and f.operator in ("=", "==") and len(f.values) == 1:
            return str(f.values[0])
    return None


class _Diagnostics(pb_grpc.DiagnosticsServicer):
    def IsHealthy(self, request: Any, context: Any) -> pb.HealthCheckResponse:  # noqa: N802
        return pb.HealthCheckResponse(status=pb.HealthCheckResponse.SERVING)
