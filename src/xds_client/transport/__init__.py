"""Transports: how xDS requests and responses travel (see ``_base`` for the seam).

:func:`make_transport` is the one place that maps a transport name to a class:
``"grpc"`` (bidirectional streams, this package's ``_async_grpc`` and ``_grpc``), ``"grpc-fetch"``
(unary ``Fetch*`` polling) and ``"rest"`` (REST-JSON polling).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from xds_client.errors import UsageError

from ._base import (
    ADS_DELTA_METHOD,
    ADS_METHOD,
    DEFAULT_MAX_RECEIVE_MESSAGE_SIZE,
    V2_ADS_DELTA_METHOD,
    V2_ADS_METHOD,
    AsyncStream,
    AsyncTransport,
    ChannelCredentialsConfig,
    Keepalive,
    ReportsWrites,
    Request,
    Response,
    ServerTarget,
    Stream,
    StreamSpec,
    Transport,
)

if TYPE_CHECKING:
    from ._async_fetch import AsyncFetchTransport
    from ._async_rest import AsyncRestTransport
    from ._fetch import FetchTransport
    from ._polling import PollError, PollPolicy
    from ._rest import RestTransport

# Polling transports load on first use: they pull in grpc, ssl and http.client; the
# polling scheduler itself (with random and its dataclasses) only with them.
_LAZY = {
    "PollError": "._polling",
    "PollPolicy": "._polling",
    "FetchTransport": "._fetch",
    "AsyncFetchTransport": "._async_fetch",
    "RestTransport": "._rest",
    "AsyncRestTransport": "._async_rest",
}

__all__ = [
    "ADS_DELTA_METHOD",
    "ADS_METHOD",
    "DEFAULT_MAX_RECEIVE_MESSAGE_SIZE",
    "V2_ADS_DELTA_METHOD",
    "V2_ADS_METHOD",
    "AsyncStream",
    "AsyncTransport",
    "ChannelCredentialsConfig",
    "Keepalive",
    "ReportsWrites",
    "Request",
    "Response",
    "ServerTarget",
    "Stream",
    "StreamSpec",
    "Transport",
    "TransportKind",
    "TRANSPORT_KINDS",
    "given_transport",
    "make_transport",
    "PollPolicy",
    "PollError",
    "FetchTransport",
    "AsyncFetchTransport",
    "RestTransport",
    "AsyncRestTransport",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xds_client.transport' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


TransportKind: TypeAlias = Literal["grpc", "grpc-fetch", "rest"]
TRANSPORT_KINDS: tuple[str, ...] = ("grpc", "grpc-fetch", "rest")


@overload
def given_transport(
    transport: object, *, owner: str, asynchronous: Literal[False]
) -> Transport: ...
@overload
def given_transport(
    transport: object, *, owner: str, asynchronous: Literal[True]
) -> AsyncTransport: ...
def given_transport(
    transport: object, *, owner: str, asynchronous: bool
) -> Transport | AsyncTransport:
    """A transport object passed as ``transport=``, checked to fit a sync or async client.

    Raises :class:`~xds_client.errors.UsageError` naming ``owner`` when it does not.
    """

    wanted: type[Any] = AsyncTransport if asynchronous else Transport
    methods = ("open", "probe", "close")
    fits = isinstance(transport, wanted) and all(
        inspect.iscoroutinefunction(getattr(transport, name)) == asynchronous for name in methods
    )
    if not fits:
        kind = "an AsyncTransport (async" if asynchronous else "a Transport (plain"
        raise UsageError(
            f"{owner} needs {kind} open, probe and close), not {type(transport).__name__}"
        )
    return transport  # type: ignore[return-value]


@overload
def make_transport(
    kind: str, target: ServerTarget, *, poll_interval: float, asynchronous: Literal[False]
) -> Transport: ...
@overload
def make_transport(
    kind: str, target: ServerTarget, *, poll_interval: float, asynchronous: Literal[True]
) -> AsyncTransport: ...
def make_transport(
    kind: str, target: ServerTarget, *, poll_interval: float, asynchronous: bool
) -> Transport | AsyncTransport:
    """Create the transport named ``kind`` for one server.

    ``poll_interval`` only matters to the polling transports. Raises
    :class:`~xds_client.errors.UsageError` for an unknown or unavailable kind.
    """
    if kind == "grpc":
        if asynchronous:
            from ._async_grpc import AsyncGrpcTransport

            return AsyncGrpcTransport(target)
        from ._grpc import GrpcTransport

        return GrpcTransport(target)
    if kind in ("grpc-fetch", "rest"):
        from ._polling import PollPolicy

        policy = PollPolicy(interval=poll_interval)
        if kind == "grpc-fetch":
            if asynchronous:
                from ._async_fetch import AsyncFetchTransport

                return AsyncFetchTransport(target, policy=policy)
            from ._fetch import FetchTransport

            return FetchTransport(target, policy=policy)
        if asynchronous:
            from ._async_rest import AsyncRestTransport

            return AsyncRestTransport(target, policy=policy)
        from ._rest import RestTransport

        return RestTransport(target, policy=policy)
    raise UsageError(f"unknown transport {kind!r}; use one of {', '.join(TRANSPORT_KINDS)}")
