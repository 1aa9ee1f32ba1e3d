"""TLS, bearer tokens, call metadata and the bootstrap environment, for every command.

``--ca-file/--cert/--key/--server-name/--tls`` turn TLS on; ``--token`` or
``--token-file`` send ``authorization: Bearer ...``; ``--header NAME=VALUE`` adds
call metadata. For a Grafana ResourceStore, ``--exchange-url`` with
``--exchange-token-file`` sends an ``X-Access-Token`` from token exchange and
``--id-token-file`` the user's ``X-Id-Token``. Tokens and keys are never printed
(the client redacts them).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from xds_client.client._bootstrap import BOOTSTRAP_CONFIG_ENV, BOOTSTRAP_ENV
from xds_client.transport import ChannelCredentialsConfig

from ._args import CommandError
from ._hints import check_pem

__all__ = ["bootstrap_from_env", "channel_options", "security_options", "store_channel_options"]


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
        ca_certificate=_pem(args.ca_file, "--ca-file") if args.ca_file else None,
        certificate_chain=_pem(args.cert, "--cert") if args.cert else None,
        private_key=_pem(args.key, "--key", key=True) if args.key else None,
        server_name_override=args.server_name,
    )


def _pem(path: str, flag: str, *, key: bool = False) -> bytes:
    data = _read(path, flag)
    check_pem(data, flag, path, key=key)  # else gRPC's C core logs about it and fails later
    return data


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
    """ResourceStoreClient keyword arguments: the channel's, plus Grafana's service auth."""
    return {**channel_options(args), **_grafana_auth(args)}


def channel_options(args: argparse.Namespace) -> dict[str, Any]:
    """``credentials`` and ``metadata`` (the bearer token and headers) for one raw channel."""
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


def _secret_file(path: str, flag: str) -> str:
    text = _read(path, flag).decode("utf-8", "replace").strip()
    if not text:
        raise CommandError(f"{flag} {path} is empty", 2)
    return text


def _grafana_auth(args: argparse.Namespace) -> dict[str, Any]:
    """``access_token`` (token exchange) and ``id_token`` from the Grafana flags."""
    options: dict[str, Any] = {}
    if args.exchange_url:
        from xds_client.store import TokenExchange  # store commands only: keep xDS startup light

        if not args.exchange_token_file:
            raise CommandError("--exchange-url needs --exchange-token-file", 2)
        namespace = args.exchange_namespace or getattr(args, "namespace", "") or "*"
        options["access_token"] = TokenExchange.http(
            args.exchange_url,
            _secret_file(args.exchange_token_file, "--exchange-token-file"),
            namespace=namespace,
        )
    elif args.exchange_token_file or args.exchange_namespace:
        raise CommandError("--exchange-token-file and --exchange-namespace need --exchange-url", 2)
    if args.id_token_file:
        options["id_token"] = _secret_file(args.id_token_file, "--id-token-file")
    return options
