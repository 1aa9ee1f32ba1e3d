"""TLS, bearer tokens, call metadata and the bootstrap environment, for every command.

``--ca-file/--cert/--key/--server-name/--tls`` turn TLS on; ``--token`` or
``--token-file`` send ``authorization: Bearer ...``; ``--header NAME=VALUE`` adds
call metadata. Tokens and keys are never printed (the client redacts them).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from xds_client.client._bootstrap import BOOTSTRAP_CONFIG_ENV, BOOTSTRAP_ENV
from xds_client.transport import ChannelCredentialsConfig

from ._args import CommandError

__all__ = ["bootstrap_from_env", "security_options", "store_channel_options"]


def bootstrap_from_env() -> str | None:
    """What names the environment's bootstrap (a file, or the ``_CONFIG`` variable); None."""
    if os.environ.get(BOOTSTRAP_ENV):
        return os.environ[BOOTSTRAP_ENV]
    if os.environ.get(BOOTSTRAP_CONFIG_ENV):
        return f"${BOOTSTRAP_CONFIG_ENV}"
    return None


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {flag} {path}: {exc.strerror or exc}", 2) from None


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        token = _read(args.token_file, "--token-file").decode("utf-8", "replace").strip()
        if not token:
            raise CommandError(f"--token-file {args.token_file} is empty", 2)
        return token
    return str(args.token) if args.token else None


def _tls(args: argparse.Namespace) -> ChannelCredentialsConfig | None:
    if (args.cert is None) != (args.key is None):
        raise CommandError("mTLS needs both --cert and --key", 2)
    if not (args.tls or args.ca_file or args.cert or args.server_name):
        return None
    return ChannelCredentialsConfig(
        ca_certificate=_read(args.ca_file, "--ca-file") if args.ca_file else None,
        certificate_chain=_read(args.cert, "--cert") if args.cert else None,
        private_key=_read(args.key, "--key") if args.key else None,
        server_name_override=args.server_name,
    )


def security_options(args: argparse.Namespace) -> dict[str, Any]:
    """XdsClient keyword arguments for the TLS and authentication flags given."""
    options: dict[str, Any] = {}
    credentials = _tls(args)
    if credentials is not None:
        options["credentials"] = credentials
    token = _token(args)
    if token is not None:
        options["bearer_token"] = token
    if args.header:
        options["metadata"] = list(args.header)
    return options


def store_channel_options(args: argparse.Namespace) -> dict[str, Any]:
    """ResourceStoreClient keyword arguments for the same flags (the xDS clients' TLS type)."""
    options: dict[str, Any] = {}
    metadata = list(args.header)
    token = _token(args)
    if token is not None:
        metadata.append(("authorization", f"Bearer {token}"))
    if metadata:
        options["metadata"] = metadata
    tls = _tls(args)
    if tls is not None:
        options["credentials"] = tls
    return options
