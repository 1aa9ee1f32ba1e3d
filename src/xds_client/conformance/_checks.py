"""The checks: one function per rule, registered with its id, rule, source and level.

Each check opens its own streams (a :class:`~._context.Context` gives them),
sends what the rule is about, and raises :class:`~._model.Violation` with a
message naming what the server did instead; :class:`~._model.Skip` when the
server serves too little to try it, or a push is needed and no driver is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryResponse,
    DiscoveryResponse,
    Resource,
)
from google.rpc.status_pb2 import Status

from ._context import CDS, EDS, LDS, MISSING_NAME, RDS, Context, is_wrapper, names_in
from ._model import Check, Level, Protocol, Skip, TransportKind, Violation
from ._wire import Ended, RawStream, Request, Response

__all__ = ["CHECKS"]

CHECKS: list[Check] = []

_PROTOCOL = "xds_protocol.rst"
ACK_NACK = f"{_PROTOCOL}, ACK/NACK and resource type instance version"
WHEN = f"{_PROTOCOL}, When to send an update"
WHICH = f"{_PROTOCOL}, How the client specifies what resources to return"
WILDCARD = f"{_PROTOCOL}, How the client specifies what resources to return (wildcard)"
FULL_STATE = f"{_PROTOCOL}, Grouping Resources into Responses"
DUPLICATES = f"{_PROTOCOL}, Duplicate Resource Names"
DELETING = f"{_PROTOCOL}, Deleting Resources"
RECONNECT = f"{_PROTOCOL}, ACK/NACK and resource type instance version (a new stream)"
CONSISTENCY = f"{_PROTOCOL}, Eventual consistency considerations"
DELTA = f"{_PROTOCOL}, Incremental xDS"
DELTA_SUBSCRIBE = f"{_PROTOCOL}, Incremental xDS: Subscribing to Resources"
DELTA_UNSUBSCRIBE = f"{_PROTOCOL}, Incremental xDS: Unsubscribing from Resources"
TTL = f"{_PROTOCOL}, TTL"
TP3 = "xRFC TP3 (xDS error propagation), ResourceError"
GRPC_STATUS = "gRPC status codes; gRFC A57 (a server ends a stream with a status)"
UNKNOWN_FIELDS = "Protocol Buffers (proto3): parsers keep unknown fields; discovery.proto"
ANY_TYPE = "discovery.proto, DiscoveryResponse.type_url and Resource"
UNKNOWN_TYPE = f"{_PROTOCOL}, Aggregated Discovery Service"
PER_NODE = f"{_PROTOCOL}, How the client specifies what resources to return (by node)"

ORDERED = (CDS, LDS, EDS, RDS)
NAMED_FIRST = (EDS, RDS, CDS, LDS)
UNKNOWN_TYPE_URL = "type.googleapis.com/xds.conformance.v1.NoSuchType"
HUGE_NAME_BYTES = 1 << 20
# Field numbers no discovery message uses: a varint and a string.
_UNKNOWN_FIELDS = b"\xc0\x3e\x01" + b"\xca\x3e\x0bconformance"

Runner = Callable[[Context], Awaitable[str | None]]


def check(
    id: str,
    rule: str,
    source: str,
    level: Level,
    protocol: Protocol,
    *,
    needs_push: bool = False,
    transports: tuple[TransportKind, ...] = ("ads", "per-type"),
) -> Callable[[Runner], Runner]:
    """Register the decorated coroutine as a check."""

    def register(run: Runner) -> Runner:
        CHECKS.append(Check(id, rule, source, level, protocol, run, needs_push, transports))
        return run

    return register


# -- shared steps ------------------------------------------------------------------


async def _subscribe(
    ctx: Context, stream: RawStream, type_url: str, names: Iterable[str], what: str = ""
) -> Response:
    """First request of a type on ``stream`` for ``names``; the response that holds them."""
    names = list(names)
    if ctx.protocol == "delta":
        await stream.send(ctx.delta(type_url, names))
    else:
        await stream.send(ctx.sotw(type_url, names))
    return await ctx.expect_with(stream, type_url, names, what or f"to a request for {names}")


async def _ack(ctx: Context, stream: RawStream, response: Response, names: Iterable[str]) -> None:
    if isinstance(response, DeltaDiscoveryResponse):
        await stream.send(ctx.delta(response.type_url, nonce=response.nonce))
    else:
        await stream.send(ctx.ack(response.type_url, response, names))


def _version(response: Response) -> str:
    if isinstance(response, DeltaDiscoveryResponse):
        return response.system_version_info
    return response.version_info


async def _all_types(ctx: Context) -> list[Response]:
    """One response per type the server serves: wildcard CDS/LDS, named EDS/RDS."""
    got: list[Response] = []
    ads: RawStream | None = None
    for type_url in ORDERED:
        names = ctx.inventory.names.get(type_url)
        if not names:
            continue
        if ctx.transport == "ads":
            ads = ads or ctx.open(type_url)
            stream = ads
        else:
            stream = ctx.open(type_url)
        wildcard = type_url in (CDS, LDS)
        if ctx.protocol == "delta":
            await stream.send(ctx.delta(type_url, ["*"] if wildcard else names))
        else:
            await stream.send(ctx.sotw(type_url, [] if wildcard else names))
        got.append(await ctx.expect(stream, type_url, f"to a request for {_alias(type_url)}"))
    if not got:
        raise Skip("the server serves nothing to this node")
    return got


def _alias(type_url: str) -> str:
    return {CDS: "CDS", LDS: "LDS", EDS: "EDS", RDS: "RDS"}.get(type_url, type_url)


async def _survives(
    ctx: Context,
    stream: RawStream,
    bad: Request | bytes,
    type_url: str,
    what: str,
) -> str | None:
    """Send ``bad``, then a good request: answered, or the stream ended with an error status."""
    names = ctx.inventory.names.get(type_url, [])
    written = await stream.send(bad, timeout=ctx.options.response_timeout)
    good = ctx.delta(type_url, names) if ctx.protocol == "delta" else ctx.sotw(type_url, names)
    if written:
        await stream.send(good, timeout=ctx.options.response_timeout)
    if stream.ended is None and written:
        loop_item = await _next_of(ctx, stream, type_url)
    else:
        loop_item = stream.ended
    if isinstance(loop_item, Ended):
        if loop_item.code.name == "OK":
            raise Violation(f"the server ended the stream with OK, no error, after {what}")
        return f"ended the stream with {loop_item}"
    if loop_item is None:
        if not written:
            raise Violation(f"the server stopped reading the stream after {what} (no status)")
        raise Violation(
            f"after {what}, the server neither answered a valid request nor ended the stream "
            f"within {ctx.options.response_timeout:g} s (a hang)"
        )
    return "answered the next request"


async def _next_of(ctx: Context, stream: RawStream, type_url: str) -> Response | Ended | None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.options.response_timeout
    while True:
        item = await stream.recv(max(0.0, deadline - loop.time()))
        if item is None or isinstance(item, Ended) or item.type_url == type_url:
            return item


def _type_errors(response: Response, type_url: str) -> str | None:
    if response.type_url != type_url:
        return f"a response to a {_alias(type_url)} request has type_url {response.type_url!r}"
    if isinstance(response, DeltaDiscoveryResponse):
        for res in response.resources:
            if res.HasField("resource") and res.resource.type_url != type_url:
                return f"resource {res.name!r} is an Any of {res.resource.type_url!r}"
        return None
    for packed in response.resources:
        if is_wrapper(packed):
            inner = Resource.FromString(packed.value)
            if inner.HasField("resource") and inner.resource.type_url != type_url:
                return f"resource {inner.name!r} wraps an Any of {inner.resource.type_url!r}"
        elif packed.type_url != type_url:
            return (
                f"a resource is an Any of {packed.type_url!r}, the response's type is {type_url!r}"
            )
    return None


def _only_heartbeats(response: Response) -> bool:
    """A TTL refresh: every resource a Resource without a body (not a resend)."""
    if isinstance(response, DeltaDiscoveryResponse):
        bodies = [r.HasField("resource") for r in response.resources]
    else:
        bodies = [
            not is_wrapper(p) or Resource.FromString(p.value).HasField("resource")
            for p in response.resources
        ]
    return bool(bodies) and not any(bodies)


def _duplicates(response: Response) -> list[str]:
    names = names_in(response)
    return sorted({n for n in names if names.count(n) > 1})


def _resource_error_problems(responses: Iterable[Response]) -> list[str]:
    problems = []
    for response in responses:
        for error in response.resource_errors:
            if not error.resource_name.name:
                problems.append("a resource_errors entry names no resource")
            if error.error_detail.code == 0:
                problems.append(
                    f"the resource_errors entry of {error.resource_name.name!r} has code 0 (OK)"
                )
    return problems


# -- checks for both protocols -------------------------------------------------------


def _both(suffix: str, rule: str, source: str, level: Level, run: Runner, **extra: Any) -> None:
    protocols: tuple[Protocol, ...] = ("sotw", "delta")
    for protocol in protocols:
        check(f"{protocol}-{suffix}", rule, source, level, protocol, **extra)(run)


async def _any_type_url(ctx: Context) -> str | None:
    for response in await _all_types(ctx):
        problem = _type_errors(response, response.type_url)
        if problem:
            raise Violation(problem)
    return None


_both(
    "any-type-url",
    "Every resource in a response is an Any of the response's type URL (inside a Resource "
    "wrapper, its body is).",
    ANY_TYPE,
    "MUST",
    _any_type_url,
)


async def _no_duplicates(ctx: Context) -> str | None:
    for response in await _all_types(ctx):
        dup = _duplicates(response)
        if dup:
            raise Violation(f"a {_alias(response.type_url)} response names {dup} more than once")
    return None


_both(
    "no-duplicate-names",
    "No resource name appears twice in one response.",
    DUPLICATES,
    "MUST",
    _no_duplicates,
)


async def _unknown_type(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(ORDERED, every=True)
    stream = ctx.open(type_url)
    if ctx.protocol == "delta":
        await stream.send(ctx.delta(UNKNOWN_TYPE_URL, [MISSING_NAME]))
    else:
        await stream.send(ctx.sotw(UNKNOWN_TYPE_URL, [MISSING_NAME]))
    await ctx.quiet(stream)
    await _subscribe(ctx, stream, type_url, names, "after a request for an unknown type URL")
    return None


_both(
    "unknown-type",
    "A request for a type URL the server does not know leaves the ADS stream working.",
    UNKNOWN_TYPE,
    "SHOULD",
    _unknown_type,
    transports=("ads",),
)


async def _bad_type_url(ctx: Context) -> str | None:
    type_url, _ = ctx.inventory.pick(ORDERED)
    stream = ctx.open(type_url)
    bad: Request
    if ctx.protocol == "delta":
        bad = ctx.delta("not a type URL", [MISSING_NAME])
    else:
        bad = ctx.sotw("not a type URL", [MISSING_NAME])
    return await _survives(ctx, stream, bad, type_url, "a request with a malformed type URL")


_both(
    "malformed-type-url",
    "A request with a malformed type URL gets a gRPC error status or is ignored, never a hang.",
    GRPC_STATUS,
    "MUST",
    _bad_type_url,
)


async def _huge_name(ctx: Context) -> str | None:
    type_url, _ = ctx.inventory.pick(ORDERED)
    stream = ctx.open(type_url)
    name = "x" * HUGE_NAME_BYTES
    bad: Request = (
        ctx.delta(type_url, [name]) if ctx.protocol == "delta" else ctx.sotw(type_url, [name])
    )
    return await _survives(ctx, stream, bad, type_url, "a request naming a 1 MiB resource name")


_both(
    "huge-name",
    "A request with a 1 MiB resource name gets a gRPC error status or an answer, never a hang.",
    GRPC_STATUS,
    "MUST",
    _huge_name,
)


async def _unknown_fields(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(ORDERED, every=True)
    stream = ctx.open(type_url)
    request: Any = (
        ctx.delta(type_url, names) if ctx.protocol == "delta" else ctx.sotw(type_url, names)
    )
    await stream.send(request.SerializeToString() + _UNKNOWN_FIELDS)
    await ctx.expect_with(stream, type_url, names, "to a request carrying unknown fields")
    return None


_both(
    "unknown-fields",
    "A request carrying fields the server does not know is answered as if they were absent.",
    UNKNOWN_FIELDS,
    "MUST",
    _unknown_fields,
)


async def _nack_keeps_stream(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(ORDERED, every=True)
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, names)
    await stream.send(_nack(ctx, first, names))
    await ctx.quiet(stream)  # Violation if the stream ends
    return None


def _nack(ctx: Context, response: Response, names: list[str]) -> Request:
    error = Status(code=3, message="rejected on purpose by the conformance checker")
    request: Request
    if isinstance(response, DeltaDiscoveryResponse):
        request = ctx.delta(response.type_url, nonce=response.nonce)
    else:
        request = ctx.sotw(response.type_url, names, nonce=response.nonce)
    request.error_detail.CopyFrom(error)
    return request


_both(
    "nack-keeps-stream",
    "After a NACK the server keeps the stream open.",
    ACK_NACK,
    "MUST",
    _nack_keeps_stream,
)


async def _resource_errors(ctx: Context) -> str | None:
    type_url, _ = ctx.inventory.pick(NAMED_FIRST)
    stream = ctx.open(type_url)
    if ctx.protocol == "delta":
        await stream.send(ctx.delta(type_url, [MISSING_NAME]))
    else:
        await stream.send(ctx.sotw(type_url, [MISSING_NAME]))
    responses = await ctx.quiet(stream, max(ctx.options.quiet_period, 0.5))
    problems = _resource_error_problems(responses)
    if problems:
        raise Violation("; ".join(problems))
    if any(r.resource_errors for r in responses):
        return "resource_errors sent and well formed"
    return "no resource_errors sent"


_both(
    "resource-errors",
    "resource_errors, when sent, name a resource and carry a non-OK status.",
    TP3,
    "MUST",
    _resource_errors,
)


async def _per_node(ctx: Context) -> str | None:
    second = ctx.options.second_node_id
    if not second:
        raise Skip("needs a second node id the server serves (--second-node-id)")
    type_url = CDS if ctx.inventory.names.get(CDS) else LDS
    served = ctx.inventory.names.get(type_url)
    if not served:
        raise Skip("the server serves no CDS or LDS resources to this node")

    def ask(node_id: str, names: list[str]) -> Request:
        if ctx.protocol == "delta":
            return ctx.delta(type_url, names, node_id=node_id)
        return ctx.sotw(type_url, names, node_id=node_id)

    # What the second node is served, asked alone on a connection of its own (a server
    # may wrongly tie a node to a connection): every resource, as the legacy wildcard or
    # as '*'. Then both nodes at once, on one connection.
    expected: set[str] | None = None
    style: list[str] = []
    for style in ([], ["*"]):
        alone = ctx.open(type_url, own_connection=True)
        await alone.send(ask(second, style))
        got = set(names_in(await ctx.expect(alone, type_url, f"for node {second!r}")))
        await alone.close()
        if got:
            expected = got
            break
    if expected is None:
        raise Skip(f"the server serves no {_alias(type_url)} resources to node {second!r}")
    first_stream, second_stream = ctx.open(type_url), ctx.open(type_url)
    await first_stream.send(ask(ctx.options.node_id, served))
    await second_stream.send(ask(second, style))
    mine = await ctx.expect(first_stream, type_url, f"for node {ctx.options.node_id!r}")
    theirs = await ctx.expect(second_stream, type_url, f"for node {second!r}")
    if set(names_in(mine)) != set(served):
        raise Violation(
            f"node {ctx.options.node_id!r} got {sorted(names_in(mine))} while node {second!r} "
            f"had a stream open; alone it is served {sorted(served)}"
        )
    if set(names_in(theirs)) != expected:
        raise Violation(
            f"node {second!r} got {sorted(names_in(theirs))} while node "
            f"{ctx.options.node_id!r} had a stream open; alone it is served {sorted(expected)}"
        )
    if expected == set(served):
        return "both nodes are served the same resources: this cannot tell them apart"
    return None


_both(
    "per-node",
    "Each stream is answered for the node of its own requests, with another node's stream open.",
    PER_NODE,
    "MUST",
    _per_node,
)


async def _ttl(ctx: Context) -> str | None:
    streams: list[tuple[RawStream, str]] = []
    ads: RawStream | None = None
    for type_url in ORDERED:
        names = ctx.inventory.names.get(type_url)
        if not names:
            continue
        stream = (
            (ads := ads or ctx.open(type_url)) if ctx.transport == "ads" else ctx.open(type_url)
        )
        wildcard = type_url in (CDS, LDS)
        if ctx.protocol == "delta":
            await stream.send(ctx.delta(type_url, ["*"] if wildcard else names))
        else:
            await stream.send(ctx.sotw(type_url, [] if wildcard else names))
        streams.append((stream, type_url))
    if not streams:
        raise Skip("the server serves nothing to this node")

    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.options.ttl_window
    wildcard_acks = ctx.protocol == "sotw"

    async def watch(stream: RawStream) -> int:
        held: dict[tuple[str, str], str] = {}  # (type_url, name) -> version held
        last_version: dict[str, str] = {}
        seen = 0
        while (left := deadline - loop.time()) > 0:
            item = await stream.recv(left)
            if item is None:
                break
            if isinstance(item, Ended):
                raise Violation(f"the server ended the stream ({item})")
            seen += _check_ttl(item, held, last_version)
            # ACK as a client does: SotW CDS/LDS keep the legacy wildcard (no names).
            keep = wildcard_acks and item.type_url in (CDS, LDS)
            names = [] if keep else [n for (t, n) in held if t == item.type_url]
            await _ack(ctx, stream, item, names)
        return seen

    counts = await asyncio.gather(*(watch(s) for s in {s for s, _ in streams}))
    seen_ttl = sum(counts)
    return f"{seen_ttl} resource(s) with a TTL seen" if seen_ttl else "no TTL in use"


def _check_ttl(
    response: Response, held: dict[tuple[str, str], str], last_version: dict[str, str]
) -> int:
    type_url = response.type_url
    count = 0
    if isinstance(response, DeltaDiscoveryResponse):
        items: list[tuple[str, str, bool, Resource | None]] = [
            (r.name, r.version, r.HasField("resource"), r) for r in response.resources
        ]
    else:
        items = []
        for packed in response.resources:
            if is_wrapper(packed):
                r = Resource.FromString(packed.value)
                items.append((r.name, r.version, r.HasField("resource"), r))
            else:
                items.append(("", "", True, None))
    for name, version, has_body, wrapper in items:
        if wrapper is not None and wrapper.HasField("ttl"):
            count += 1
            if wrapper.ttl.seconds <= 0 and wrapper.ttl.nanos <= 0:
                raise Violation(f"resource {name!r} has a TTL that is not positive")
        if has_body:
            if name:
                held[(type_url, name)] = version
            continue
        # A heartbeat: it must refresh a resource this stream holds, at the version held.
        if (type_url, name) not in held:
            raise Violation(f"a heartbeat names {name!r}, which the stream was never sent")
        if isinstance(response, DeltaDiscoveryResponse) and version != held[(type_url, name)]:
            raise Violation(
                f"a heartbeat of {name!r} carries version {version!r}; the client holds "
                f"{held[(type_url, name)]!r}"
            )
        if (
            isinstance(response, DiscoveryResponse)
            and type_url in last_version
            and response.version_info != last_version[type_url]
        ):
            raise Violation(
                f"a heartbeat response carries version_info {response.version_info!r}; the "
                f"last full response was {last_version[type_url]!r}"
            )
    if isinstance(response, DiscoveryResponse) and all(h for _, _, h, _ in items):
        last_version[type_url] = response.version_info
    return count


_both(
    "ttl-heartbeat",
    "Resources with a TTL carry a positive one, and a heartbeat (a Resource without a body) "
    "refreshes a resource the client holds, at the version it holds.",
    TTL,
    "MUST",
    _ttl,
)


# -- SotW ----------------------------------------------------------------------------


@check(
    "sotw-response-nonce-version",
    "Every response carries a nonce and a version_info.",
    ACK_NACK,
    "MUST",
    "sotw",
)
async def _sotw_nonce_version(ctx: Context) -> str | None:
    for response in await _all_types(ctx):
        assert isinstance(response, DiscoveryResponse)
        if not response.nonce:
            raise Violation(f"a {_alias(response.type_url)} response carries no nonce")
        if not response.version_info:
            raise Violation(f"a {_alias(response.type_url)} response carries no version_info")
    return None


@check(
    "sotw-ack-no-resend",
    "After the client ACKs a version, the server does not send that version again.",
    WHEN,
    "SHOULD",
    "sotw",
)
async def _sotw_ack_no_resend(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(NAMED_FIRST, every=True)
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, names)
    assert isinstance(first, DiscoveryResponse)
    await stream.send(ctx.ack(type_url, first, names))
    for response in await ctx.quiet(stream, max(ctx.options.quiet_period, 0.5)):
        if (
            response.type_url == type_url
            and _version(response) == first.version_info
            and not _only_heartbeats(response)
        ):
            raise Violation(
                f"after the ACK of version {first.version_info!r} the server sent it again "
                f"(nonce {response.nonce!r})"
            )
    return None


@check(
    "sotw-nack-no-repeat",
    "After a NACK the server does not send the rejected version again (it waits for a change).",
    WHEN,
    "SHOULD",
    "sotw",
)
async def _sotw_nack_no_repeat(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(NAMED_FIRST, every=True)
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, names)
    await stream.send(_nack(ctx, first, names))
    # Whether the stream survives the NACK is nack-keeps-stream's business, not this one's.
    for response in await stream.drain(max(ctx.options.quiet_period, 0.5)):
        if isinstance(response, Ended):
            break
        if (
            response.type_url == type_url
            and _version(response) == _version(first)
            and not _only_heartbeats(response)
        ):
            raise Violation(
                f"after the NACK of version {_version(first)!r} the server sent it again "
                f"(nonce {response.nonce!r})"
            )
    return None


@check(
    "sotw-subscribe-answered",
    "Adding a name to a subscription is answered with a response that holds it.",
    WHICH,
    "MUST",
    "sotw",
)
async def _sotw_subscribe(ctx: Context) -> str | None:
    type_url, (a, b) = ctx.inventory.pick(NAMED_FIRST, 2)
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, [a])
    assert isinstance(first, DiscoveryResponse)
    await stream.send(ctx.sotw(type_url, [a, b], version=first.version_info, nonce=first.nonce))
    await ctx.expect_with(stream, type_url, [b], f"after subscribing to {b!r} as well")
    return None


@check(
    "sotw-resubscribe-answered",
    "Subscribing again to a name the client unsubscribed from is answered, even when the "
    "version is unchanged.",
    WHICH,
    "MUST",
    "sotw",
)
async def _sotw_resubscribe(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(NAMED_FIRST, every=True)
    stream = ctx.open(type_url)
    latest = await _subscribe(ctx, stream, type_url, names)
    assert isinstance(latest, DiscoveryResponse)
    await stream.send(ctx.ack(type_url, latest, names))
    await stream.send(ctx.sotw(type_url, [], version=latest.version_info, nonce=latest.nonce))
    for response in await ctx.quiet(stream):
        if response.type_url == type_url:
            assert isinstance(response, DiscoveryResponse)
            latest = response
            await stream.send(ctx.ack(type_url, latest, []))
    await stream.send(ctx.sotw(type_url, names, version=latest.version_info, nonce=latest.nonce))
    # A response that crossed the request (a heartbeat) makes it stale: ACK it, as a
    # client does, with the names wanted; the server then owes them.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.options.response_timeout
    while (item := await stream.recv(max(0.0, deadline - loop.time()))) is not None:
        if isinstance(item, Ended):
            raise Violation(f"the server ended the stream ({item})")
        if item.type_url != type_url:
            continue
        if set(names) <= set(names_in(item)):
            return None
        assert isinstance(item, DiscoveryResponse)
        await stream.send(ctx.ack(type_url, item, names))
    raise Violation(
        f"no {_alias(type_url)} response holding {names} after unsubscribing from them and "
        f"subscribing again (version unchanged) within {ctx.options.response_timeout:g} s"
    )


@check(
    "sotw-full-state",
    "LDS and CDS responses carry every subscribed resource, not only what changed.",
    FULL_STATE,
    "MUST",
    "sotw",
)
async def _sotw_full_state(ctx: Context) -> str | None:
    type_url, (a, b) = ctx.inventory.pick((CDS, LDS), 2)
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, [a])
    assert isinstance(first, DiscoveryResponse)
    await stream.send(ctx.sotw(type_url, [a, b], version=first.version_info, nonce=first.nonce))
    response = await ctx.expect_with(stream, type_url, [b], f"after subscribing to {b!r}")
    if a not in names_in(response):
        raise Violation(
            f"the {_alias(type_url)} response after adding {b!r} leaves out {a!r}, which a "
            "client then takes as deleted"
        )
    return None


@check(
    "sotw-only-requested",
    "RDS and EDS responses carry only the names the client subscribed to (clients ignore "
    "the rest).",
    WHICH,
    "SHOULD",
    "sotw",
)
async def _sotw_only_requested(ctx: Context) -> str | None:
    type_url, (a, _) = ctx.inventory.pick((EDS, RDS), 2)
    stream = ctx.open(type_url)
    response = await _subscribe(ctx, stream, type_url, [a])
    extra = sorted(set(names_in(response)) - {a})
    if extra:
        raise Violation(f"a {_alias(type_url)} response to a request for {a!r} also holds {extra}")
    return None


async def _sotw_wildcard(ctx: Context, names: list[str], what: str) -> str | None:
    for type_url in (CDS, LDS):
        served = ctx.inventory.names.get(type_url)
        if not served:
            continue
        stream = ctx.open(type_url)
        await stream.send(ctx.sotw(type_url, names))
        response = await ctx.expect(stream, type_url, f"to {what}")
        missing = sorted(set(served) - set(names_in(response)))
        if missing:
            raise Violation(
                f"the {_alias(type_url)} response to {what} leaves out {missing}, "
                "which the server serves"
            )
        return None
    raise Skip("the server serves no CDS or LDS resources to this node")


@check(
    "sotw-wildcard-legacy",
    "A first LDS/CDS request with no names (the legacy wildcard) is answered with every resource.",
    WILDCARD,
    "MUST",
    "sotw",
)
async def _sotw_wildcard_legacy(ctx: Context) -> str | None:
    return await _sotw_wildcard(ctx, [], "a first request with no names")


@check(
    "sotw-wildcard-explicit",
    "A request for the name '*' is answered with every resource.",
    WILDCARD,
    "MUST",
    "sotw",
)
async def _sotw_wildcard_explicit(ctx: Context) -> str | None:
    return await _sotw_wildcard(ctx, ["*"], "a request for '*'")


@check(
    "sotw-wildcard-mixed",
    "A request for '*' and other names is still a wildcard: every resource is sent.",
    WILDCARD,
    "MUST",
    "sotw",
)
async def _sotw_wildcard_mixed(ctx: Context) -> str | None:
    return await _sotw_wildcard(ctx, ["*", MISSING_NAME], f"a request for '*' and {MISSING_NAME!r}")


@check(
    "sotw-reconnect-stale",
    "A new stream whose first request carries a stale version_info and nonce is answered with "
    "the current state.",
    RECONNECT,
    "MUST",
    "sotw",
)
async def _sotw_reconnect_stale(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(ORDERED, every=True)
    stream = ctx.open(type_url)
    await stream.send(
        ctx.sotw(
            type_url,
            names,
            version="xds-conformance-stale-version",
            nonce="xds-conformance-stale-nonce",
        )
    )
    await ctx.expect_with(stream, type_url, names, "to a reconnect with a stale version and nonce")
    return None


@check(
    "sotw-update-order",
    "When one change pushes CDS and EDS (or LDS and RDS) on ADS, CDS comes before EDS and LDS "
    "before RDS.",
    CONSISTENCY,
    "SHOULD",
    "sotw",
    needs_push=True,
    transports=("ads",),
)
async def _sotw_update_order(ctx: Context) -> str | None:
    found = [(p, c) for p, c in ((CDS, EDS), (LDS, RDS)) if p in ctx.inventory.links]
    if not found:
        raise Skip("the server serves no EDS cluster or RDS listener to this node")
    parent, child = found[0]
    parent_name, _ = ctx.inventory.links[parent]
    # Every name of both types: a server may hold a request that names only some (ADS mode).
    parents, children = ctx.inventory.names[parent], ctx.inventory.names[child]
    stream = ctx.open(parent)
    first = await _subscribe(ctx, stream, parent, parents)
    await _ack(ctx, stream, first, parents)
    second = await _subscribe(ctx, stream, child, children)
    await _ack(ctx, stream, second, children)
    await ctx.quiet(stream)
    await ctx.change("update", parent, parent_name)
    pushed = await ctx.quiet(stream, max(ctx.options.quiet_period, 0.5))
    order = [r.type_url for r in pushed if not _only_heartbeats(r)]
    if child in order and parent in order and order.index(child) < order.index(parent):
        raise Violation(
            f"after one change the server pushed {_alias(child)} before {_alias(parent)}: "
            f"{[_alias(t) for t in order]}"
        )
    if parent not in order:
        raise Violation(f"the {_alias(parent)} update of {parent_name!r} was not pushed")
    return None


# -- delta ---------------------------------------------------------------------------


@check(
    "delta-nonce",
    "Every delta response carries a nonce.",
    DELTA,
    "MUST",
    "delta",
)
async def _delta_nonce(ctx: Context) -> str | None:
    for response in await _all_types(ctx):
        if not response.nonce:
            raise Violation(f"a {_alias(response.type_url)} delta response carries no nonce")
    return None


@check(
    "delta-resource-versions",
    "Every resource in a delta response has a name and a version.",
    DELTA,
    "MUST",
    "delta",
)
async def _delta_versions(ctx: Context) -> str | None:
    for response in await _all_types(ctx):
        assert isinstance(response, DeltaDiscoveryResponse)
        for res in response.resources:
            if not res.name or not res.version:
                raise Violation(
                    f"a {_alias(response.type_url)} resource {res.name!r} has "
                    f"version {res.version!r}"
                )
    return None


@check(
    "delta-subscribe-answered",
    "A delta subscription to a name is answered with a response that holds it.",
    DELTA_SUBSCRIBE,
    "MUST",
    "delta",
)
async def _delta_subscribe(ctx: Context) -> str | None:
    type_url, (a, b) = ctx.inventory.pick(NAMED_FIRST, 2)
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, [a])
    await _ack(ctx, stream, first, [a])
    await stream.send(ctx.delta(type_url, [b]))
    await ctx.expect_with(stream, type_url, [b], f"after subscribing to {b!r} as well")
    return None


@check(
    "delta-initial-versions",
    "On a new stream the server honours initial_resource_versions: it does not resend what the "
    "client holds at the current version, and sends what changed.",
    DELTA,
    "MUST",
    "delta",
)
async def _delta_initial_versions(ctx: Context) -> str | None:
    type_url, (a, b) = ctx.inventory.pick(ORDERED, 2)
    first_stream = ctx.open(type_url)
    first = await _subscribe(ctx, first_stream, type_url, [a, b])
    assert isinstance(first, DeltaDiscoveryResponse)
    versions = {r.name: r.version for r in first.resources}
    await first_stream.close()
    stream = ctx.open(type_url)
    initial = {a: versions[a], b: "xds-conformance-stale"}
    await stream.send(ctx.delta(type_url, [a, b], initial=initial))
    response = await ctx.expect_with(stream, type_url, [b], f"for {b!r}, held at a stale version")
    later = [response, *await ctx.quiet(stream)]
    for item in later:
        if a in names_in(item):
            raise Violation(
                f"{a!r} was sent again although the client said it holds version "
                f"{versions[a]!r}, the current one"
            )
    return None


@check(
    "delta-removed-on-delete",
    "When a subscribed resource is deleted, the server names it in removed_resources.",
    DELETING,
    "MUST",
    "delta",
    needs_push=True,
)
async def _delta_removed(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(NAMED_FIRST)
    ctx.need_driver()
    (a,) = names
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, [a])
    await _ack(ctx, stream, first, [a])
    await ctx.change("delete", type_url, a)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ctx.options.response_timeout
        while True:
            item = await stream.recv(max(0.0, deadline - loop.time()))
            if item is None:
                raise Violation(
                    f"no removed_resources naming {a!r} within "
                    f"{ctx.options.response_timeout:g} s of its deletion"
                )
            if isinstance(item, Ended):
                raise Violation(f"the server ended the stream ({item})")
            assert isinstance(item, DeltaDiscoveryResponse)
            if item.type_url == type_url and a in item.removed_resources:
                return None
            await _ack(ctx, stream, item, [a])
    finally:
        await ctx.change("update", type_url, a)


@check(
    "delta-unsubscribe-stops",
    "After the client unsubscribes from a name, changes to it are no longer sent.",
    DELTA_UNSUBSCRIBE,
    "MUST",
    "delta",
    needs_push=True,
)
async def _delta_unsubscribe(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick(NAMED_FIRST)
    ctx.need_driver()
    (a,) = names
    stream = ctx.open(type_url)
    first = await _subscribe(ctx, stream, type_url, [a])
    await _ack(ctx, stream, first, [a])
    await stream.send(ctx.delta(type_url, unsubscribe=[a]))
    await ctx.quiet(stream)
    await ctx.change("update", type_url, a)
    for item in await ctx.quiet(stream, max(ctx.options.quiet_period, 0.5)):
        if a in names_in(item):
            raise Violation(f"{a!r} was sent after the client unsubscribed from it")
    return None
