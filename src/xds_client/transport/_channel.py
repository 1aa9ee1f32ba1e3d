"""How every client builds a gRPC channel to a :class:`ServerTarget` (its arguments and
credentials, and the TLS files to watch for rotation), and reads a failed call's status.

The channel itself is made by the driver's backend (``open_channel`` in
:mod:`xds_client._backends.asyncio` or ``.threads``) from :func:`channel_arguments`.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

import grpc

from ._base import ChannelCredentialsConfig, ServerTarget, read_pem

__all__ = [
    "RpcStatus",
    "channel_arguments",
    "channel_credentials",
    "channel_options",
    "credential_files",
]


@runtime_checkable
class RpcStatus(Protocol):
    """A failed call that carries its status: a sync call's error (a ``grpc.Call``) and
    grpc.aio's ``AioRpcError`` do; a bare ``grpc.RpcError`` need not."""

    def code(self) -> grpc.StatusCode: ...

    def details(self) -> str | None: ...


def channel_arguments(
    target: ServerTarget, credentials: grpc.ChannelCredentials | None = None
) -> tuple[str, grpc.ChannelCredentials | None, list[tuple[str, Any]]]:
    """The address, credentials and options of a channel to ``target``, for ``open_channel``.

    TLS and call credentials, keepalive, message size and extra options come from the
    target; ``credentials`` (ready-made gRPC credentials) override the target's.
    """
    creds = credentials if credentials is not None else channel_credentials(target)
    return target.uri, creds, channel_options(target)


def channel_options(target: ServerTarget) -> list[tuple[str, Any]]:
    """gRPC channel arguments for a target: message size, keepalive, TLS name, extras."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", target.max_receive_message_size),
        # The client backs off itself; a fresh stream should try to connect at once.
        ("grpc.enable_retries", 0),
    ]
    if target.keepalive is not None:
        ka = target.keepalive
        options += [
            ("grpc.keepalive_time_ms", int(ka.time * 1000)),
            ("grpc.keepalive_timeout_ms", int(ka.timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", int(ka.permit_without_calls)),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    creds = target.credentials
    if creds is not None and creds.server_name_override:
        options.append(("grpc.ssl_target_name_override", creds.server_name_override))
    options += list(target.channel_options)
    return options


def channel_credentials(target: ServerTarget) -> grpc.ChannelCredentials | None:
    """TLS (and call) credentials for a target, or None for a plaintext channel."""
    creds: ChannelCredentialsConfig | None = target.credentials
    if creds is None:
        if target.call_credentials is not None:
            # gRPC only sends call credentials over a secure channel; local TCP counts.
            return grpc.composite_channel_credentials(
                grpc.local_channel_credentials(), target.call_credentials
            )
        return None
    ssl = grpc.ssl_channel_credentials(
        root_certificates=read_pem(creds.ca_certificate, what="ca_certificate"),
        private_key=read_pem(creds.private_key, what="private_key"),
        certificate_chain=read_pem(creds.certificate_chain, what="certificate_chain"),
    )
    if target.call_credentials is not None:
        return grpc.composite_channel_credentials(ssl, target.call_credentials)
    return ssl


def credential_files(target: ServerTarget) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of each TLS file the target names (gRFC A65 file watcher).

    A channel built from these files is rebuilt when this changes, so a rotated
    CA, certificate or key is used from the next stream on, without a restart.
    """
    creds = target.credentials
    if creds is None:
        return ()
    out = []
    for source in (creds.ca_certificate, creds.certificate_chain, creds.private_key):
        if source is None or isinstance(source, bytes):
            continue
        try:
            stat = os.stat(source)
        except OSError:
            continue  # reported by read_pem when the channel is (re)built
        out.append((os.fspath(source), stat.st_mtime_ns, stat.st_size))
    return tuple(out)
