"""REST-JSON servers (``POST /v3/discovery:<type>``): the checks that apply to polling.

REST has no stream, no nonce and no push: what remains is that every poll is
answered with a version and well-typed resources, that names are honoured, and
that a poll with a stale version gets the current state while a current one is
answered (304, or the same version again) rather than left hanging.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from dataclasses import dataclass

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.protobuf import json_format

from xds_client.transport._rest_codec import (
    build_request,
    ensure_types_loaded,
    parse_base_url,
)

from ._checks import _type_errors, check
from ._context import CDS, LDS, Context, names_in
from ._model import Skip, Violation

__all__ = ["HttpAnswer", "post"]

REST_SOURCE = "xds_protocol.rst, REST-JSON polling subscriptions"
STALE = "xds-conformance-stale-version"


@dataclass(frozen=True)
class HttpAnswer:
    """What a REST server answered: the status, and the response when it parsed."""

    status: int
    reason: str
    body: bytes
    response: DiscoveryResponse | None = None


def _post_sync(
    url: str, headers: tuple[tuple[str, str], ...], path: str, body: bytes, timeout: float
) -> tuple[int, str, bytes]:
    endpoint = parse_base_url(url)
    conn_class = http.client.HTTPSConnection if endpoint.tls else http.client.HTTPConnection
    conn = conn_class(endpoint.host, endpoint.port, timeout=timeout)
    try:
        conn.request("POST", path, body, dict(headers))
        answer = conn.getresponse()
        return answer.status, answer.reason, answer.read()
    finally:
        conn.close()


async def post(ctx: Context, request: DiscoveryRequest | bytes, type_url: str) -> HttpAnswer:
    """One poll (or a raw body); Violation when no answer comes within the timeout."""
    url = ctx.rest_url
    endpoint = parse_base_url(url)
    template = build_request(
        endpoint, DiscoveryRequest(type_url=type_url), headers=ctx.wire.metadata
    )
    body = request if isinstance(request, bytes) else build_request(endpoint, request).body
    ctx.wire.note(0, template.path, "sent", request)
    try:
        status, reason, raw = await asyncio.to_thread(
            _post_sync, url, template.headers, template.path, body, ctx.options.response_timeout
        )
    except TimeoutError:
        raise Violation(
            f"POST {template.path}: no answer within {ctx.options.response_timeout:g} s"
        ) from None
    except OSError as exc:
        raise Violation(f"POST {template.path}: {exc}") from None
    response = None
    if status == 200:
        try:
            data = json.loads(raw)
            ensure_types_loaded(data)
            response = DiscoveryResponse()
            json_format.ParseDict(data, response, ignore_unknown_fields=True)
            # REST answers may leave type_url out (the path names the type).
            response.type_url = response.type_url or type_url
        except (ValueError, json_format.ParseError) as exc:
            raise Violation(
                f"POST {template.path} answered 200 with a body that is not a "
                f"DiscoveryResponse: {exc}"
            ) from None
    answer = HttpAnswer(status, reason, raw, response)
    ctx.wire.note(0, template.path, "received", response if response is not None else answer)
    return answer


def _poll(
    ctx: Context, type_url: str, names: list[str] | None = None, version: str = ""
) -> DiscoveryRequest:
    return DiscoveryRequest(
        node=ctx.options.node(),
        type_url=type_url,
        resource_names=names or [],
        version_info=version,
    )


async def _wildcard(ctx: Context) -> list[DiscoveryResponse]:
    got = []
    for type_url in (CDS, LDS):
        if not ctx.inventory.names.get(type_url):
            continue
        answer = await post(ctx, _poll(ctx, type_url), type_url)
        if answer.response is None:
            raise Violation(f"a poll for every {type_url} answered {answer.status} {answer.reason}")
        got.append(answer.response)
    if not got:
        raise Skip("the server serves no CDS or LDS resources to this node")
    return got


@check(
    "rest-response-version",
    "Every 200 answer carries a version_info.",
    REST_SOURCE,
    "MUST",
    "rest",
    transports=("rest",),
)
async def _rest_version(ctx: Context) -> str | None:
    for response in await _wildcard(ctx):
        if not response.version_info:
            raise Violation(f"a {response.type_url} answer carries no version_info")
    return None


@check(
    "rest-any-type-url",
    "Every resource in an answer is an Any of the polled type URL.",
    "discovery.proto, DiscoveryResponse.type_url",
    "MUST",
    "rest",
    transports=("rest",),
)
async def _rest_types(ctx: Context) -> str | None:
    for response in await _wildcard(ctx):
        problem = _type_errors(response, response.type_url)
        if problem:
            raise Violation(problem)
    return None


@check(
    "rest-no-duplicate-names",
    "No resource name appears twice in one answer.",
    REST_SOURCE,
    "MUST",
    "rest",
    transports=("rest",),
)
async def _rest_duplicates(ctx: Context) -> str | None:
    for response in await _wildcard(ctx):
        names = names_in(response)
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise Violation(f"a {response.type_url} answer names {dup} more than once")
    return None


@check(
    "rest-named",
    "A poll for a name the server serves is answered with that resource.",
    REST_SOURCE,
    "MUST",
    "rest",
    transports=("rest",),
)
async def _rest_named(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick((CDS, LDS))
    answer = await post(ctx, _poll(ctx, type_url, names), type_url)
    if answer.response is None or not set(names) <= set(names_in(answer.response)):
        held = names_in(answer.response) if answer.response is not None else []
        raise Violation(f"a poll for {names} answered {answer.status} holding {held}")
    return None


@check(
    "rest-stale-version",
    "A poll with a stale version_info is answered with the current state.",
    REST_SOURCE,
    "MUST",
    "rest",
    transports=("rest",),
)
async def _rest_stale(ctx: Context) -> str | None:
    type_url, names = ctx.inventory.pick((CDS, LDS), every=True)
    answer = await post(ctx, _poll(ctx, type_url, version=STALE), type_url)
    if answer.response is None:
        raise Violation(f"a poll at a stale version answered {answer.status} {answer.reason}")
    if not set(names) <= set(names_in(answer.response)):
        raise Violation(f"a poll at a stale version got {names_in(answer.response)}, not {names}")
    return None


@check(
    "rest-current-version",
    "A poll at the current version gets 304, the same version again, or is held until a "
    "change (long polling); never an error or another state.",
    REST_SOURCE,
    "SHOULD",
    "rest",
    transports=("rest",),
)
async def _rest_current(ctx: Context) -> str | None:
    type_url, _ = ctx.inventory.pick((CDS, LDS))
    first = await post(ctx, _poll(ctx, type_url), type_url)
    if first.response is None:
        raise Violation(f"a poll answered {first.status} {first.reason}")
    version = first.response.version_info
    try:
        again = await post(ctx, _poll(ctx, type_url, version=version), type_url)
    except Violation:
        return "held (long polling)"
    if again.status == 304:
        return "304 Not Modified"
    if again.response is not None and again.response.version_info == version:
        if set(names_in(again.response)) == set(names_in(first.response)):
            return "the same version again"
        raise Violation(f"a poll at the current version {version!r} got other resources")
    raise Violation(f"a poll at the current version {version!r} answered {again.status}")


@check(
    "rest-malformed-body",
    "A body that is not JSON gets a 4xx answer, not a server error or a hang.",
    REST_SOURCE,
    "SHOULD",
    "rest",
    transports=("rest",),
)
async def _rest_malformed(ctx: Context) -> str | None:
    answer = await post(ctx, b"{this is not json", CDS)
    if not 400 <= answer.status < 500:
        raise Violation(f"a body that is not JSON answered {answer.status} {answer.reason}")
    return f"{answer.status} {answer.reason}"


async def discover_rest(ctx: Context) -> None:
    """Fill the inventory from wildcard polls of CDS and LDS."""
    for type_url in (CDS, LDS):
        try:
            answer = await post(ctx, _poll(ctx, type_url), type_url)
        except Violation:
            continue
        names = sorted({n for n in names_in(answer.response or DiscoveryResponse()) if n})
        if names:
            ctx.inventory.names[type_url] = names
