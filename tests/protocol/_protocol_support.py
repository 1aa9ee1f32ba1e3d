"""Builders and a fake-clock harness for the protocol core tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Resource,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message

from xds_client import resources
from xds_client.protocol import DeltaProtocol, Event, ProtocolConfig, SotwProtocol

NODE = Node(id="node-1", cluster="cluster-1")
WRAPPER = resources.RESOURCE_WRAPPER_TYPE_URL


@dataclass(frozen=True)
class Api:
    """The type URLs of one API generation."""

    name: str
    lds: str
    rds: str
    cds: str
    eds: str
    sds: str


V3 = Api(
    "v3",
    resources.LISTENER,
    resources.ROUTE,
    resources.CLUSTER,
    resources.ENDPOINT,
    resources.SECRET,
)
V2 = Api(
    "v2",
    resources.V2_LISTENER,
    resources.V2_ROUTE,
    resources.V2_CLUSTER,
    resources.V2_ENDPOINT,
    resources.V2_SECRET,
)


def make(type_url: str, name: str, tag: str = "") -> Message:
    """A resource of ``type_url`` called ``name``; different tags give different bytes."""
    msg: Any = resources.message_class_of(type_url)()
    result: Message = msg
    fields = msg.DESCRIPTOR.fields_by_name
    kind = msg.DESCRIPTOR.name
    if "cluster_name" in fields:
        msg.cluster_name = name
        if tag:
            msg.endpoints.add().locality.zone = tag
        return result
    msg.name = name
    # What (validate.rules) demands: a VirtualHost has a domain, a v2 Listener an address.
    if kind == "VirtualHost":
        msg.domains.append("*")
    if kind == "Listener":
        msg.address.socket_address.address = tag or "127.0.0.1"
        msg.address.socket_address.port_value = 10000
    if tag:
        if kind == "Listener":
            pass  # the tag is the address, above
        elif kind == "Cluster":
            msg.alt_stat_name = tag
        elif kind in ("RouteConfiguration", "VirtualHost"):
            msg.response_headers_to_remove.append(tag)
        elif kind == "Secret":
            msg.generic_secret.secret.inline_string = tag
        else:  # pragma: no cover - tests use the kinds above
            raise AssertionError(kind)
    return result


def pack(msg: Message, type_url: str | None = None) -> AnyProto:
    packed = AnyProto()
    packed.Pack(msg)
    if type_url is not None:
        packed.type_url = type_url
    return packed


def bad_any(type_url: str) -> AnyProto:
    """An Any of the right type whose bytes do not parse."""
    return AnyProto(type_url=type_url, value=b"\xff\xff\xff")


def wrap(
    name: str,
    body: Message | AnyProto | None,
    *,
    version: str = "",
    ttl: float | None = None,
    aliases: Sequence[str] = (),
) -> AnyProto:
    """A SotW ``Resource`` wrapper packed in an Any (body None: a heartbeat)."""
    return pack(delta_resource(name, body, version=version, ttl=ttl, aliases=aliases))


def delta_resource(
    name: str,
    body: Message | AnyProto | None,
    *,
    version: str = "",
    ttl: float | None = None,
    aliases: Sequence[str] = (),
) -> Resource:
    res = Resource(name=name, version=version, aliases=list(aliases))
    if body is not None:
        res.resource.CopyFrom(body if isinstance(body, AnyProto) else pack(body))
    if ttl is not None:
        res.ttl.FromNanoseconds(int(ttl * 1e9))
    return res


def sotw_response(
    type_url: str, version: str, nonce: str, resources: Iterable[Message | AnyProto]
) -> DiscoveryResponse:
    resp = DiscoveryResponse(type_url=type_url, version_info=version, nonce=nonce)
    for item in resources:
        resp.resources.append(item if isinstance(item, AnyProto) else pack(item))
    return resp


def delta_response(
    type_url: str,
    nonce: str,
    resources: Iterable[Resource] = (),
    removed: Iterable[str] = (),
    system_version: str = "",
) -> DeltaDiscoveryResponse:
    return DeltaDiscoveryResponse(
        type_url=type_url,
        nonce=nonce,
        system_version_info=system_version,
        resources=list(resources),
        removed_resources=list(removed),
    )


P = TypeVar("P", SotwProtocol, DeltaProtocol)
Req = TypeVar("Req", DiscoveryRequest, DeltaDiscoveryRequest)


class Harness(Generic[P]):
    """A protocol object, a fake clock and a record of what went on the wire.

    In ``ads`` mode another type (SDS) shares the stream, with its own
    subscription and an accepted response, so tests see types walled off.
    """

    def __init__(self, protocol: P, api: Api, mode: str) -> None:
        self.p: P = protocol
        self.api = api
        self.mode = mode
        self.now = 0.0
        self.sent: list[Any] = []

    @property
    def other(self) -> str:
        return self.api.sds

    def start(self) -> list[Any]:
        """Connect (single-type mode) or just flush (ADS mode is already up)."""
        return self.flush() if self.p.is_connected else self.connect()

    def connect(self) -> list[Any]:
        self.p.connected(self.now)
        return self.flush()

    def flush(self) -> list[Any]:
        reqs: list[Any] = self.p.requests_to_send()
        for req in reqs:
            self.p.request_sent(req, self.now)
        self.sent.extend(reqs)
        return reqs

    def advance(self, seconds: float) -> list[Event]:
        self.now += seconds
        events: list[Event] = self.p.tick(self.now)
        return events

    def receive(self, response: Any) -> list[Event]:
        events: list[Event] = self.p.receive(response, self.now)
        return events


def of(type_url: str, requests: Iterable[Req]) -> list[Req]:
    return [r for r in requests if r.type_url == type_url]


def sotw(api: Api, mode: str, **config: Any) -> Harness[SotwProtocol]:
    h = Harness(SotwProtocol(ProtocolConfig(node=NODE, **config)), api, mode)
    if mode == "ads":
        h.p.subscribe(api.sds, ["other"])
        h.connect()
        h.receive(sotw_response(api.sds, "o1", "on1", [make(api.sds, "other")]))
        h.flush()
        h.sent.clear()
    return h


def delta(api: Api, mode: str, **config: Any) -> Harness[DeltaProtocol]:
    h = Harness(DeltaProtocol(ProtocolConfig(node=NODE, **config)), api, mode)
    if mode == "ads":
        h.p.subscribe(api.sds, ["other"])
        h.connect()
        h.receive(
            delta_response(
                api.sds, "on1", [delta_resource("other", make(api.sds, "other"), version="o1")]
            )
        )
        h.flush()
        h.sent.clear()
    return h


def names(events: Iterable[Event], kind: type) -> list[str]:
    return [str(getattr(e, "name", None)) for e in events if isinstance(e, kind)]
