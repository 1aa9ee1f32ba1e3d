"""Servers that break exactly one rule: a gRPC proxy in front of a correct ControlPlane.

Each :class:`Fault` rewrites, drops, adds or holds messages of the streams it
carries, so one check of the suite must fail while every other one still
passes. The proxy keeps nonces straight: a response it makes up carries a nonce
of its own, and requests that answer one are mapped back to what the server sent.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Resource,
    ResourceError,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.unknown_fields import UnknownFieldSet

from xds_client.resources import RESOURCE_WRAPPER_TYPE_URL, resource_type

Request = DiscoveryRequest | DeltaDiscoveryRequest
Response = DiscoveryResponse | DeltaDiscoveryResponse

CDS = resource_type("cds").type_url
EDS = resource_type("eds").type_url
LDS = resource_type("lds").type_url
RDS = resource_type("rds").type_url
_PREFIX = "type.googleapis.com/"
_nonces = itertools.count(1)


@dataclass(frozen=True)
class _Abort:
    code: grpc.StatusCode
    details: str


@dataclass
class Flow:
    """One proxied stream: what the fault needs to remember and the ways to act on it."""

    method: str
    delta: bool
    down: queue.SimpleQueue[bytes | _Abort | None]
    ads: bool = False
    peer: str = ""
    hung: bool = False
    nonce_map: dict[str, str] = field(default_factory=dict)  # ours -> the server's
    known_nonces: set[str] = field(default_factory=set)
    last: dict[str, Response] = field(default_factory=dict)  # by type URL, not heartbeats
    names: dict[str, set[str]] = field(default_factory=dict)
    ever: dict[str, set[str]] = field(default_factory=dict)
    requested: set[str] = field(default_factory=set)
    state: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, response: Response) -> None:
        self.down.put(response.SerializeToString())

    def resend(self, original: Response) -> None:
        """Send ``original`` again under a nonce of ours (mapped back on the way in)."""
        copy = type(original).FromString(original.SerializeToString())
        copy.nonce = f"proxy-{next(_nonces)}"
        self.nonce_map[copy.nonce] = original.nonce
        self.known_nonces.add(copy.nonce)
        self.reply(copy)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.down.put(_Abort(code, details))


class Fault:
    """Passes everything through; subclasses break one rule."""

    check_id: str = ""
    ads_only = False

    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        return [request]

    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        return [response]


def _sotw_names(request: Request) -> set[str]:
    return set(request.resource_names) if isinstance(request, DiscoveryRequest) else set()


def _is_ack(request: Request) -> bool:
    return bool(request.response_nonce) and not request.HasField("error_detail")


# -- faults of both protocols ------------------------------------------------------------


class KillOnNack(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if request.HasField("error_detail"):
            flow.abort(grpc.StatusCode.INTERNAL, "a NACK ends this server's stream")
            return []
        return [request]


class KillOnUnknownType(Fault):
    ads_only = True

    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if request.type_url.startswith(_PREFIX):
            try:
                resource_type(request.type_url)
            except LookupError:
                flow.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown type URL")
                return []
        return [request]


class HangOnBadTypeUrl(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if request.type_url and not request.type_url.startswith(_PREFIX):
            flow.hung = True
        return [] if flow.hung else [request]


class HangOnHugeName(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        names = (
            list(request.resource_names_subscribe)
            if isinstance(request, DeltaDiscoveryRequest)
            else list(request.resource_names)
        )
        if any(len(n) > 65536 for n in names):
            flow.hung = True
        return [] if flow.hung else [request]


class RejectUnknownFields(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if len(UnknownFieldSet(request)):
            flow.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown fields")
            return []
        return [request]


class WrongAnyType(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        if isinstance(response, DeltaDiscoveryResponse):
            for res in response.resources:
                if res.HasField("resource"):
                    res.resource.type_url = _PREFIX + "google.protobuf.Empty"
        else:
            for packed in response.resources:
                if packed.type_url != RESOURCE_WRAPPER_TYPE_URL:
                    packed.type_url = _PREFIX + "google.protobuf.Empty"
        return [response]


class DuplicateNames(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        if isinstance(response, DeltaDiscoveryResponse):
            if response.resources:
                response.resources.append(response.resources[0])
        elif response.resources:
            response.resources.append(response.resources[0])
        return [response]


class IgnoreNewNames(Fault):
    """A later request that adds a name never subscribed on the stream goes unanswered."""

    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        type_url = request.type_url
        if type_url not in (EDS, RDS):
            return [request]
        if isinstance(request, DeltaDiscoveryRequest):
            new = set(request.resource_names_subscribe)
        else:
            new = _sotw_names(request)
        ever = flow.ever.setdefault(type_url, set())
        first = type_url not in flow.requested
        flow.requested.add(type_url)
        added = new - ever
        ever |= new
        if not first and added:
            return []
        return [request]


class MalformedResourceErrors(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        names = (
            set(request.resource_names_subscribe)
            if isinstance(request, DeltaDiscoveryRequest)
            else _sotw_names(request)
        )
        if names == {"xds-conformance-missing"} and request.type_url.startswith(_PREFIX):
            error = ResourceError()
            error.error_detail.code = 5
            error.error_detail.message = "not found (but the name is missing)"
            nonce = f"proxy-{next(_nonces)}"
            flow.known_nonces.add(nonce)
            response: Response
            if flow.delta:
                response = DeltaDiscoveryResponse(type_url=request.type_url, nonce=nonce)
            else:
                response = DiscoveryResponse(
                    type_url=request.type_url, nonce=nonce, version_info="proxy"
                )
            response.resource_errors.append(error)
            flow.reply(response)
        return [request]


class BadHeartbeats(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        if isinstance(response, DeltaDiscoveryResponse):
            for res in response.resources:
                if not res.HasField("resource"):
                    res.version = "not-the-held-version"
        elif response.resources and all(_is_heartbeat(p) for p in response.resources):
            response.version_info = "not-the-held-version"
        return [response]


def _heartbeats_only(response: Response) -> bool:
    if isinstance(response, DeltaDiscoveryResponse):
        return bool(response.resources) and not any(
            r.HasField("resource") for r in response.resources
        )
    return bool(response.resources) and all(_is_heartbeat(p) for p in response.resources)


def _is_heartbeat(packed: AnyProto) -> bool:
    if packed.type_url != RESOURCE_WRAPPER_TYPE_URL:
        return False
    return not Resource.FromString(packed.value).HasField("resource")


class NodeTiedToConnection(Fault):
    """Serves every stream of a connection as the node of its first request."""

    def __init__(self) -> None:
        self._nodes: dict[str, str] = {}
        self._lock = threading.Lock()

    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if request.HasField("node"):
            with self._lock:
                first = self._nodes.setdefault(flow.peer, request.node.id)
            request.node.id = first
        return [request]


# -- SotW faults -------------------------------------------------------------------------


class NoVersion(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        assert isinstance(response, DiscoveryResponse)
        response.version_info = ""
        return [response]


class ResendAfterAck(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        last = flow.last.get(request.type_url)
        if (
            isinstance(request, DiscoveryRequest)
            and isinstance(last, DiscoveryResponse)
            and _is_ack(request)
            and request.version_info == last.version_info
        ):
            flow.resend(last)
        return [request]


class RepeatAfterNack(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        last = flow.last.get(request.type_url)
        if request.HasField("error_detail") and last is not None:
            flow.resend(last)
        return [request]


class SilentOnResubscribe(Fault):
    """The ControlPlane's old bug: a name subscribed again at the same version is not sent."""

    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        names = _sotw_names(request)
        before = flow.names.get(request.type_url, set())
        ever = flow.ever.setdefault(request.type_url, set())
        if (names - before) & ever:
            flow.state[request.type_url] = "drop-next"
        ever |= names
        flow.names[request.type_url] = names
        return [request]

    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        if flow.state.pop(response.type_url, None) == "drop-next":
            return []
        return [response]


class OnlyChangedInFullState(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        if response.type_url not in (CDS, LDS) or not isinstance(response, DiscoveryResponse):
            return [response]
        sent: set[bytes] = flow.state.setdefault(response.type_url, set())
        fresh = [p for p in response.resources if p.SerializeToString() not in sent]
        sent.update(p.SerializeToString() for p in response.resources)
        del response.resources[:]
        response.resources.extend(fresh)
        return [response]


class LeakExtraNames(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        assert isinstance(response, DiscoveryResponse)
        if all(_is_heartbeat(p) for p in response.resources):
            return [response]  # a heartbeat stays one
        extra: Any
        if response.type_url == EDS:
            extra = ClusterLoadAssignment(cluster_name="leaked-extra")
        elif response.type_url == RDS:
            extra = RouteConfiguration(name="leaked-extra")
        else:
            return [response]
        packed = AnyProto()
        packed.Pack(extra)
        response.resources.append(packed)
        return [response]


class NoLegacyWildcard(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        first = request.type_url not in flow.requested
        flow.requested.add(request.type_url)
        if isinstance(request, DiscoveryRequest) and first and not request.resource_names:
            request.resource_names.append("not-a-wildcard")
        return [request]


class StarIsAName(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if isinstance(request, DiscoveryRequest) and list(request.resource_names) == ["*"]:
            request.resource_names[:] = ["literal-star"]
        return [request]


class NamesCancelStar(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if not isinstance(request, DiscoveryRequest):
            return [request]
        names = list(request.resource_names)
        if "*" in names and len(names) > 1:
            request.resource_names[:] = [n for n in names if n != "*"]
        return [request]


class IgnoreUnknownNonce(Fault):
    """Drops a request whose nonce this stream never sent (a reconnect's stale one)."""

    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if request.response_nonce and request.response_nonce not in flow.known_nonces:
            return []
        return [request]


class EdsBeforeCds(Fault):
    ads_only = True

    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        held = flow.state.get("held")
        if response.type_url == CDS and flow.ads:
            flow.state["held"] = response
            timer = threading.Timer(1.0, self._flush, (flow, response))
            timer.daemon = True
            timer.start()
            return []
        if response.type_url == EDS and held is not None:
            flow.state.pop("held", None)
            return [response, held]
        return [response]

    @staticmethod
    def _flush(flow: Flow, response: Response) -> None:
        with flow.lock:
            if flow.state.get("held") is response:
                flow.state.pop("held")
                flow.known_nonces.add(response.nonce)
                flow.last[response.type_url] = response
                flow.reply(response)


# -- delta faults ------------------------------------------------------------------------


class NoDeltaNonce(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        response.nonce = ""
        return [response]


class NoVersionsForWildcard(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if isinstance(request, DeltaDiscoveryRequest) and "*" in request.resource_names_subscribe:
            flow.state.setdefault("wildcard", set()).add(request.type_url)
        return [request]

    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        assert isinstance(response, DeltaDiscoveryResponse)
        if response.type_url in flow.state.get("wildcard", set()):
            for res in response.resources:
                res.version = ""
        return [response]


class IgnoreInitialVersions(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if isinstance(request, DeltaDiscoveryRequest):
            request.initial_resource_versions.clear()
        return [request]


class NoRemovedResources(Fault):
    def on_response(self, flow: Flow, response: Response) -> list[Response]:
        assert isinstance(response, DeltaDiscoveryResponse)
        if response.removed_resources:
            del response.removed_resources[:]
            if not response.resources:
                return []
        return [response]


class UnsubscribeIgnored(Fault):
    def on_request(self, flow: Flow, raw: bytes, request: Request) -> list[bytes | Request]:
        if isinstance(request, DeltaDiscoveryRequest):
            del request.resource_names_unsubscribe[:]
        return [request]


FAULTS: dict[str, type[Fault]] = {
    "sotw-response-nonce-version": NoVersion,
    "sotw-ack-no-resend": ResendAfterAck,
    "sotw-nack-keeps-stream": KillOnNack,
    "sotw-nack-no-repeat": RepeatAfterNack,
    "sotw-subscribe-answered": IgnoreNewNames,
    "sotw-resubscribe-answered": SilentOnResubscribe,
    "sotw-full-state": OnlyChangedInFullState,
    "sotw-only-requested": LeakExtraNames,
    "sotw-wildcard-legacy": NoLegacyWildcard,
    "sotw-wildcard-explicit": StarIsAName,
    "sotw-wildcard-mixed": NamesCancelStar,
    "sotw-any-type-url": WrongAnyType,
    "sotw-no-duplicate-names": DuplicateNames,
    "sotw-reconnect-stale": IgnoreUnknownNonce,
    "sotw-unknown-type": KillOnUnknownType,
    "sotw-malformed-type-url": HangOnBadTypeUrl,
    "sotw-huge-name": HangOnHugeName,
    "sotw-unknown-fields": RejectUnknownFields,
    "sotw-update-order": EdsBeforeCds,
    "sotw-ttl-heartbeat": BadHeartbeats,
    "sotw-resource-errors": MalformedResourceErrors,
    "delta-nonce": NoDeltaNonce,
    "delta-resource-versions": NoVersionsForWildcard,
    "delta-subscribe-answered": IgnoreNewNames,
    "delta-initial-versions": IgnoreInitialVersions,
    "delta-removed-on-delete": NoRemovedResources,
    "delta-unsubscribe-stops": UnsubscribeIgnored,
    "delta-nack-keeps-stream": KillOnNack,
    "delta-any-type-url": WrongAnyType,
    "delta-no-duplicate-names": DuplicateNames,
    "delta-unknown-type": KillOnUnknownType,
    "delta-malformed-type-url": HangOnBadTypeUrl,
    "delta-huge-name": HangOnHugeName,
    "delta-unknown-fields": RejectUnknownFields,
    "delta-ttl-heartbeat": BadHeartbeats,
    "delta-resource-errors": MalformedResourceErrors,
    "sotw-per-node": NodeTiedToConnection,
    "delta-per-node": NodeTiedToConnection,
}


def _identity(data: bytes) -> bytes:
    return data


class MutatingProxy(grpc.GenericRpcHandler):
    """A gRPC server on 127.0.0.1 that carries every stream to ``upstream`` through a fault."""

    def __init__(self, upstream: str, fault: Fault) -> None:
        self.fault = fault
        self._channel = grpc.insecure_channel(upstream)
        self._executor = ThreadPoolExecutor(64, thread_name_prefix="mutant")
        self._server = grpc.server(
            self._executor,
            handlers=[self],
            options=[("grpc.so_reuseport", 0)],
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def service(
        self, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        method = details.method
        if not isinstance(method, str) or not method.startswith("/envoy.service."):
            return None

        def behave(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            return self._carry(method, requests, context)

        return grpc.stream_stream_rpc_method_handler(
            behave, request_deserializer=_identity, response_serializer=_identity
        )

    def _carry(
        self, method: str, requests: Iterator[bytes], context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        delta = "Delta" in method
        flow = Flow(
            method, delta, queue.SimpleQueue(), ads="Aggregated" in method, peer=context.peer()
        )
        up: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        call = self._channel.stream_stream(
            method, request_serializer=_identity, response_deserializer=_identity
        )(iter(up.get, None))
        parse_in = DeltaDiscoveryRequest.FromString if delta else DiscoveryRequest.FromString
        parse_out = DeltaDiscoveryResponse.FromString if delta else DiscoveryResponse.FromString

        def read_down() -> None:
            try:
                for raw in requests:
                    request = parse_in(raw)
                    with flow.lock:
                        if flow.hung:
                            continue
                        out = self.fault.on_request(flow, raw, request)
                        for item in out:
                            if isinstance(item, bytes):
                                up.put(item)
                                continue
                            ours = item.response_nonce
                            if ours in flow.nonce_map:
                                item.response_nonce = flow.nonce_map[ours]
                            up.put(item.SerializeToString())
            except Exception:  # the client went away
                pass
            up.put(None)

        def read_up() -> None:
            try:
                for raw in call:
                    response = parse_out(raw)
                    with flow.lock:
                        if flow.hung:
                            continue
                        for item in self.fault.on_response(flow, response):
                            flow.known_nonces.add(item.nonce)
                            if not _heartbeats_only(item):
                                flow.last[item.type_url] = item
                            flow.reply(item)
            except grpc.RpcError as exc:
                code = exc.code()
                if code != grpc.StatusCode.CANCELLED:
                    flow.abort(code, exc.details() or "")
            flow.down.put(None)

        readers = [threading.Thread(target=f, daemon=True) for f in (read_down, read_up)]
        for thread in readers:
            thread.start()
        self._threads += readers
        try:
            while True:
                try:
                    item = flow.down.get(timeout=0.2)
                except queue.Empty:
                    if not context.is_active():
                        return
                    continue
                if item is None:
                    return
                if isinstance(item, _Abort):
                    context.abort(item.code, item.details)
                yield item
        finally:
            call.cancel()

    def close(self) -> None:
        self._server.stop(grace=None).wait(5)
        self._channel.close()
        self._executor.shutdown(wait=False)
        for thread in self._threads:
            thread.join(timeout=2)
