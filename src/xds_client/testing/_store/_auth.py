"""Grafana's service authentication for the test ResourceStoreServer.

:class:`AccessTokenCheck` is a gRPC server interceptor (``ResourceStoreServer(
auth=AccessTokenCheck(secret))``) that does what unified storage does with the
headers of Grafana's clients:

- every call but ``IsHealthy`` needs an ``X-Access-Token``: a JWT signed with
  HS256 and ``secret``, not expired, with ``resourceStore`` among its audiences
  (else gRPC UNAUTHENTICATED);
- its ``namespace`` claim must be the request's namespace, or ``*`` (else
  PERMISSION_DENIED: a token for another namespace is refused);
- with ``require_id_token`` a call also needs an ``X-Id-Token`` (the user's).

:func:`mint_access_token` makes such tokens (what a token-exchange server hands
out). ``seen`` records the metadata of each checked call (tokens included: it is
a test double), for tests that check what a client sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from xds_client.store import _bulk
from xds_client.store._auth import ACCESS_TOKEN_KEY, DEFAULT_AUDIENCE, ID_TOKEN_KEY

__all__ = ["AccessTokenCheck", "mint_access_token", "request_namespaces"]

_UNCHECKED = frozenset({"/resource.Diagnostics/IsHealthy"})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint_access_token(
    secret: bytes,
    namespace: str,
    *,
    audiences: Sequence[str] = (DEFAULT_AUDIENCE,),
    expires_at: float | None = None,
    subject: str = "access-policy:test",
) -> str:
    """An access token as a token exchange hands out: an HS256 JWT for ``namespace``."""
    exp = int(time.time() + 600 if expires_at is None else expires_at)
    header = {"alg": "HS256", "typ": "at+jwt"}
    claims = {"sub": subject, "aud": list(audiences), "exp": exp, "namespace": namespace}
    signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{_b64(signature)}"


def _claims(token: str, secret: bytes) -> dict[str, Any] | None:
    """The claims of a well-signed token, or None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    expected = hmac.new(secret, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    try:
        if not hmac.compare_digest(expected, _unb64(parts[2])):
            return None
        claims = json.loads(_unb64(parts[1]))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def request_namespaces(request: Any, metadata: Sequence[tuple[str, Any]]) -> list[str] | None:
    """The namespaces a call touches (None: the call names none, e.g. a health check)."""
    if request is None:  # a client stream: BulkProcess names its collections in metadata
        names = [str(v) for k, v in metadata if k == _bulk.COLLECTION_KEY]
        return [_bulk.parse_collection_id(n).namespace for n in names] or None
    fields = request.DESCRIPTOR.fields_by_name
    if "key" in fields:
        return [request.key.namespace]
    if "options" in fields:
        return [request.options.key.namespace]
    if "namespace" in fields:
        return [request.namespace]
    return None


class AccessTokenCheck(grpc.ServerInterceptor):
    """Refuse calls without a good ``X-Access-Token`` for the request's namespace."""

    def __init__(
        self,
        secret: bytes,
        *,
        require_id_token: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.secret = secret
        """The HS256 key of the tokens (shared with the token-exchange server)."""
        self.require_id_token = require_id_token
        """Refuse calls without an ``X-Id-Token`` too."""
        self.seen: list[dict[str, str]] = []
        """The metadata of each checked call, in order."""
        self._clock = clock
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<AccessTokenCheck id_token={'required' if self.require_id_token else 'optional'}>"

    def check(self, request: Any, context: grpc.ServicerContext) -> None:
        """Abort the call unless its tokens allow it."""
        md = {k: str(v) for k, v in (context.invocation_metadata() or ())}
        with self._lock:
            self.seen.append(md)
        token = md.get(ACCESS_TOKEN_KEY, "")
        if not token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing X-Access-Token")
        claims = _claims(token, self.secret)
        if claims is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid X-Access-Token")
        assert claims is not None
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or exp <= self._clock():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "expired X-Access-Token")
        audiences = claims.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else audiences
        if not isinstance(audiences, list) or DEFAULT_AUDIENCE not in audiences:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "X-Access-Token has the wrong audience")
        if self.require_id_token and not md.get(ID_TOKEN_KEY):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing X-Id-Token")
        allowed = str(claims.get("namespace", ""))
        try:
            wanted = request_namespaces(request, tuple(md.items()))
        except Exception:  # a bad bulk header: the handler answers it
            wanted = None
        for namespace in wanted or ():
            if allowed not in ("*", namespace):
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"the access token is for namespace {allowed!r}, not {namespace!r}",
                )

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method in _UNCHECKED:
            return handler
        return _checked(handler, self.check)


def _checked(
    handler: grpc.RpcMethodHandler[Any, Any], check: Callable[[Any, grpc.ServicerContext], None]
) -> grpc.RpcMethodHandler[Any, Any]:
    """The same handler, with ``check`` before the method runs."""
    codec = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        unary = handler.unary_unary

        def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
            check(request, context)
            return unary(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, **codec)
    if handler.unary_stream is not None:
        streaming = handler.unary_stream

        def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            check(request, context)
            yield from streaming(request, context)

        return grpc.unary_stream_rpc_method_handler(unary_stream, **codec)
    if handler.stream_unary is not None:
        collect = handler.stream_unary

        def stream_unary(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            check(None, context)
            return collect(requests, context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, **codec)
    return handler  # no bidirectional calls in the store's services
