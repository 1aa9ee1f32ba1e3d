"""Call credentials from the bootstrap file: gRFC A97 ``jwt_token_file``.

The token is read from its file when first needed and kept until 30 seconds
before its ``exp`` claim; then the file is read again, so a token rotated on
disk is picked up without a restart. It is sent as ``authorization: Bearer``
on every stream. The token itself never appears in a log line, a ``repr`` or
an exception message: errors name the file only.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from xds_client.errors import BootstrapError, TransportError

__all__ = ["REFRESH_MARGIN", "JwtTokenFile", "call_credentials_from_bootstrap", "jwt_expiry"]

log = logging.getLogger("xds_client.client")

REFRESH_MARGIN = 30.0
"""Seconds before ``exp`` at which a cached token is read again (gRFC A97)."""
SUPPORTED_CALL_CREDS = ("jwt_token_file",)


class TokenError(TransportError):
    """A token file that cannot be used; the message names the file, never the token.

    It fails the stream being opened (gRPC reports it as UNAVAILABLE), and the
    client retries with backoff, reading the file again."""


def jwt_expiry(token: str, *, source: str) -> float:
    """The ``exp`` claim of a JWT (seconds since the epoch).

    Raises :class:`TokenError` naming ``source`` (not the token) when the
    token is not a JWT with a numeric ``exp``.
    """
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError(f"{source} does not hold a JWT (header.payload.signature)")
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        raise TokenError(f"{source}: the JWT payload is not base64url JSON") from None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if not isinstance(exp, (int, float)) or isinstance(exp, bool):
        raise TokenError(f"{source}: the JWT has no numeric 'exp' claim")
    return float(exp)


class JwtTokenFile(grpc.AuthMetadataPlugin):
    """gRPC call credentials plugin: ``authorization: Bearer <token from file>``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        refresh_margin: float = REFRESH_MARGIN,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._margin = refresh_margin
        self._lock = threading.Lock()
        self._token: str | None = None
        self._valid_until = 0.0
        self.reads = 0
        """How many times the file was read (for tests and metrics)."""

    def __repr__(self) -> str:
        return f"JwtTokenFile({os.fspath(self.path)!r})"

    def token(self) -> str:
        """The current token, read again when the cached one is within 30 s of ``exp``."""
        with self._lock:
            now = self._clock()
            if self._token is not None and now < self._valid_until:
                return self._token
            source = f"jwt_token_file {os.fspath(self.path)!r}"
            try:
                token = self.path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise TokenError(f"cannot read {source}: {reason}") from None
            self.reads += 1
            exp = jwt_expiry(token, source=source)
            if exp - self._margin <= now:
                raise TokenError(f"{source}: the token has expired (or expires within 30 s)")
            self._token, self._valid_until = token, exp - self._margin
            return token

    def __call__(
        self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback
    ) -> None:
        try:
            token = self.token()
        except TokenError as exc:
            log.warning("call credentials: %s", exc)
            callback((), exc)
            return
        callback((("authorization", f"Bearer {token}"),), None)


def call_credentials_from_bootstrap(raw: Any, field: str) -> grpc.CallCredentials | None:
    """The ``call_creds`` list of a bootstrap server entry (gRFC A97), composed.

    Types this client does not know are skipped, as gRPC does.
    """
    if not isinstance(raw, list):
        raise BootstrapError(f"must be a JSON array, got {type(raw).__name__}", field=field)
    found: list[grpc.CallCredentials] = []
    for i, entry in enumerate(raw):
        efield = f"{field}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise BootstrapError("must be an object with a string 'type'", field=efield)
        if entry["type"] not in SUPPORTED_CALL_CREDS:
            continue
        config = entry.get("config", {})
        path = config.get("jwt_token_file") if isinstance(config, dict) else None
        if not isinstance(path, str) or not path:
            raise BootstrapError(
                "is required (a file path)", field=f"{efield}.config.jwt_token_file"
            )
        found.append(grpc.metadata_call_credentials(JwtTokenFile(path), name="jwt_token_file"))
    if not found:
        return None
    return found[0] if len(found) == 1 else grpc.composite_call_credentials(*found)
