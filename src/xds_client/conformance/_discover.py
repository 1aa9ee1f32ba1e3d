"""Finding what the server serves, before the checks run.

The checker asks for every Cluster and Listener (the legacy wildcard, then
``*``), follows EDS clusters to their endpoint names and HTTP connection
managers to their route names, and asks for those: the checks then pick names
the server really serves.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

import grpc
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2 import (  # noqa: E501
    HttpConnectionManager,
)
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import DecodeError

from xds_client.errors import ServerProtocolError, TransportError
from xds_client.resources import unwrap

from ._context import CDS, EDS, LDS, RDS, Context, Inventory, names_in
from ._model import Violation
from ._wire import Ended, Response

__all__ = ["ServiceNotOfferedError", "discover"]

_HCM = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"


class ServiceNotOfferedError(TransportError):
    """The server does not implement the service (UNIMPLEMENTED): its checks are skipped."""


def _bodies(response: Response) -> list[AnyProto]:
    if isinstance(response, DeltaDiscoveryResponse):
        return [r.resource for r in response.resources if r.HasField("resource")]
    out = []
    for packed in response.resources:
        try:
            body = unwrap(packed).body
        except Exception:
            continue
        if body is not None:
            out.append(body)
    return out


M = TypeVar("M", Cluster, Listener)


def _parse(cls: type[M], body: AnyProto) -> M | None:
    # Leniently, whatever the Any's type URL says: another check judges that.
    try:
        return cls.FromString(body.value)
    except DecodeError:
        return None


def _eds_names(response: Response) -> dict[str, str]:
    found: dict[str, str] = {}
    for body in _bodies(response):
        cluster = _parse(Cluster, body)
        if cluster is None:
            continue
        is_eds = (
            cluster.WhichOneof("cluster_discovery_type") == "type" and cluster.type == Cluster.EDS
        )
        if is_eds:
            found[cluster.name] = cluster.eds_cluster_config.service_name or cluster.name
    return found


def _rds_names(response: Response) -> dict[str, str]:
    found: dict[str, str] = {}
    for body in _bodies(response):
        listener = _parse(Listener, body)
        if listener is None:
            continue
        packed = [listener.api_listener.api_listener] if listener.HasField("api_listener") else []
        packed += [f.typed_config for chain in listener.filter_chains for f in chain.filters]
        for config in packed:
            hcm = HttpConnectionManager()
            unpacked = config.type_url.endswith(_HCM) and config.Unpack(hcm)
            if unpacked and hcm.WhichOneof("route_specifier") == "rds":
                found.setdefault(listener.name, hcm.rds.route_config_name)
    return found


async def _ask_once(
    ctx: Context, type_url: str, names: list[str], ends: list[Ended]
) -> Response | None:
    stream = ctx.open(type_url)
    if ctx.protocol == "delta":
        await stream.send(ctx.delta(type_url, names))
    else:
        await stream.send(ctx.sotw(type_url, names))
    try:
        return await ctx.expect(stream, type_url, "while finding what the server serves")
    except Violation:
        if stream.ended is not None:
            ends.append(stream.ended)
        return None
    finally:
        await stream.close()


def _status_lost(end: Ended) -> bool:
    """grpc.aio reports this when a write races the end of the call (a server refusing the
    stream at once, for a bad token say): the server's own status is lost."""
    return end.code == grpc.StatusCode.INTERNAL and end.details == "Internal error from Core"


async def _status_without_writing(ctx: Context) -> Ended:
    """The status of a stream the checker writes nothing to: a server that refuses every
    stream says why here, with no write to race its answer."""
    stream = ctx.open(CDS)
    try:
        end = await stream.recv(ctx.options.response_timeout)
    finally:
        await stream.close()
    if isinstance(end, Ended):
        return end
    return Ended(grpc.StatusCode.INTERNAL, "Internal error from Core (a write raced the end)")


async def _ask(ctx: Context, type_url: str, names: list[str], ends: list[Ended]) -> Response | None:
    """An answer to a first request for ``names`` (none: the legacy wildcard, and ``*``)."""
    attempts = [names] if names else [[], ["*"]]
    answers = await asyncio.gather(*(_ask_once(ctx, type_url, a, ends) for a in attempts))
    return next((a for a in answers if a is not None and names_in(a)), None)


async def discover(ctx: Context) -> Inventory:
    """What the server serves to the checker's node (names by type, and their links)."""
    inventory = Inventory()
    children: dict[str, dict[str, str]] = {}
    ends: list[Ended] = []
    parents = await asyncio.gather(_ask(ctx, CDS, [], ends), _ask(ctx, LDS, [], ends))
    for (parent, child, follow), response in zip(
        ((CDS, EDS, _eds_names), (LDS, RDS, _rds_names)), parents, strict=True
    ):
        if response is None:
            continue
        inventory.names[parent] = sorted({n for n in names_in(response) if n})
        children[child] = follow(response)

    async def ask_child(child: str) -> Response | None:
        wanted = sorted(set(children.get(child, {}).values()))
        return await _ask(ctx, child, wanted, ends)

    answers = await asyncio.gather(ask_child(EDS), ask_child(RDS))
    for child, response in zip((EDS, RDS), answers, strict=True):
        if response is None:
            continue
        served = {n for n in names_in(response) if n}
        inventory.names[child] = sorted(served)
        parent = CDS if child == EDS else LDS
        for parent_name, child_name in sorted(children.get(child, {}).items()):
            if child_name in served:
                inventory.links[parent] = (parent_name, child_name)
                break
    if not inventory.names:
        # Every check would skip: that is no verdict. Say why there is none.
        method = ctx.method(CDS)
        if ends and all(e.code == grpc.StatusCode.UNIMPLEMENTED for e in ends):
            raise ServiceNotOfferedError(f"the server does not offer {method}: {ends[0]}")
        if ends:
            told = [e for e in ends if not _status_lost(e)]
            end = told[0] if told else await _status_without_writing(ctx)
            raise TransportError(f"{method}: the server ended every stream: {end}")
        raise ServerProtocolError(
            f"{method}: the server answered no CDS, LDS, EDS or RDS request of node "
            f"{ctx.options.node_id!r} within {ctx.options.response_timeout:g} s "
            "(is that a node it serves? see --node-id)"
        )
    return inventory
