"""An in-process xDS management server for tests and demos.

``ControlPlane`` serves ADS (SotW and delta), every per-type discovery
service, the unary ``Fetch*`` calls and REST-JSON, for API v3 and v2, from
snapshots you set, and load reporting (LRS). It records every stream and request so
tests can wait for ACKs, NACKs and load reports, and it can misbehave on purpose (drop
streams, refuse connections, delay, send raw responses, fail streams with a status).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import DecodeError
from typing_extensions import Self

from xds_client.errors import TransportError, UnknownResourceTypeError, UsageError
from xds_client.protocol import validate
from xds_client.resources import TYPE_URL_PREFIX, resource_type, resource_types

from ._resource_file import load_resources
from ._xds._log import RecordedRequest, RecordedResponse, RequestLog, StreamInfo, Subscription
from ._xds._lrs import LoadReportService, RecordedLoadReport
from ._xds._rest import RestServer
from ._xds._store import Entry, ResourcesInput, SnapshotInput, Store, TypeSpec, entries_from
from ._xds._streams import Engine, _Abort, _Heartbeat

__all__ = ["ControlPlane"]

_ADS_SERVICES = (
    "envoy.service.discovery.v3.AggregatedDiscoveryService",
    "envoy.service.discovery.v2.AggregatedDiscoveryService",
)
_DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


def _type_url(spec: TypeSpec) -> str:
    try:
        return resource_type(spec).type_url
    except UnknownResourceTypeError:
        # Unregistered type URLs are served as opaque bytes.
        if isinstance(spec, str) and spec.startswith(TYPE_URL_PREFIX):
            return spec
        raise


def _serialize(message: Any) -> bytes:
    # Raw bytes pass through so tests can send responses that do not parse.
    if isinstance(message, bytes):
        return message
    data: bytes = message.SerializeToString()
    return data


S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


def _off_loop(wait: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Awaitable[R]]:
    """The asyncio twin of a blocking ``wait_for_*`` method: the same call in a worker thread."""

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(wait, self, *args, **kwargs)

    functools.update_wrapper(twin, wait)  # the signature shown is the blocking one
    twin.__name__ = twin.__qualname__ = f"{wait.__name__}_async"
    twin.__doc__ = f":meth:`{wait.__name__}` without blocking the event loop."
    return twin


def _awaited(kind: str, type: TypeSpec, version: str | None) -> str:
    """``an ACK of version '42' of type.googleapis.com/...Cluster``: what a wait waited for."""
    at = f" of version {version!r}" if version is not None else ""
    return f"an {kind}{at} of {_type_url(type)}"


class ControlPlane:
    """An xDS control plane on 127.0.0.1, for tests.

    Use it as a context manager (``with`` or ``async with``)::

        with ControlPlane() as cp:
            cp.set_resources("cds", [cluster])
            ...  # point a client at cp.address
            cp.wait_for_ack("cds", version="1")

    Args:
        host: address to bind; keep the default outside special cases.
        port: gRPC port, 0 for a free one.
        rest_port: REST-JSON port, 0 for a free one, None for no REST server.
        heartbeat_interval: seconds between TTL heartbeats, None for none
            (``send_heartbeats()`` still sends one round on demand).
        wrap_sotw_resources: wrap every SotW resource in a ``Resource``
            (otherwise only resources with a TTL are wrapped).
        max_message_bytes: largest message sent or received.
        max_workers: most gRPC worker threads (made on demand); each open
            stream or call holds one, and a call beyond them is refused
            (RESOURCE_EXHAUSTED) rather than left waiting.
        server_credentials: serve TLS with these (``grpc.ssl_server_credentials``);
            None serves plaintext. The attribute of the same name may be changed
            between ``stop_serving()`` and ``resume_serving()`` to rotate certificates.
        interceptors: gRPC server interceptors, e.g. one that checks a token.
        validate_resources: check every message given to ``set_resources``,
            ``set_snapshot`` and ``update`` against its proto's
            ``(validate.rules)``, as Envoy would, and raise
            :class:`~xds_client.errors.RuleViolationError` (nothing is served)
            instead of serving config that clients will NACK.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        rest_port: int | None = 0,
        heartbeat_interval: float | None = 1.0,
        wrap_sotw_resources: bool = False,
        max_message_bytes: int = _DEFAULT_MAX_MESSAGE_BYTES,
        max_workers: int = 100,
        server_credentials: grpc.ServerCredentials | None = None,
        interceptors: Sequence[grpc.ServerInterceptor] = (),
        validate_resources: bool = False,
    ) -> None:
        self.server_credentials = server_credentials
        self._interceptors = tuple(interceptors)
        self._host = host
        self._validate_resources = validate_resources
        self._requested_port = port
        self._requested_rest_port = rest_port
        self._max_message_bytes = max_message_bytes
        self._max_workers = max_workers
        self._store = Store()
        self._log = RequestLog()
        self._engine = Engine(self._store, self._log)
        self._lrs = LoadReportService()
        self._engine.sotw_wrap = wrap_sotw_resources
        self._lock = threading.RLock()
        self._state = "new"  # new -> running -> closed
        self._port = 0
        self._rest_port: int | None = None
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._rest: RestServer | None = None
        self._heartbeat_interval = heartbeat_interval
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._timers: list[threading.Timer] = []

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Self:
        """Bind the ports and start serving; returns ``self``."""
        with self._lock:
            if self._state != "new":
                raise UsageError(f"a ControlPlane can start once; this one is {self._state}")
            self._start_grpc(self._requested_port)
            if self._requested_rest_port is not None:
                try:
                    self._rest = RestServer(self._engine, self._host, self._requested_rest_port)
                except OSError as exc:
                    self._stop_grpc()
                    self._state = "closed"
                    raise TransportError(
                        f"cannot bind the REST port {self._requested_rest_port}: {exc}"
                    ) from exc
                self._rest_port = self._rest.port
            self._state = "running"
            if self._heartbeat_interval is not None:
                self.start_heartbeats(self._heartbeat_interval)
        return self

    def close(self) -> None:
        """Stop serving, end every stream and join every thread. Idempotent."""
        with self._lock:
            if self._state == "closed":
                return
            self._state = "closed"
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
            timer.join(timeout=5.0)
        self.stop_heartbeats()
        self._engine.stopping.set()
        with self._lock:
            self._stop_grpc()
            if self._rest is not None:
                self._rest.close()
                self._rest = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    def _handlers(self) -> list[grpc.GenericRpcHandler]:
        sotw_in = DiscoveryRequest.FromString
        delta_in = DeltaDiscoveryRequest.FromString
        services: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {}
        for service in _ADS_SERVICES:
            services[service] = {
                "StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(
                    self._engine.stream_behavior(
                        "sotw", f"/{service}/StreamAggregatedResources", None
                    ),
                    request_deserializer=sotw_in,
                    response_serializer=_serialize,
                ),
                "DeltaAggregatedResources": grpc.stream_stream_rpc_method_handler(
                    self._engine.stream_behavior(
                        "delta", f"/{service}/DeltaAggregatedResources", None
                    ),
                    request_deserializer=delta_in,
                    response_serializer=_serialize,
                ),
            }
        for rtype in resource_types():
            for kind, path in (
                ("sotw", rtype.stream_method),
                ("delta", rtype.delta_method),
                ("fetch", rtype.fetch_method),
            ):
                if path is None:
                    continue
                service, method = path[1:].rsplit("/", 1)
                table = services.setdefault(service, {})
                if kind == "fetch":
                    table[method] = grpc.unary_unary_rpc_method_handler(
                        self._engine.unary_behavior(path, rtype.type_url),
                        request_deserializer=sotw_in,
                        response_serializer=_serialize,
                    )
                else:
                    table[method] = grpc.stream_stream_rpc_method_handler(
                        self._engine.stream_behavior(
                            "sotw" if kind == "sotw" else "delta", path, rtype.type_url
                        ),
                        request_deserializer=sotw_in if kind == "sotw" else delta_in,
                        response_serializer=_serialize,
                    )
        return [
            *(
                grpc.method_handlers_generic_handler(service, table)
                for service, table in services.items()
            ),
            self._lrs.handler(),
        ]

    def _start_grpc(self, port: int) -> None:
        self._engine.stopping.clear()
        executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="xds-cp-grpc")
        server = grpc.server(
            executor,
            handlers=self._handlers(),
            interceptors=list(self._interceptors),
            # A stream no worker can take is refused (RESOURCE_EXHAUSTED), so its client
            # backs off and retries; admitted and never served, it would sit silent
            # while the client's does-not-exist timers run on the written request.
            maximum_concurrent_rpcs=self._max_workers,
            options=[
                ("grpc.max_send_message_length", self._max_message_bytes),
                ("grpc.max_receive_message_length", self._max_message_bytes),
                # Off: with SO_REUSEPORT a second server on a busy port starts too and
                # silently takes half of the clients. A busy port must be an error.
                ("grpc.so_reuseport", 0),
            ],
        )
        try:
            if self.server_credentials is None:
                bound = server.add_insecure_port(self._hostport(port))
            else:
                bound = server.add_secure_port(self._hostport(port), self.server_credentials)
        except RuntimeError as exc:
            executor.shutdown(wait=False)
            raise TransportError(f"cannot bind {self._hostport(port)}: {exc}") from exc
        if bound == 0:
            executor.shutdown(wait=False)
            raise TransportError(f"cannot bind {self._hostport(port)}")
        server.start()
        self._server, self._executor, self._port = server, executor, bound

    def _stop_grpc(self) -> None:
        server, executor = self._server, self._executor
        self._server = self._executor = None
        if server is None or executor is None:
            return
        self._engine.stopping.set()
        server.stop(grace=None).wait(timeout=10.0)
        executor.shutdown(wait=True)
        self._engine.join_readers(timeout=5.0)
        self._lrs.join_readers(timeout=5.0)

    # -- addresses -----------------------------------------------------------

    def _require_running(self) -> None:
        if self._state != "running":
            raise UsageError(f"the ControlPlane is {self._state}; use it inside `with`")

    def _hostport(self, port: int) -> str:
        return f"[{self._host}]:{port}" if ":" in self._host else f"{self._host}:{port}"

    @property
    def port(self) -> int:
        """The gRPC port (stays the same across ``stop_serving``/``resume_serving``)."""
        self._require_running()
        return self._port

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"``: the gRPC target for clients."""
        return self._hostport(self.port)

    @property
    def rest_url(self) -> str:
        """Base URL of the REST-JSON server, e.g. ``"http://127.0.0.1:PORT"``."""
        self._require_running()
        if self._rest_port is None:
            raise UsageError("this ControlPlane was created with rest_port=None")
        return f"http://{self._hostport(self._rest_port)}"

    # -- bootstrap -------------------------------------------------------------

    def server_config(self, *, server_features: Sequence[str] = ("xds_v3",)) -> dict[str, Any]:
        """This server as one ``xds_servers`` entry of a gRPC bootstrap (insecure)."""
        return {
            "server_uri": self.address,
            "channel_creds": [{"type": "insecure"}],
            "server_features": list(server_features),
        }

    def bootstrap(
        self,
        *,
        node_id: str = "test-node",
        cluster: str = "test",
        authorities: Mapping[str, ControlPlane | None] | None = None,
        default_listener_template: str | None = None,
        listener_templates: Mapping[str, str] | None = None,
        server_features: Sequence[str] = ("xds_v3",),
    ) -> dict[str, Any]:
        """A gRPC xDS bootstrap (as a dict) pointing at this control plane.

        ``authorities`` maps each federation authority (gRFC A47) to the
        ControlPlane serving it, or to None for "use the top-level server"
        (this one). ``listener_templates`` sets an authority's
        ``client_listener_resource_name_template``.
        """
        config: dict[str, Any] = {
            "xds_servers": [self.server_config(server_features=server_features)],
            "node": {"id": node_id, "cluster": cluster, "locality": {"zone": "a"}},
        }
        if default_listener_template is not None:
            config["client_default_listener_resource_name_template"] = default_listener_template
        if authorities is not None:
            entries: dict[str, dict[str, Any]] = {}
            for name, plane in authorities.items():
                entry: dict[str, Any] = {}
                if plane is not None:
                    entry["xds_servers"] = [plane.server_config(server_features=server_features)]
                template = (listener_templates or {}).get(name)
                if template is not None:
                    entry["client_listener_resource_name_template"] = template
                entries[name] = entry
            config["authorities"] = entries
        return config

    def write_bootstrap(self, path: str | os.PathLike[str], **options: Any) -> Path:
        """Write :meth:`bootstrap` (same keyword options) as JSON to ``path``; returns it."""
        target = Path(path)
        target.write_text(json.dumps(self.bootstrap(**options), indent=2), encoding="utf-8")
        return target

    # -- resources -------------------------------------------------------------

    def set_resources(
        self,
        type: TypeSpec,
        resources: ResourcesInput,
        *,
        version: str | None = None,
        node_id: str | None = None,
        ttl: float | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> str:
        """Replace every resource of a type; returns the type's new version.

        ``resources`` maps names to messages (or ``Any``, or bytes), or lists
        messages whose ``name``/``cluster_name`` names them. ``version`` is the
        SotW ``version_info`` (by default a counter shared by all types);
        ``versions`` gives per-resource versions for delta (by default a hash
        of the bytes). With ``node_id``, only that node sees the change.
        ``ttl`` (seconds) makes every given resource expire unless heartbeats
        refresh it.
        """
        return self.set_snapshot(
            {type: resources}, version=version, node_id=node_id, ttl=ttl, versions=versions
        )

    def set_snapshot(
        self,
        resources: SnapshotInput,
        *,
        version: str | None = None,
        node_id: str | None = None,
        ttl: float | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> str:
        """Replace several types at once (pushed together, CDS before EDS)."""
        changes: dict[str, Callable[[dict[str, Entry]], None]] = {}
        for spec, given in resources.items():
            type_url = _type_url(spec)
            new = entries_from(type_url, given, ttl=ttl, versions=versions)
            self._check_rules(type_url, new)

            def replace_all(entries: dict[str, Entry], new: dict[str, Entry] = new) -> None:
                entries.clear()
                entries.update(new)

            changes[type_url] = replace_all
        return self._store.apply(node_id, changes, version)

    def update(
        self,
        type: TypeSpec,
        resources: ResourcesInput,
        *,
        version: str | None = None,
        node_id: str | None = None,
        ttl: float | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> str:
        """Add or replace some resources of a type, keeping the others."""
        type_url = _type_url(type)
        new = entries_from(type_url, resources, ttl=ttl, versions=versions)
        self._check_rules(type_url, new)
        return self._store.apply(node_id, {type_url: lambda entries: entries.update(new)}, version)

    def _check_rules(self, type_url: str, entries: Mapping[str, Entry]) -> None:
        if not self._validate_resources:
            return
        try:
            cls = resource_type(type_url).message_class
        except UnknownResourceTypeError:
            return  # a type we cannot decode: nothing to check it against
        for entry in entries.values():
            try:
                message = cls.FromString(entry.body.value)
            except DecodeError:
                continue  # bytes given as they are, on purpose: served as given
            validate(message)

    def remove(
        self,
        type: TypeSpec,
        names: Iterable[str],
        *,
        version: str | None = None,
        node_id: str | None = None,
    ) -> str:
        """Delete resources of a type by name (missing names are ignored)."""
        type_url = _type_url(type)
        gone = list(names)

        def drop(entries: dict[str, Entry]) -> None:
            for name in gone:
                entries.pop(name, None)

        return self._store.apply(node_id, {type_url: drop}, version)

    def clear_node(self, node_id: str) -> None:
        """Drop a node's own snapshots; it sees the shared resources again."""
        self._store.clear_node(node_id)

    def load_file(
        self, path: str | Path, *, version: str | None = None, node_id: str | None = None
    ) -> str:
        """Serve the resources of a YAML or JSON file (see :func:`load_resources`)."""

        loaded = load_resources(path)
        snapshot: dict[TypeSpec, ResourcesInput] = dict(loaded.resources.items())
        return self.set_snapshot(snapshot, version=version or loaded.version, node_id=node_id)

    def version(self, type: TypeSpec, *, node_id: str | None = None) -> str:
        """The current ``version_info`` of a type (``""`` if never set)."""
        return self._store.view(node_id, _type_url(type)).version

    def resources(
        self,
        type: TypeSpec,
        *,
        node_id: str | None = None,
    ) -> dict[str, AnyProto]:
        """The resources currently served for a type, packed, by name."""
        snap = self._store.view(node_id, _type_url(type))
        return {name: entry.body for name, entry in snap.entries.items()}

    # -- observability -----------------------------------------------------------

    def streams(self, *, active: bool | None = None) -> list[StreamInfo]:
        """Every stream and poll seen so far (``active=True``: only open ones)."""
        found = self._log.streams()
        return found if active is None else [s for s in found if s.active == active]

    def requests(
        self,
        type: TypeSpec | None = None,
        *,
        stream_id: int | None = None,
    ) -> list[RecordedRequest]:
        """Requests received, oldest first, optionally of one type or stream."""
        type_url = _type_url(type) if type is not None else None
        return [
            r
            for r in self._log.requests()
            if type_url in (None, r.type_url) and stream_id in (None, r.stream_id)
        ]

    def responses(
        self,
        type: TypeSpec | None = None,
        *,
        stream_id: int | None = None,
    ) -> list[RecordedResponse]:
        """Responses sent, oldest first, optionally of one type or stream."""
        type_url = _type_url(type) if type is not None else None
        return [
            r
            for r in self._log.responses()
            if type_url in (None, r.type_url) and stream_id in (None, r.stream_id)
        ]

    def mark(self) -> int:
        """A position in the request log to pass as ``since=`` to the waits."""
        return len(self._log.requests())

    def wait_for_request(
        self,
        type: TypeSpec | None = None,
        predicate: Callable[[RecordedRequest], bool] | None = None,
        *,
        timeout: float = 5.0,
        since: int = 0,
        stream_id: int | None = None,
        node_id: str | None = None,
    ) -> RecordedRequest:
        """Wait for the first request (from ``since``) matching the filters.

        Raises :class:`xds_client.errors.WaitTimeoutError` after ``timeout``
        seconds, naming what was seen instead.
        """
        __tracebackhide__ = True  # pytest shows the test's line, not this wait's frames
        return self._wait_request(
            type, predicate, timeout=timeout, since=since, stream_id=stream_id, node_id=node_id
        )

    def _wait_request(
        self,
        type: TypeSpec | None,
        predicate: Callable[[RecordedRequest], bool] | None,
        *,
        timeout: float,
        since: int,
        stream_id: int | None,
        node_id: str | None,
        awaited: str | None = None,
    ) -> RecordedRequest:
        """:meth:`wait_for_request`; ``awaited`` says what a timeout names as awaited."""
        __tracebackhide__ = True
        type_url = _type_url(type) if type is not None else None

        def matches(r: RecordedRequest) -> bool:
            if r.seq < since or type_url not in (None, r.type_url):
                return False
            if stream_id is not None and r.stream_id != stream_id:
                return False
            if node_id is not None and self._log.stream(r.stream_id).node_id != node_id:
                return False
            return predicate is None or predicate(r)

        def probe(requests: Sequence[RecordedRequest]) -> RecordedRequest | None:
            return next((r for r in requests[since:] if matches(r)), None)

        def what(requests: Sequence[RecordedRequest]) -> str:
            seen = [
                f"{r.classification} version_info={r.version_info!r} "
                f"response_version={r.response_version!r} stream={r.stream_id}"
                for r in requests[since:]
                if type_url in (None, r.type_url)
            ][-5:]
            wanted = awaited or f"a matching request of {type_url or 'any type'}"
            return f"{wanted}; last seen: {seen or 'none'}"

        return self._log.wait(probe, timeout, what)

    def wait_for_ack(
        self,
        type: TypeSpec,
        version: str | None = None,
        timeout: float = 5.0,
        *,
        since: int = 0,
        stream_id: int | None = None,
        node_id: str | None = None,
    ) -> RecordedRequest:
        """Wait for an ACK of a response of ``type`` (at ``version``, if given)."""
        __tracebackhide__ = True
        return self._wait_request(
            type,
            lambda r: r.is_ack and version in (None, r.response_version),
            timeout=timeout,
            since=since,
            stream_id=stream_id,
            node_id=node_id,
            awaited=_awaited("ACK", type, version),
        )

    def wait_for_nack(
        self,
        type: TypeSpec,
        version: str | None = None,
        timeout: float = 5.0,
        *,
        since: int = 0,
        stream_id: int | None = None,
        node_id: str | None = None,
    ) -> RecordedRequest:
        """Wait for a NACK of a response of ``type``; read ``.error_detail`` on the result.

        ``version`` is the version of the rejected response.
        """
        __tracebackhide__ = True
        return self._wait_request(
            type,
            lambda r: r.is_nack and version in (None, r.response_version),
            timeout=timeout,
            since=since,
            stream_id=stream_id,
            node_id=node_id,
            awaited=_awaited("NACK", type, version),
        )

    def wait_for_streams(
        self, count: int = 1, timeout: float = 5.0, *, active: bool = True
    ) -> list[StreamInfo]:
        """Wait until at least ``count`` streams are open (or were ever opened)."""

        def probe(_: Sequence[RecordedRequest]) -> list[StreamInfo] | None:
            found = [s for s in self._log.streams() if s.active or not active]
            return found if len(found) >= count else None

        def what(_: Sequence[RecordedRequest]) -> str:
            return f"{count} {'open ' if active else ''}streams"

        return self._log.wait(probe, timeout, what)

    def subscriptions(self, type: TypeSpec) -> dict[int, Subscription]:
        """What each open stream is subscribed to for ``type``, by stream id."""
        return self._log.subscriptions(_type_url(type))

    def wait_for_subscription(
        self,
        type: TypeSpec,
        names: Iterable[str] = (),
        *,
        wildcard: bool | None = None,
        exact: bool = False,
        timeout: float = 5.0,
        node_id: str | None = None,
    ) -> int:
        """Wait until an open stream subscribes to ``names`` of ``type``; returns its id.

        The stream's subscription must include ``names`` (equal them with
        ``exact=True``) and, when ``wildcard`` is given, be wildcard or not.
        Works for SotW and delta alike, since the subscription is what the
        control plane tracks per stream.
        """
        type_url, wanted = _type_url(type), frozenset(names)

        def fits(stream_id: int, sub: Subscription) -> bool:
            if wildcard is not None and sub.wildcard != wildcard:
                return False
            if node_id is not None and self._log.stream(stream_id).node_id != node_id:
                return False
            return sub.names == wanted if exact else wanted <= sub.names

        def probe(_: Sequence[RecordedRequest]) -> int | None:
            found = self._log.subscriptions(type_url)
            return next((i for i, sub in sorted(found.items()) if fits(i, sub)), None)

        def what(_: Sequence[RecordedRequest]) -> str:
            seen = {
                i: (sorted(sub.names), "wildcard" if sub.wildcard else "named")
                for i, sub in self._log.subscriptions(type_url).items()
            }
            return f"a subscription to {sorted(wanted)} of {type_url}; streams have {seen}"

        return self._log.wait(probe, timeout, what)

    def wait_for_streams_closed(self, timeout: float = 5.0) -> None:
        """Wait until no stream is open (e.g. after :meth:`drop_streams`)."""

        def probe(_: Sequence[RecordedRequest]) -> bool | None:
            return True if not any(s.active for s in self._log.streams()) else None

        def what(_: Sequence[RecordedRequest]) -> str:
            still = [s.id for s in self._log.streams() if s.active]
            return f"every stream to close; still open: {still}"

        self._log.wait(probe, timeout, what)

    # The asyncio twins: the same waits in a worker thread, so the loop runs meanwhile.
    wait_for_subscription_async = _off_loop(wait_for_subscription)
    wait_for_request_async = _off_loop(wait_for_request)
    wait_for_ack_async = _off_loop(wait_for_ack)
    wait_for_nack_async = _off_loop(wait_for_nack)
    wait_for_streams_async = _off_loop(wait_for_streams)

    # -- TTL heartbeats ----------------------------------------------------------

    # -- load reporting (LRS) ----------------------------------------------------

    def set_load_reporting(
        self, clusters: Sequence[str] | None = None, *, interval: float = 1.0
    ) -> None:
        """What LRS streams are asked for: the ``clusters`` named (None:
        ``send_all_clusters``) every ``interval`` seconds. Sent to every open LRS stream
        now and to each new one after its first request (the default: all, 1 s)."""
        self._lrs.set_plan(clusters, interval)

    def load_reports(self, cluster: str | None = None) -> list[RecordedLoadReport]:
        """Every ``LoadStatsRequest`` received so far, in order; with ``cluster``, only
        those that report it."""
        return self._lrs.reports(cluster)

    def wait_for_load_report(
        self,
        cluster: str | None = None,
        *,
        predicate: Callable[[RecordedLoadReport], bool] | None = None,
        timeout: float = 5.0,
    ) -> RecordedLoadReport:
        """The first load report (of ``cluster``, meeting ``predicate``) received, waiting
        up to ``timeout`` seconds; :class:`~xds_client.errors.WaitTimeoutError` after."""

        def fits(report: RecordedLoadReport) -> bool:
            if cluster is not None and report.cluster(cluster) is None:
                return False
            return predicate is None or predicate(report)

        what = f"of cluster {cluster!r}" if cluster is not None else "at all"
        return self._lrs.wait_for(fits, what, timeout)

    def send_heartbeats(self) -> None:
        """Send one round of heartbeats now, for every resource with a TTL."""
        self._engine.broadcast(_Heartbeat())

    def start_heartbeats(self, interval: float = 1.0) -> None:
        """Send heartbeats every ``interval`` seconds (restarts a running timer)."""
        self._require_running()  # a closed control plane must not grow a thread
        self.stop_heartbeats()
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                self._engine.broadcast(_Heartbeat())

        thread = threading.Thread(target=beat, name="xds-cp-heartbeat", daemon=True)
        with self._lock:
            self._heartbeat_stop, self._heartbeat_thread = stop, thread
        thread.start()

    def stop_heartbeats(self) -> None:
        """Stop periodic heartbeats, so resources with a TTL expire at clients."""
        with self._lock:
            stop, thread = self._heartbeat_stop, self._heartbeat_thread
            self._heartbeat_thread = None
        stop.set()
        if thread is not None:
            thread.join(timeout=5.0)

    # -- fault injection ---------------------------------------------------------

    def drop_streams(
        self,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        details: str = "stream dropped by ControlPlane.drop_streams()",
        *,
        stream_id: int | None = None,
    ) -> list[int]:
        """End open streams (all, or one) with a gRPC status; returns their ids."""

        return self._engine.broadcast(_Abort(code, details), stream_id)

    def fail_streams(
        self,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        details: str = "failed by ControlPlane.fail_streams()",
        *,
        count: int | None = 1,
    ) -> None:
        """Answer the next ``count`` new streams and fetches (None: all) with a status."""
        self._engine.fail_new_streams(code, details, count)

    def clear_faults(self) -> None:
        """Undo ``fail_streams`` and ``delay_responses``."""
        self._engine.clear_failures()
        self._engine.clear_delays()

    def delay_responses(self, seconds: float, type: TypeSpec | None = None) -> None:
        """Hold every response (of one type, or all) for ``seconds``; 0 undoes it."""
        self._engine.set_delay(seconds, _type_url(type) if type is not None else None)

    def send_raw(
        self,
        response: DiscoveryResponse | DeltaDiscoveryResponse | bytes,
        *,
        stream_id: int | None = None,
    ) -> list[int]:
        """Send a response you built on open streams of the matching kind.

        A ``DiscoveryResponse`` goes to SotW streams, a ``DeltaDiscoveryResponse``
        to delta streams, raw ``bytes`` (e.g. garbage) to all. A missing nonce is
        filled in. Returns the ids of the streams it was queued on.
        """
        return self._engine.send_raw(response, stream_id)

    def stop_serving(self) -> None:
        """Close the gRPC and REST ports (ending every stream); state and logs are kept."""
        with self._lock:
            self._require_running()
            self._stop_grpc()
            if self._rest is not None:
                self._rest.close()
                self._rest = None

    def resume_serving(self) -> None:
        """Listen again on the same ports after :meth:`stop_serving`."""
        with self._lock:
            self._require_running()
            self._resume()

    def _resume(self) -> None:
        if self._server is None:
            self._start_grpc(self._port)
        if self._rest is None and self._rest_port is not None:
            self._rest = RestServer(self._engine, self._host, self._rest_port)

    def refuse_connections(self, seconds: float) -> None:
        """Stop serving now and resume on the same ports after ``seconds``."""
        self.stop_serving()
        timer = threading.Timer(seconds, self._resume_if_running)
        timer.daemon = True
        with self._lock:
            self._timers = [t for t in self._timers if t.is_alive()]
            self._timers.append(timer)
        timer.start()

    def _resume_if_running(self) -> None:
        with self._lock:
            if self._state == "running":
                self._resume()
