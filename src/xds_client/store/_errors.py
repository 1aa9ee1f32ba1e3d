"""Typed errors of the ResourceStore client, and the one boundary that maps to them.

They are drawn with every other error in the one tree of :mod:`xds_client.errors`:
:class:`ResourceStoreError` and one subclass per HTTP-style status (with
:class:`QuotaExceededError` under :class:`ForbiddenError`, and ``store._auth``'s
``TokenExchangeError`` under :class:`UnauthorizedError`), plus
:class:`InvalidResponseError` and :class:`SelectorError`.

An ``ErrorResult`` travels in a response's ``error`` field or packed into the
``google.rpc.Status`` details of the gRPC status (trailer
``grpc-status-details-bin``). The one in the details wins over the one in the
response; a failed gRPC status without an ``ErrorResult`` (a transport error)
wins over both, since then there is no response at all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import status_pb2

from xds_client.errors import ServerProtocolError, UsageError, XdsClientError
from xds_client.store._proto import resource_pb2 as pb
from xds_client.transport._channel import RpcStatus

__all__ = [
    "ErrorCause",
    "ResourceStoreError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "QuotaExceededError",
    "NotFoundError",
    "AlreadyExistsError",
    "ConflictError",
    "ExpiredError",
    "GoneError",
    "InvalidError",
    "MessageTooLargeError",
    "TooManyRequestsError",
    "StoreNotImplementedError",
    "UnavailableError",
    "ServerTimeoutError",
    "InternalError",
    "InvalidResponseError",
    "SelectorError",
]

STATUS_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_RESULT_TYPE_URL = "type.googleapis.com/resource.ErrorResult"


@dataclass(frozen=True, slots=True)
class ErrorCause:
    """One cause of a failure, as in Kubernetes' ``StatusCause``."""

    reason: str
    """Machine-readable cause, e.g. ``FieldValueInvalid``."""
    message: str
    """Human-readable description."""
    field: str
    """The JSON path of the offending field, e.g. ``spec.title``."""


class ResourceStoreError(XdsClientError):
    """A ResourceStore call failed; the attributes mirror ``ErrorResult``."""

    default_code = 500

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str = "",
        details: pb.ErrorDetails | None = None,
        grpc_code: grpc.StatusCode | None = None,
    ) -> None:
        self.code: int = code if code else self.default_code
        """The HTTP-style status code."""
        self.reason: str = reason
        """Machine-readable reason, e.g. ``AlreadyExists``."""
        self.message: str = message
        """Human-readable message from the server."""
        self.details: pb.ErrorDetails = details if details is not None else pb.ErrorDetails()
        """The ``ErrorDetails`` message (name, group, kind, uid, causes ...)."""
        self.causes: tuple[ErrorCause, ...] = tuple(
            ErrorCause(c.reason, c.message, c.field) for c in self.details.causes
        )
        """The causes listed in the details."""
        self.grpc_code: grpc.StatusCode | None = grpc_code
        """The gRPC status code when the error came as a gRPC status."""
        text = f"{self.code}"
        if reason:
            text += f" {reason}"
        text += f": {message}" if message else ""
        if self.causes:
            text += " (" + "; ".join(_cause_text(c) for c in self.causes) + ")"
        super().__init__(text)


def _cause_text(cause: ErrorCause) -> str:
    head = f"{cause.field}: " if cause.field else ""
    return head + (cause.message or cause.reason)


class BadRequestError(ResourceStoreError):
    """400: the request is malformed."""

    default_code = 400


class UnauthorizedError(ResourceStoreError):
    """401 or gRPC UNAUTHENTICATED: the call carries no valid identity."""

    default_code = 401


class ForbiddenError(ResourceStoreError):
    """403 or gRPC PERMISSION_DENIED: the identity may not do this."""

    default_code = 403


class QuotaExceededError(ForbiddenError):
    """403 that says it is a quota: the collection holds as many objects as it may.

    Grafana refuses a create over quota with 403 and a message naming the quota
    (no reason); a subclass of :class:`ForbiddenError`, so handlers of refusals
    still catch it. ``quota_usage()`` tells the usage and the limit.
    """


class NotFoundError(ResourceStoreError):
    """404: the resource does not exist."""

    default_code = 404


class ConflictError(ResourceStoreError):
    """409: the resource version is stale (optimistic concurrency), or gRPC ABORTED."""

    default_code = 409


class AlreadyExistsError(ConflictError):
    """409 AlreadyExists: create of a key that exists."""


class ExpiredError(ResourceStoreError):
    """410: the requested resource version or page token is older than the kept history."""

    default_code = 410


GoneError = ExpiredError
"""Another name for :class:`ExpiredError` (HTTP 410 Gone)."""


class MessageTooLargeError(ResourceStoreError):
    """A request or a response is larger than the gRPC message limit; never retried.

    ``limit`` is the limit in bytes when known (the client's ``max_message_size``
    or the one the gRPC message names). A write whose *response* was too large
    may have been applied: read the object to find out.
    """

    default_code = 413

    def __init__(self, message: str, *, limit: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.limit: int | None = limit
        """The message size limit in bytes, when known."""


class InvalidError(ResourceStoreError):
    """422: the object failed validation; ``causes`` lists the fields."""

    default_code = 422


class TooManyRequestsError(ResourceStoreError):
    """429 or RESOURCE_EXHAUSTED; ``retry_after`` is the server's hint in seconds."""

    default_code = 429

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait, or None."""
        seconds = self.details.retryAfterSeconds
        return float(seconds) if seconds > 0 else None


class StoreNotImplementedError(ResourceStoreError, NotImplementedError):
    """501 or gRPC UNIMPLEMENTED: the server does not offer this call (or this dialect).

    Exported as ``xds_client.store.NotImplementedError``; it is also a
    subclass of the built-in ``NotImplementedError``.
    """

    default_code = 501


class UnavailableError(ResourceStoreError):
    """503 or gRPC UNAVAILABLE: the server cannot be reached or refuses work for now."""

    default_code = 503


class ServerTimeoutError(ResourceStoreError):
    """504 or gRPC DEADLINE_EXCEEDED."""

    default_code = 504


class InternalError(ResourceStoreError):
    """500 or any other gRPC status."""

    default_code = 500


class InvalidResponseError(ResourceStoreError, ServerProtocolError):
    """The server answered with something the protocol does not allow.

    For example an update that "succeeds" with resource version 0.
    """

    default_code = 500


class SelectorError(UsageError, ValueError):
    """A label selector string does not parse (same rules as Kubernetes)."""


_BY_CODE: dict[int, type[ResourceStoreError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: ExpiredError,
    413: MessageTooLargeError,
    422: InvalidError,
    429: TooManyRequestsError,
    501: StoreNotImplementedError,
    503: UnavailableError,
    504: ServerTimeoutError,
}

_GRPC_TO_HTTP: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}

# Reasons that pick a class when the code alone is ambiguous or missing.
_BY_REASON: dict[str, type[ResourceStoreError]] = {
    "AlreadyExists": AlreadyExistsError,
    "Conflict": ConflictError,
    "NotFound": NotFoundError,
    "Expired": ExpiredError,
    "Gone": ExpiredError,
    "Invalid": InvalidError,
    "BadRequest": BadRequestError,
    "Unauthorized": UnauthorizedError,
    "Forbidden": ForbiddenError,
    "QuotaExceeded": QuotaExceededError,
    "RequestEntityTooLarge": MessageTooLargeError,
    "NotImplemented": StoreNotImplementedError,
    "TooManyRequests": TooManyRequestsError,
    "ServiceUnavailable": UnavailableError,
    "Timeout": ServerTimeoutError,
}


def grpc_code_to_http(code: grpc.StatusCode) -> int:
    """The HTTP-style code we report for a gRPC status code."""
    return _GRPC_TO_HTTP.get(code, 500)


# Older Grafana servers send these as bare messages (no reason, sometimes code 500).
_ALREADY_EXISTS_TEXT = re.compile(r"\balready exists\b", re.IGNORECASE)
_CONFLICT_TEXT = re.compile(r"optimistic lock(ing)? failed", re.IGNORECASE)
# Grafana's quota refusal is a 403 whose message names the quota (it has no reason).
_QUOTA_TEXT = re.compile(r"\bquota\b", re.IGNORECASE)
# grpc-core's wording when a message exceeds a size limit (either direction).
_SIZE_TEXT = re.compile(
    r"(received|sent|send|receive)[a-z ]* message larger than max \(\s*(\d+)\s*vs\.?\s*(\d+)\s*\)",
    re.IGNORECASE,
)


def error_class(code: int, reason: str, message: str = "") -> type[ResourceStoreError]:
    """The exception class for an HTTP-style code, a reason and (for old servers) a message."""
    if code in (0, 409, 500) and not reason and _CONFLICT_TEXT.search(message):
        return ConflictError
    if code == 409:
        if reason == "AlreadyExists" or (not reason and _ALREADY_EXISTS_TEXT.search(message)):
            return AlreadyExistsError
        return ConflictError
    if code == 403 and (reason == "QuotaExceeded" or _QUOTA_TEXT.search(message)):
        return QuotaExceededError
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    if code == 0 and reason in _BY_REASON:
        return _BY_REASON[reason]
    return InternalError


def from_error_result(
    result: pb.ErrorResult, *, grpc_code: grpc.StatusCode | None = None
) -> ResourceStoreError:
    """Turn an ``ErrorResult`` into the matching typed exception."""
    code = result.code
    if code == 0 and grpc_code is not None and result.reason not in _BY_REASON:
        code = grpc_code_to_http(grpc_code)
    cls = error_class(code, result.reason, result.message)
    if cls is ConflictError and code != 409:
        code = 409  # an old server's "optimistic locking failed" sent as 500
    return cls(
        result.message,
        code=code or cls.default_code,
        reason=result.reason,
        details=result.details if result.HasField("details") else None,
        grpc_code=grpc_code,
    )


def error_result_from_metadata(metadata: Any) -> pb.ErrorResult | None:
    """The ``ErrorResult`` packed into a ``grpc-status-details-bin`` trailer, if any."""
    if not metadata:
        return None
    for item in metadata:
        key, value = item[0], item[1]
        if key != STATUS_DETAILS_KEY:
            continue

        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a broken trailer is no worse than no trailer
            return None
        for detail in status.details:
            if detail.type_url.endswith("/resource.ErrorResult"):
                result = pb.ErrorResult()
                try:
                    result.ParseFromString(detail.value)
                except Exception:
                    return None
                if not result.message and status.message:
                    result.message = status.message
                return result
    return None


def from_rpc_error(exc: RpcStatus, trailing_metadata: Any) -> ResourceStoreError:
    """Map a failed gRPC call (sync or aio) to a typed exception.

    The caller raises the result ``from`` the original exception.
    """
    code = exc.code()
    result = error_result_from_metadata(trailing_metadata)
    if result is not None:
        return from_error_result(result, grpc_code=code)
    name = code.name if code is not None else "UNKNOWN"
    text = exc.details() or name
    size = _SIZE_TEXT.search(text)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and size is not None:
        return message_too_large(text, limit=int(size.group(3)), grpc_code=code)
    http = grpc_code_to_http(code)
    cls = error_class(http, "", text)
    if code == grpc.StatusCode.ALREADY_EXISTS:
        cls = AlreadyExistsError
    return cls(text, code=http, reason=name, grpc_code=code)


def message_too_large(
    text: str, *, limit: int | None, grpc_code: grpc.StatusCode | None = None
) -> MessageTooLargeError:
    """The error of a message over the size limit, with advice in the message."""
    advice = (
        " (raise the client's max_message_size if the server allows it, "
        "or list with a smaller limit)"
    )
    if "received message larger" in text.lower():
        advice += "; the call may have taken effect on the server (a write may be saved)"
    return MessageTooLargeError(
        text + advice,
        limit=limit,
        code=413,
        reason="RequestEntityTooLarge",
        grpc_code=grpc_code,
    )


def check_result(response_error: pb.ErrorResult | None, trailing: Any) -> None:
    """Raise for an OK call that still carries an ``ErrorResult``.

    ``response_error`` is the response's ``error`` field when it is set.
    """
    if trailing:
        in_details = error_result_from_metadata(trailing)
        if in_details is not None:
            raise from_error_result(in_details)
    if response_error is not None:
        raise from_error_result(response_error)


def from_status_json(value: bytes) -> ResourceStoreError:
    """A watch ``ERROR`` event carries a Kubernetes ``Status`` as JSON."""
    try:
        doc = json.loads(value) if value else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    result = pb.ErrorResult(
        message=str(doc.get("message", "watch error")),
        reason=str(doc.get("reason", "")),
        code=int(doc.get("code", 500) or 500),
    )
    details = doc.get("details")
    if isinstance(details, dict):
        retry = details.get("retryAfterSeconds")
        result.details.name = str(details.get("name", ""))
        if isinstance(retry, int):
            result.details.retryAfterSeconds = retry
        causes = details.get("causes")
        for cause in causes if isinstance(causes, list) else ():
            if isinstance(cause, dict):
                result.details.causes.add(
                    reason=str(cause.get("reason", "")),
                    message=str(cause.get("message", "")),
                    field=str(cause.get("field", "")),
                )
    return from_error_result(result)


def pack_status_details(result: pb.ErrorResult, grpc_code: grpc.StatusCode) -> bytes:
    """Serialize a ``google.rpc.Status`` carrying ``result`` (used by the test server)."""

    status = status_pb2.Status(code=grpc_code.value[0], message=result.message)
    detail = status.details.add()
    detail.type_url = _ERROR_RESULT_TYPE_URL
    detail.value = result.SerializeToString()
    return status.SerializeToString()
