"""What a check works with: the server, the options, what the server serves, a driver."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.protobuf.any_pb2 import Any as AnyProto

from xds_client.resources import (
    RESOURCE_WRAPPER_TYPE_URL,
    resource_type,
    unwrap,
)
from xds_client.transport import ADS_DELTA_METHOD, ADS_METHOD

from ._kinds import Protocol, Skip, TransportKind, Violation
from ._wire import Ended, RawStream, Response, Wire

if TYPE_CHECKING:
    from ._drivers import Driver

__all__ = ["Context", "Inventory", "Options", "body_name", "names_in"]

CDS = resource_type("cds").type_url
EDS = resource_type("eds").type_url
LDS = resource_type("lds").type_url
RDS = resource_type("rds").type_url
MISSING_NAME = "xds-conformance-missing"
"""A resource name no server is expected to serve."""


@dataclass(frozen=True)
class Options:
    """How the checker talks to the server: node, timeouts, pacing."""

    node_id: str = "xds-conformance"
    """``node.id`` of the checker's requests."""
    cluster: str = "xds-conformance"
    """``node.cluster`` of the checker's requests."""
    second_node_id: str | None = None
    """Another node id the server serves (best: something else), for the per-node check
    (None: skip it)."""
    response_timeout: float = 2.0
    """Seconds to wait for a response the server owes."""
    quiet_period: float = 0.3
    """Seconds of silence that count as "the server sent nothing more"."""
    ttl_window: float = 1.5
    """Seconds to watch for TTL heartbeats."""

    def with_node(self, node_id: str) -> Options:
        """A copy with another ``node_id``."""
        return dataclasses.replace(self, node_id=node_id)

    def node(self, node_id: str | None = None) -> Node:
        return Node(id=node_id or self.node_id, cluster=self.cluster)


@dataclass
class Inventory:
    """What the server serves to the checker's node, found before the checks run."""

    names: dict[str, list[str]] = field(default_factory=dict)
    """Resource names by type URL (CDS, LDS, EDS, RDS), sorted."""
    links: dict[str, tuple[str, str]] = field(default_factory=dict)
    """CDS: (a cluster, its EDS name); LDS: (a listener, its RDS name), where served."""

    def pick(
        self, type_urls: Sequence[str], count: int = 1, *, every: bool = False
    ) -> tuple[str, list[str]]:
        """The first type that has ``count`` names, and those names (``every``: all of its
        names, so that a server which holds a request naming only some still answers);
        Skip if no type has that many."""
        for type_url in type_urls:
            names = self.names.get(type_url, [])
            if len(names) >= count:
                return type_url, names if every else names[:count]
        kinds = "/".join(_kind(t) for t in type_urls)
        raise Skip(f"the server serves fewer than {count} {kinds} resource(s) to this node")


def body_name(type_url: str, body: AnyProto) -> str:
    """The name inside a resource body (``name`` or ``cluster_name``); "" if unknown."""
    try:
        message = resource_type(type_url).decode(body.value)
    except Exception:
        return ""
    for field_name in ("name", "cluster_name"):
        if field_name in message.DESCRIPTOR.fields_by_name:
            return str(getattr(message, field_name))
    return ""


def names_in(response: Response) -> list[str]:
    """The names of the resources a response carries, in order (heartbeats too)."""
    if isinstance(response, DeltaDiscoveryResponse):
        return [r.name for r in response.resources]
    out = []
    for packed in response.resources:
        try:
            item = unwrap(packed)
        except Exception:
            out.append("")
            continue
        if item.name:
            out.append(item.name)
        elif item.body is not None:
            out.append(body_name(response.type_url, item.body))
        else:
            out.append("")
    return out


def is_wrapper(packed: AnyProto) -> bool:
    return packed.type_url == RESOURCE_WRAPPER_TYPE_URL


class Context:
    """One check's view: the protocol and transport it runs on, streams, requests, waits."""

    def __init__(
        self,
        *,
        protocol: Protocol,
        transport: TransportKind,
        options: Options,
        inventory: Inventory,
        wire: Wire,
        driver: Driver | None,
        rest_url: str = "",
    ) -> None:
        self.rest_url = rest_url
        """The REST server's base URL (REST checks only)."""
        self.protocol = protocol
        self.transport = transport
        self.options = options
        self.inventory = inventory
        self.wire = wire
        self.driver = driver

    # -- streams and requests --------------------------------------------------

    def method(self, type_url: str) -> str:
        if self.transport == "ads":
            return ADS_DELTA_METHOD if self.protocol == "delta" else ADS_METHOD
        rtype = resource_type(type_url)
        path = rtype.delta_method if self.protocol == "delta" else rtype.stream_method
        if path is None:
            raise Skip(f"{rtype.alias or type_url} has no per-type service")
        return path

    def open(self, type_url: str, *, own_connection: bool = False) -> RawStream:
        """A new stream that can carry ``type_url`` (the ADS stream, or its own service)."""
        return self.wire.open(
            self.method(type_url), delta=self.protocol == "delta", own_connection=own_connection
        )

    def sotw(
        self,
        type_url: str,
        names: Iterable[str] = (),
        *,
        version: str = "",
        nonce: str = "",
        node_id: str | None = None,
    ) -> DiscoveryRequest:
        return DiscoveryRequest(
            node=self.options.node(node_id),
            type_url=type_url,
            resource_names=list(names),
            version_info=version,
            response_nonce=nonce,
        )

    def ack(
        self, type_url: str, response: DiscoveryResponse, names: Iterable[str]
    ) -> DiscoveryRequest:
        return self.sotw(type_url, names, version=response.version_info, nonce=response.nonce)

    def delta(
        self,
        type_url: str,
        subscribe: Iterable[str] = (),
        unsubscribe: Iterable[str] = (),
        *,
        initial: Mapping[str, str] | None = None,
        nonce: str = "",
        node_id: str | None = None,
    ) -> DeltaDiscoveryRequest:
        return DeltaDiscoveryRequest(
            node=self.options.node(node_id),
            type_url=type_url,
            resource_names_subscribe=list(subscribe),
            resource_names_unsubscribe=list(unsubscribe),
            initial_resource_versions=dict(initial or {}),
            response_nonce=nonce,
        )

    # -- waiting ---------------------------------------------------------------

    async def expect(self, stream: RawStream, type_url: str, what: str) -> Response:
        """The next response of ``type_url``; Violation if none comes or the stream ends."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.response_timeout
        while True:
            item = await stream.recv(max(0.0, deadline - loop.time()))
            if item is None:
                raise Violation(
                    f"no {_kind(type_url)} response {what} "
                    f"within {self.options.response_timeout:g} s"
                )
            if isinstance(item, Ended):
                raise Violation(f"the server ended the stream ({item}) instead of answering {what}")
            if item.type_url == type_url:
                return item

    async def expect_with(
        self, stream: RawStream, type_url: str, names: Iterable[str], what: str
    ) -> Response:
        """The next response of ``type_url`` that carries every one of ``names``."""
        wanted = set(names)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.response_timeout
        while True:
            item = await stream.recv(max(0.0, deadline - loop.time()))
            if item is None:
                raise Violation(
                    f"no {_kind(type_url)} response holding {sorted(wanted)} {what} "
                    f"within {self.options.response_timeout:g} s"
                )
            if isinstance(item, Ended):
                raise Violation(f"the server ended the stream ({item}) instead of answering {what}")
            if item.type_url == type_url and wanted <= set(names_in(item)):
                return item

    async def quiet(self, stream: RawStream, window: float | None = None) -> list[Response]:
        """The responses that come before ``window`` seconds of silence; Violation if it ends."""
        got = await stream.drain(self.options.quiet_period if window is None else window)
        out: list[Response] = []
        for item in got:
            if isinstance(item, Ended):
                raise Violation(f"the server ended the stream ({item})")
            out.append(item)
        return out

    def need_driver(self) -> Driver:
        if self.driver is None:
            raise Skip("needs a push: no driver (give --change-command or a change hook)")
        return self.driver

    async def change(self, action: str, type_url: str, name: str) -> None:
        """Have the driver update or delete a resource, off the event loop."""
        driver = self.need_driver()
        call = driver.update if action == "update" else driver.delete
        await asyncio.to_thread(call, type_url, name)


def _kind(type_url: str) -> str:
    try:
        return (resource_type(type_url).alias or type_url).upper()
    except LookupError:
        return type_url


def is_delta(response: Response) -> bool:
    return isinstance(response, DeltaDiscoveryResponse)
