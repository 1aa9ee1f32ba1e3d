"""What the asyncio LRS client and its thread twin share: the method and the target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import grpc

from xds_client.errors import UsageError
from xds_client.transport._base import ChannelCredentialsConfig, ServerTarget

__all__ = ["METHOD", "lrs_target"]

METHOD: Final = "/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats"
"""The LRS stream's gRPC method."""


def lrs_target(
    server: str | ServerTarget,
    *,
    credentials: ChannelCredentialsConfig | None,
    bearer_token: str | None,
    metadata: Mapping[str, str] | Sequence[tuple[str, str]],
    call_credentials: grpc.CallCredentials | None,
) -> ServerTarget:
    """The LRS server as a :class:`ServerTarget`, from the xDS clients' own arguments.

    A ServerTarget (such as one of an xDS client's servers) is taken as it is."""
    if isinstance(server, ServerTarget):
        if credentials is not None or bearer_token is not None or metadata or call_credentials:
            raise UsageError("a ServerTarget carries its own credentials and metadata")
        return server
    if not isinstance(server, str) or not server:
        raise UsageError(
            f"the LRS server is a 'host:port' string or a ServerTarget, not {server!r}"
        )
    pairs = list(metadata.items()) if isinstance(metadata, Mapping) else list(metadata)
    if bearer_token is not None:
        pairs.append(("authorization", f"Bearer {bearer_token}"))
    return ServerTarget(
        server,
        credentials=credentials,
        call_metadata=tuple(pairs),
        call_credentials=call_credentials,
    )
