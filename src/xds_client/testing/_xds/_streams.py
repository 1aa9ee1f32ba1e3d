"""SotW and delta stream handlers, the unary ``Fetch*`` answer, and their shared engine.

Each gRPC stream runs in one server worker thread (the response generator)
plus one reader thread that logs and queues incoming requests. All state of
a stream belongs to the worker thread; the reader thread and the control
plane only put events on the stream's queue.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Resource,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration

from xds_client.federation import glob_collection_of, is_glob_collection
from xds_client.resources import (
    RESOURCE_WRAPPER_TYPE_URL,
    TYPE_URL_PREFIX,
    is_full_state,
    resource_type,
)

from ._log import RequestKind, RequestLog, StreamInfo, StreamKind, Subscription
from ._store import Entry, Store, TypeSnapshot, endpoints_type_for

__all__ = ["Engine", "StreamHandle"]

_V2_RESOURCE_WRAPPER_TYPE_URL = TYPE_URL_PREFIX + "envoy.api.v2.Resource"
# How often a waiting stream worker re-checks that its RPC is still alive, in
# case gRPC drops the RPC without running our termination callback.
_LIVENESS_CHECK_SECONDS = 0.5


@dataclass(frozen=True)
class _Request:
    message: DiscoveryRequest | DeltaDiscoveryRequest
    type_url: str
    classification: RequestKind


@dataclass(frozen=True)
class _Changed:
    type_urls: frozenset[str]


@dataclass(frozen=True)
class _Abort:
    code: grpc.StatusCode
    details: str


@dataclass(frozen=True)
class _Raw:
    message: DiscoveryResponse | DeltaDiscoveryResponse | bytes


class _Heartbeat:
    pass


class _Close:
    pass


_Event = _Request | _Changed | _Abort | _Raw | _Heartbeat | _Close


@dataclass
class _SotwType:
    requested: bool = False
    wildcard: bool = False
    legacy_wildcard: bool = False
    names: set[str] = field(default_factory=set)
    last_key: tuple[Any, ...] | None = None
    last_version: str = ""
    sent: dict[str, Entry] = field(default_factory=dict)
    owed: bool = False  # names were added: the next answer is sent even if unchanged


@dataclass
class _DeltaType:
    requested: bool = False
    wildcard: bool = False
    names: set[str] = field(default_factory=set)
    client_versions: dict[str, str] = field(default_factory=dict)
    ttl_names: set[str] = field(default_factory=set)


def _duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def _wrapper_url(type_url: str) -> str:
    try:
        v2 = resource_type(type_url).api_version == "v2"
    except LookupError:
        v2 = False
    return _V2_RESOURCE_WRAPPER_TYPE_URL if v2 else RESOURCE_WRAPPER_TYPE_URL


def _wrap(entry: Entry, type_url: str, *, body: bool = True) -> AnyProto:
    wrapper = Resource(name=entry.name, version=entry.version)
    if body:
        wrapper.resource.CopyFrom(entry.body)
    if entry.ttl is not None:
        wrapper.ttl.CopyFrom(_duration(entry.ttl))
    return AnyProto(type_url=_wrapper_url(type_url), value=wrapper.SerializeToString())


def _delta_resource(entry: Entry, *, body: bool = True) -> Resource:
    res = Resource(name=entry.name, version=entry.version)
    if body:
        res.resource.CopyFrom(entry.body)
    if entry.ttl is not None:
        res.ttl.CopyFrom(_duration(entry.ttl))
    return res


class StreamHandle:
    """The control plane's grip on one live stream: its queue and sent nonces."""

    def __init__(self, engine: Engine, info: StreamInfo, default_type_url: str | None) -> None:
        self.engine = engine
        self.info = info
        self.default_type_url = default_type_url
        self.events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self.node_id: str | None = None
        self._lock = threading.Lock()
        self._nonces: dict[str, tuple[str, str]] = {}  # nonce -> (type_url, version)
        self._latest_nonce: dict[str, str] = {}  # type_url -> nonce (SotW staleness)
        self._types_seen: set[str] = set()

    @property
    def kind(self) -> StreamKind:
        return self.info.kind

    def put(self, event: _Event) -> None:
        self.events.put(event)

    # -- reader thread -------------------------------------------------------

    def received(self, message: DiscoveryRequest | DeltaDiscoveryRequest) -> None:
        type_url = message.type_url or self.default_type_url or ""
        if message.HasField("node") and self.node_id is None:
            self.node_id = message.node.id
            self.engine.log.set_node(self.info.id, message.node)
        nonce = message.response_nonce
        classification: RequestKind
        with self._lock:
            first = type_url not in self._types_seen
            self._types_seen.add(type_url)
            sent = self._nonces.get(nonce) if nonce else None
            latest = self._latest_nonce.get(type_url)
        response_version = sent[1] if sent is not None else None
        if sent is not None:
            if self.kind == "sotw" and nonce != latest:
                classification = "stale"
            elif message.HasField("error_detail"):
                classification = "nack"
            else:
                classification = "ack"
        elif first:
            classification = "initial"
        elif nonce and self.kind == "sotw":
            classification = "stale"
        else:
            classification = "request"
        self.engine.log.add_request(
            self.info.id,
            kind=self.kind,
            type_url=type_url,
            message=message,
            classification=classification,
            response_version=response_version,
        )
        self.put(_Request(message, type_url, classification))

    # -- worker thread -------------------------------------------------------

    def note_sent(self, type_url: str, version: str, nonce: str) -> None:
        with self._lock:
            self._nonces[nonce] = (type_url, version)
            self._latest_nonce[type_url] = nonce


class Engine:
    """Everything the handlers share: store, log, options, faults and live streams."""

    def __init__(self, store: Store, log: RequestLog) -> None:
        self.store = store
        self.log = log
        self.sotw_wrap = False
        self.report_missing_in_delta = True
        self._lock = threading.Lock()
        self._nonce = itertools.count(1)
        self._streams: dict[int, StreamHandle] = {}
        self._delays: dict[str | None, float] = {}
        self._fail_new: list[_Abort] = []
        self._fail_always: _Abort | None = None
        self._readers: list[threading.Thread] = []
        self.stopping = threading.Event()
        store.add_listener(self._on_change)

    # -- faults and options --------------------------------------------------

    def set_delay(self, seconds: float, type_url: str | None) -> None:
        with self._lock:
            if seconds > 0:
                self._delays[type_url] = seconds
            else:
                self._delays.pop(type_url, None)

    def clear_delays(self) -> None:
        with self._lock:
            self._delays.clear()

    def delay_for(self, type_url: str) -> float:
        with self._lock:
            return self._delays.get(type_url, self._delays.get(None, 0.0))

    def fail_new_streams(self, code: grpc.StatusCode, details: str, count: int | None) -> None:
        with self._lock:
            if count is None:
                self._fail_always = _Abort(code, details)
            else:
                self._fail_new.extend([_Abort(code, details)] * count)

    def clear_failures(self) -> None:
        with self._lock:
            self._fail_new.clear()
            self._fail_always = None

    def _take_failure(self) -> _Abort | None:
        with self._lock:
            if self._fail_new:
                return self._fail_new.pop(0)
            return self._fail_always

    def join_readers(self, timeout: float) -> None:
        """Join the request readers of ended streams (call after the server stopped)."""
        with self._lock:
            readers, self._readers = self._readers, []
        for reader in readers:
            reader.join(timeout=timeout)

    def live_streams(self) -> list[StreamHandle]:
        with self._lock:
            return list(self._streams.values())

    def broadcast(self, event: _Event, stream_id: int | None = None) -> list[int]:
        targets = [s for s in self.live_streams() if stream_id in (None, s.info.id)]
        for stream in targets:
            stream.put(event)
        return [s.info.id for s in targets]

    def send_raw(
        self, message: DiscoveryResponse | DeltaDiscoveryResponse | bytes, stream_id: int | None
    ) -> list[int]:
        targets = []
        for stream in self.live_streams():
            if stream_id is not None and stream.info.id != stream_id:
                continue
            if isinstance(message, DiscoveryResponse) and stream.kind != "sotw":
                continue
            if isinstance(message, DeltaDiscoveryResponse) and stream.kind != "delta":
                continue
            stream.put(_Raw(message))
            targets.append(stream.info.id)
        return targets

    def next_nonce(self) -> str:
        return str(next(self._nonce))

    def _on_change(self, node_id: str | None, type_urls: frozenset[str]) -> None:
        for stream in self.live_streams():
            if node_id is None or stream.node_id in (None, node_id):
                stream.put(_Changed(type_urls))

    # -- gRPC behaviours -----------------------------------------------------

    def stream_behavior(
        self, kind: StreamKind, method: str, default_type_url: str | None
    ) -> Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]]:
        def behavior(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            return self._serve_stream(kind, method, default_type_url, requests, context)

        return behavior

    def _serve_stream(
        self,
        kind: StreamKind,
        method: str,
        default_type_url: str | None,
        requests: Iterator[DiscoveryRequest | DeltaDiscoveryRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[DiscoveryResponse | DeltaDiscoveryResponse | bytes]:
        failure = self._take_failure()
        if failure is not None:
            info = self.log.open_stream(kind, method, context.peer())
            self.log.close_stream(info.id)
            context.abort(failure.code, failure.details)
        # Response headers at once, as a server that took the stream (a grpc-go
        # server sends them with its first message unless its handler asks).
        context.send_initial_metadata(())
        handles: list[StreamHandle] = []

        def register(info: StreamInfo) -> None:
            # Runs before waiters on the log wake up, so a test that saw the
            # stream open can already drop it or send on it.
            handle = StreamHandle(self, info, default_type_url)
            with self._lock:
                self._streams[info.id] = handle
            handles.append(handle)

        info = self.log.open_stream(kind, method, context.peer(), on_open=register)
        handle = handles[0]
        context.add_callback(lambda: handle.put(_Close()))
        reader = threading.Thread(
            target=self._read, args=(handle, requests), name=f"xds-cp-reader-{info.id}", daemon=True
        )
        with self._lock:
            self._readers = [t for t in self._readers if t.is_alive()]
            self._readers.append(reader)
        reader.start()
        session: _Session = _SotwSession(handle) if kind == "sotw" else _DeltaSession(handle)
        try:
            while True:
                try:
                    event = handle.events.get(timeout=_LIVENESS_CHECK_SECONDS)
                except queue.Empty:
                    if not context.is_active() or self.stopping.is_set():
                        return
                    continue
                if isinstance(event, _Close):
                    return
                if isinstance(event, _Abort):
                    context.abort(event.code, event.details)
                for type_url, version, nonce, response in session.handle(event):
                    delay = self.delay_for(type_url)
                    if delay > 0 and self.stopping.wait(delay):
                        return
                    if nonce:
                        handle.note_sent(type_url, version, nonce)
                    self.log.add_response(info.id, type_url, version, nonce, response)
                    yield response
        finally:
            with self._lock:
                self._streams.pop(info.id, None)
            self.log.close_stream(info.id)
            # The reader ends only once gRPC has ended the RPC, which happens
            # after this generator returns, so it is joined in join_readers().

    @staticmethod
    def _read(
        handle: StreamHandle, requests: Iterator[DiscoveryRequest | DeltaDiscoveryRequest]
    ) -> None:
        try:
            for message in requests:
                handle.received(message)
        except grpc.RpcError:
            pass  # the RPC was cancelled; the worker sees _Close
        except Exception:  # a test double must not crash on odd input
            pass
        handle.put(_Close())

    def fetch(
        self,
        request: DiscoveryRequest,
        default_type_url: str,
        kind: StreamKind,
        method: str,
        peer: str,
        *,
        not_modified: bool = True,
    ) -> DiscoveryResponse | None:
        """Answer a unary ``Fetch*`` or REST poll.

        With ``not_modified``, None when the request's ``version_info`` is current
        (REST answers 304); otherwise always the full answer.
        """
        info = self.log.open_stream(kind, method, peer)
        try:
            type_url = request.type_url or default_type_url
            if request.HasField("node"):
                self.log.set_node(info.id, request.node)
            self.log.add_request(
                info.id,
                kind=kind,
                type_url=type_url,
                message=request,
                classification="initial",
                response_version=None,
            )
            node_id = request.node.id if request.HasField("node") else None
            snap = self.store.view(node_id, type_url)
            if not_modified and request.version_info and request.version_info == snap.version:
                return None
            names = set(request.resource_names)
            selected = [
                entry
                for name, entry in sorted(snap.entries.items())
                if not names or "*" in names or name in names
            ]
            response = DiscoveryResponse(version_info=snap.version, type_url=type_url)
            for entry in selected:
                response.resources.append(
                    _wrap(entry, type_url)
                    if entry.ttl is not None or self.sotw_wrap
                    else entry.body
                )
            self.log.add_response(info.id, type_url, snap.version, "", response)
            return response
        finally:
            self.log.close_stream(info.id)

    def unary_behavior(
        self, method: str, default_type_url: str
    ) -> Callable[[DiscoveryRequest, grpc.ServicerContext], DiscoveryResponse]:
        def behavior(request: DiscoveryRequest, context: grpc.ServicerContext) -> DiscoveryResponse:
            failure = self._take_failure()
            if failure is not None:
                context.abort(failure.code, failure.details)
            # gRPC has no "not modified": an up-to-date poll gets the same
            # version again, in full, so no client can read it as deletions.
            response = self.fetch(
                request, default_type_url, "fetch", method, context.peer(), not_modified=False
            )
            assert response is not None
            return response

        return behavior


_Out = tuple[str, str, str, DiscoveryResponse | DeltaDiscoveryResponse | bytes]


class _Session:
    """Per-stream protocol state; lives in the stream's worker thread only."""

    def __init__(self, stream: StreamHandle) -> None:
        self.stream = stream
        self.engine = stream.engine

    def view(self, type_url: str) -> TypeSnapshot:
        return self.engine.store.view(self.stream.node_id, type_url)

    types: Mapping[str, _SotwType | _DeltaType]

    def handle(self, event: _Event) -> list[_Out]:
        if isinstance(event, _Request):
            answers = self.on_request(event)
            state = self.types.get(event.type_url)
            if state is not None:
                subscription = Subscription(state.wildcard, frozenset(state.names))
                self.engine.log.set_subscription(self.stream.info.id, event.type_url, subscription)
            return answers
        if isinstance(event, _Changed):
            out: list[_Out] = []
            for type_url in sorted(event.type_urls, key=_push_order):
                out.extend(self.on_change(type_url))
            return out
        if isinstance(event, _Heartbeat):
            return self.heartbeat()
        if isinstance(event, _Raw):
            return [self.raw(event.message)]
        return []

    def raw(self, message: DiscoveryResponse | DeltaDiscoveryResponse | bytes) -> _Out:
        if isinstance(message, bytes):
            return ("", "", "", message)
        if not message.nonce:
            # Stamp a copy, keeping the caller's object as it was.
            stamped = type(message).FromString(message.SerializeToString())
            stamped.nonce = self.engine.next_nonce()
            message = stamped
        version = (
            message.version_info
            if isinstance(message, DiscoveryResponse)
            else message.system_version_info
        )
        return (message.type_url, version, message.nonce, message)

    def on_request(self, request: _Request) -> list[_Out]:
        raise NotImplementedError

    def on_change(self, type_url: str) -> list[_Out]:
        raise NotImplementedError

    def heartbeat(self) -> list[_Out]:
        raise NotImplementedError


class _SotwSession(_Session):
    def __init__(self, stream: StreamHandle) -> None:
        super().__init__(stream)
        self.types: dict[str, _SotwType] = {}

    def on_request(self, request: _Request) -> list[_Out]:
        message = request.message
        assert isinstance(message, DiscoveryRequest)
        state = self.types.setdefault(request.type_url, _SotwType())
        names = set(message.resource_names)
        first = not state.requested
        before_names, before_wildcard = set(state.names), state.wildcard
        state.requested = True
        if first and not names:
            state.wildcard = state.legacy_wildcard = True
        elif "*" in names:
            state.wildcard, state.legacy_wildcard = True, False
            state.names = names - {"*"}
        elif names:
            state.wildcard = state.legacy_wildcard = False
            state.names = names
        elif not state.legacy_wildcard:
            state.wildcard = False
            state.names = set()
        # A name the client adds (again) must be answered even when the version is
        # unchanged: it may have dropped the resource when it unsubscribed.
        grew = bool(state.names - before_names) or (state.wildcard and not before_wildcard)
        state.owed = state.owed or grew
        if request.classification == "stale":
            # The client has not seen our latest response yet: no answer now (its ACK
            # of that response will come), but its names are what it wants.
            return []
        if request.classification == "nack":
            return []  # resend only once something changes
        force, state.owed = first or state.owed, False
        return self.on_change(request.type_url, force=force)

    def on_change(self, type_url: str, *, force: bool = False) -> list[_Out]:
        state = self.types.get(type_url)
        if state is None or not state.requested:
            return []
        out = self._respond(type_url, state, force=force)
        if out:
            eds = endpoints_type_for(type_url) if _is_cds(type_url) else None
            eds_state = self.types.get(eds) if eds else None
            if eds and eds_state is not None and eds_state.requested:
                out.extend(self._respond(eds, eds_state, force=True))
        return out

    def _respond(self, type_url: str, state: _SotwType, *, force: bool) -> list[_Out]:
        snap = self.view(type_url)
        if not snap.is_set:
            return []
        if state.wildcard:
            selected = dict(snap.entries)
        else:
            selected = {n: snap.entries[n] for n in state.names if n in snap.entries}
        if not selected and not state.wildcard and not is_full_state(type_url):
            return []  # nothing the client asked for exists; it will time out on it
        key = (snap.version, tuple(sorted((n, e.version, e.ttl) for n, e in selected.items())))
        if key == state.last_key and not force:
            return []
        state.last_key = key
        state.last_version = snap.version
        state.sent = selected
        nonce = self.engine.next_nonce()
        response = DiscoveryResponse(version_info=snap.version, type_url=type_url, nonce=nonce)
        for _name, entry in sorted(selected.items()):
            wrap = entry.ttl is not None or self.engine.sotw_wrap
            response.resources.append(_wrap(entry, type_url) if wrap else entry.body)
        return [(type_url, snap.version, nonce, response)]

    def heartbeat(self) -> list[_Out]:
        out: list[_Out] = []
        for type_url, state in sorted(self.types.items()):
            beating = [
                e
                for name, e in sorted(state.sent.items())
                if e.ttl is not None and (state.wildcard or name in state.names)
            ]
            if not beating:
                continue
            nonce = self.engine.next_nonce()
            response = DiscoveryResponse(
                version_info=state.last_version, type_url=type_url, nonce=nonce
            )
            response.resources.extend(_wrap(e, type_url, body=False) for e in beating)
            out.append((type_url, state.last_version, nonce, response))
        return out


_ORDER = {"cds": 0, "eds": 1, "lds": 2, "rds": 3}


def _push_order(type_url: str) -> tuple[int, str]:
    """Push CDS, EDS, LDS, RDS in that order, as Envoy's ADS guidance asks."""
    try:
        alias = resource_type(type_url).alias
    except LookupError:
        alias = None
    return (_ORDER.get(alias or "", 4), type_url)


def _in_glob(name: str, subscribed: set[str]) -> bool:
    """Whether ``name`` lies in a subscribed ``xdstp://.../*`` glob collection."""
    collection = glob_collection_of(name)
    return collection is not None and collection in subscribed


def _is_cds(type_url: str) -> bool:
    try:
        return resource_type(type_url).alias == "cds"
    except LookupError:
        return False


class _DeltaSession(_Session):
    def __init__(self, stream: StreamHandle) -> None:
        super().__init__(stream)
        self.types: dict[str, _DeltaType] = {}

    def on_request(self, request: _Request) -> list[_Out]:
        message = request.message
        assert isinstance(message, DeltaDiscoveryRequest)
        type_url = request.type_url
        state = self.types.setdefault(type_url, _DeltaType())
        first = not state.requested
        state.requested = True
        subscribe = set(message.resource_names_subscribe)
        unsubscribe = set(message.resource_names_unsubscribe)
        initial = dict(message.initial_resource_versions)
        if first:
            state.client_versions = dict(initial)
            if not subscribe:
                state.wildcard = True  # legacy wildcard: first request names nothing
        if "*" in subscribe:
            state.wildcard = True
        if "*" in unsubscribe:
            state.wildcard = False
        state.names |= subscribe - {"*"}
        state.names -= unsubscribe
        for name in unsubscribe:
            state.client_versions.pop(name, None)
            state.ttl_names.discard(name)
        snap = self.view(type_url)
        # Every name subscribed now must be answered, except what the client
        # already holds at the current version (initial_resource_versions).
        # A glob collection (TP1) stands for every resource directly under its path.
        globs = {n for n in subscribe if is_glob_collection(n)}
        named = (subscribe - {"*"} - globs) | {
            n for n in snap.entries if glob_collection_of(n) in globs
        }
        force = {
            name
            for name in named
            if not (
                name in initial
                and name in snap.entries
                and snap.entries[name].version == initial[name]
            )
        }
        return self.on_change(type_url, force=force)

    def on_change(self, type_url: str, *, force: set[str] | None = None) -> list[_Out]:
        state = self.types.get(type_url)
        if state is None or not state.requested:
            return []
        out = self._respond(type_url, state, force or set())
        if out:
            eds = endpoints_type_for(type_url) if _is_cds(type_url) else None
            eds_state = self.types.get(eds) if eds else None
            if eds and eds_state is not None and eds_state.requested:
                everything = set(eds_state.names) | set(eds_state.client_versions)
                out.extend(self._respond(eds, eds_state, everything, only_existing=True))
        return out

    def _respond(
        self, type_url: str, state: _DeltaType, force: set[str], *, only_existing: bool = False
    ) -> list[_Out]:
        snap = self.view(type_url)
        if not snap.is_set:
            return []
        entries = snap.entries
        if state.wildcard:
            wanted = set(entries)
        else:
            wanted = state.names & set(entries)
            globs = {n for n in state.names if is_glob_collection(n)}
            if globs:
                wanted |= {n for n in entries if _in_glob(n, globs)}
        send = sorted(
            name
            for name in wanted | (force & set(entries))
            if name in force or state.client_versions.get(name) != entries[name].version
        )
        removed = sorted(
            name
            for name in state.client_versions
            if name not in entries
            and (state.wildcard or name in state.names or _in_glob(name, state.names))
        )
        if self.engine.report_missing_in_delta and not only_existing:
            removed = sorted(set(removed) | {n for n in force if n not in entries})
        if not send and not removed:
            return []
        nonce = self.engine.next_nonce()
        response = DeltaDiscoveryResponse(
            system_version_info=snap.version, type_url=type_url, nonce=nonce
        )
        for name in send:
            entry = entries[name]
            response.resources.append(_delta_resource(entry))
            state.client_versions[name] = entry.version
            if entry.ttl is not None:
                state.ttl_names.add(name)
            else:
                state.ttl_names.discard(name)
        for name in removed:
            state.client_versions.pop(name, None)
            state.ttl_names.discard(name)
        response.removed_resources.extend(removed)
        return [(type_url, snap.version, nonce, response)]

    def heartbeat(self) -> list[_Out]:
        out: list[_Out] = []
        for type_url, state in sorted(self.types.items()):
            snap = self.view(type_url)
            beating = [
                snap.entries[n]
                for n in sorted(state.ttl_names)
                if n in snap.entries
                and snap.entries[n].ttl is not None
                and snap.entries[n].version == state.client_versions.get(n)
            ]
            if not beating:
                continue
            nonce = self.engine.next_nonce()
            response = DeltaDiscoveryResponse(
                system_version_info=snap.version, type_url=type_url, nonce=nonce
            )
            response.resources.extend(_delta_resource(e, body=False) for e in beating)
            out.append((type_url, snap.version, nonce, response))
        return out
