"""REST-JSON xDS without I/O: URLs, request bodies, response decoding, status handling.

Envoy's REST subscriptions ``POST /<v2|v3>/discovery:<type>`` with a JSON
``DiscoveryRequest`` and read a JSON ``DiscoveryResponse`` (``200``), or
nothing new (``304``). Both the thread and the asyncio REST transports use this
module, so they cannot disagree on the wire format.

- Requests use the proto field names (``resource_names``, ``version_info``):
  some servers (sovereign) read only that form. ``error_detail`` always has a
  ``details`` list, which servers validating ``google.rpc.Status`` require.
- Responses are parsed with ``json_format`` and accept both field-name forms.
  ``@type`` names are resolved through our registry; other Envoy, xDS and
  well-known messages (such as an ``HttpConnectionManager`` inside a
  listener) are imported on demand, but only from trusted package roots, so a
  server cannot make us import arbitrary modules.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envoy.service.discovery.v3.discovery_pb2 import DiscoveryRequest, DiscoveryResponse
from google.protobuf import json_format

from xds_client._version import __version__
from xds_client.errors import UsageError
from xds_client.node import USER_AGENT_NAME
from xds_client.resources import message_descriptor, resource_type
from xds_client.transport._polling import PollError

__all__ = [
    "RestEndpoint",
    "HttpRequest",
    "parse_base_url",
    "rest_path_for",
    "encode_request",
    "build_request",
    "decode_response",
    "decode_request",
    "encode_response",
    "ensure_types_loaded",
]

_log = logging.getLogger("xds_client.transport.rest")

_BODY_EXCERPT = 200
_USER_AGENT = f"{USER_AGENT_NAME}/{__version__}"
# Statuses worth retrying: the server or something in between is busy or broken.
_RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RestEndpoint:
    """Where a REST control plane listens, from a base URL such as ``http://host:8080``."""

    scheme: str
    """``http`` or ``https``."""
    host: str
    port: int
    base_path: str
    """Path prefix before ``/v3/discovery:...`` (``""`` for none)."""

    @property
    def tls(self) -> bool:
        """True for ``https``."""
        return self.scheme == "https"


def parse_base_url(url: str) -> RestEndpoint:
    """Split a REST server's base URL; raises :class:`UsageError` for anything else."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"a REST server is a base URL such as 'http://127.0.0.1:8080', got {url!r}"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(
            "a REST base URL takes no query, fragment or user info (pass credentials as headers)"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"bad port in REST base URL {url!r}") from exc
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return RestEndpoint(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


def rest_path_for(type_url: str) -> str:
    """``/v3/discovery:clusters`` for a type URL; :class:`UsageError` if REST cannot carry it."""
    rtype = resource_type(type_url)
    if rtype.rest_path is None:
        raise UsageError(f"{type_url} has no REST endpoint; use transport='grpc'")
    return rtype.rest_path


@dataclass(frozen=True)
class HttpRequest:
    """One HTTP request to send."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    """Includes the caller's extra headers (auth): never log these."""
    body: bytes


def encode_request(request: DiscoveryRequest) -> bytes:
    """The JSON body of a poll, with proto field names and a complete ``error_detail``."""
    body: dict[str, Any] = json_format.MessageToDict(request, preserving_proto_field_name=True)
    body.setdefault("version_info", "")
    body.setdefault("resource_names", [])
    body.setdefault("type_url", request.type_url)
    body.pop("response_nonce", None)  # REST has no nonces; keep the body minimal
    if request.HasField("error_detail"):
        detail = body.setdefault("error_detail", {})
        detail.setdefault("code", 0)
        detail.setdefault("message", "")
        detail.setdefault("details", [])
    return json.dumps(body, separators=(",", ":")).encode()


def build_request(
    endpoint: RestEndpoint,
    request: DiscoveryRequest,
    *,
    headers: Sequence[tuple[str, str]] = (),
) -> HttpRequest:
    """The HTTP request for one poll of ``request.type_url``."""
    all_headers = (
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
        ("User-Agent", _USER_AGENT),
        *headers,
    )
    return HttpRequest(
        "POST",
        endpoint.base_path + rest_path_for(request.type_url),
        tuple(all_headers),
        encode_request(request),
    )


def decode_response(
    status: int,
    body: bytes,
    *,
    request: DiscoveryRequest,
    reason: str = "",
) -> DiscoveryResponse | None:
    """Turn an HTTP answer into a response, None for nothing new, or a :class:`PollError`.

    - 200: the parsed ``DiscoveryResponse`` (its ``type_url`` filled in if absent);
    - 304: None, the requested version is current;
    - 404: None, no resource matches (the protocol core's does-not-exist timers
      then report the names), logged once by the transport;
    - 408, 429, 5xx: a retryable :class:`PollError`; other statuses and
      bodies that do not parse are not retryable.
    """
    path = rest_path_for(request.type_url)
    if status in {304, 404}:
        return None
    if status != 200:
        text = body[:_BODY_EXCERPT].decode("utf-8", "replace").strip()
        detail = f": {text}" if text else ""
        message = f"POST {path} answered {status} {reason}".rstrip() + detail
        raise PollError(message, retryable=status in _RETRYABLE, status=status)
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("the body is not a JSON object")
        ensure_types_loaded(data)
        response = DiscoveryResponse()
        json_format.ParseDict(data, response, ignore_unknown_fields=True)
    except (ValueError, json_format.ParseError) as exc:
        raise PollError(
            f"POST {path} answered 200 with a body that is not a DiscoveryResponse: {exc}",
            retryable=False,
            status=status,
        ) from exc
    if not response.type_url:
        response.type_url = request.type_url
    return response


def encode_response(response: DiscoveryResponse, *, camel_case: bool = False) -> bytes:
    """A ``DiscoveryResponse`` as REST JSON (for servers and tests)."""
    for resource in response.resources:
        _load(resource.type_url)
    body = json_format.MessageToDict(response, preserving_proto_field_name=not camel_case)
    return json.dumps(body).encode()


def decode_request(body: bytes) -> DiscoveryRequest:
    """Parse a REST poll's JSON body (for servers and tests); accepts both name forms."""
    request = DiscoveryRequest()
    data = json.loads(body)
    ensure_types_loaded(data)
    json_format.ParseDict(data, request, ignore_unknown_fields=True)
    return request


def ensure_types_loaded(data: object) -> None:
    """Import the message module of every ``@type`` in parsed JSON, so ``json_format`` finds it.

    Unknown or untrusted names are left alone; ``json_format`` then reports them.
    """
    for type_url in set(_type_urls(data)):
        _load(type_url)


def _type_urls(data: object) -> Iterator[str]:
    if isinstance(data, Mapping):
        for key, value in data.items():
            if key == "@type" and isinstance(value, str):
                yield value
            else:
                yield from _type_urls(value)
    elif isinstance(data, list):
        for item in data:
            yield from _type_urls(item)


def _load(type_url: str) -> None:
    message_descriptor(type_url.rsplit("/", 1)[-1])
