"""Fault injection of the test ResourceStore: the failures a call delivers.

:class:`_Failure` is an ``ErrorResult`` on its way to the caller (in the response, or
as ``google.rpc.Status`` details with ``errors_as_details``); :class:`_Fault` is one
entry of ``fail_next()``'s queue; ``_HTTP_TO_GRPC`` maps an ``ErrorResult`` code to
the gRPC status it travels with as details.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from xds_client.store._proto import resource_pb2 as pb

_HTTP_TO_GRPC = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    410: grpc.StatusCode.OUT_OF_RANGE,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


class _Failure(Exception):  # noqa: N818 - internal signal, not an error type
    """An ErrorResult to deliver to the caller (in the response or as status details)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        key: pb.ResourceKey | None = None,
        causes: Sequence[pb.ErrorCause] = (),
        retry_after: int = 0,
    ) -> None:
        super().__init__(message)
        self.result = pb.ErrorResult(code=code, reason=reason, message=message)
        if key is not None:
            self.result.details.name = key.name
            self.result.details.group = key.group
            self.result.details.kind = key.resource
        if causes:
            self.result.details.causes.extend(causes)
        if retry_after:
            self.result.details.retryAfterSeconds = retry_after


@dataclass
class _Fault:
    remaining: int
    code: grpc.StatusCode | int
    retry_after: int
    methods: frozenset[str] | None
