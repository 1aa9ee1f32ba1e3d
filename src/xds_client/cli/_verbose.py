"""``-v``: every xDS request and response on stderr, secrets redacted.

A :class:`~xds_client.transport.Transport` that wraps the real one and prints what
passes (``-v``: one line per message; ``-vv``: the message as proto JSON too), as
grpcurl's ``-v`` does. Sensitive fields are redacted by ``to_dict``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any, TextIO

from xds_client.client import to_dict
from xds_client.transport import Request, Response, Stream, StreamSpec, Transport

from ._output import kind_of

__all__ = ["VerboseTransport"]


class VerboseTransport:
    """Wraps ``inner``; writes each message of each stream to ``sink``."""

    def __init__(self, inner: Transport, sink: TextIO, level: int) -> None:
        self._inner = inner
        self._sink = sink
        self._level = level
        self._lock = threading.Lock()

    def open(self, spec: StreamSpec) -> Stream:
        self._say(f"open {spec.method}{' (delta)' if spec.delta else ''}", None)
        # Decoded responses, not raw bytes: what is printed must go through redaction.
        return _VerboseStream(self._inner.open(replace(spec, raw_resources=False)), self)

    def probe(self, timeout: float) -> bool:
        return self._inner.probe(timeout)

    def close(self) -> None:
        self._inner.close()

    def _say(self, line: str, message: Any) -> None:
        text = f"{time.strftime('%H:%M:%S')} {line}"
        if self._level > 1 and message is not None and hasattr(message, "DESCRIPTOR"):
            text += "\n" + json.dumps(to_dict(message), indent=2, default=str)
        with self._lock:
            self._sink.write(text + "\n")
            self._sink.flush()


class _VerboseStream:
    def __init__(self, inner: Stream, owner: VerboseTransport) -> None:
        self._inner = inner
        self._owner = owner

    def send(self, request: Request) -> None:
        self._owner._say("> " + _summary(request), request)
        self._inner.send(request)

    def recv(self, timeout: float | None) -> Response | None:
        response = self._inner.recv(timeout)
        if response is not None:
            self._owner._say("< " + _summary(response), response)
        return response

    def close(self) -> None:
        self._inner.close()


def _summary(message: Any) -> str:
    """One line: what kind of message, its type, version, nonce, names or count."""
    name = type(message).__name__
    parts = [name, kind_of(getattr(message, "type_url", "") or "")]
    for field in ("version_info", "system_version_info", "response_nonce", "nonce"):
        value = getattr(message, field, "")
        if value:
            parts.append(f"{field}={value}")
    names = list(getattr(message, "resource_names", ()) or ())
    names += list(getattr(message, "resource_names_subscribe", ()) or ())
    if names:
        parts.append("names=" + ",".join(names))
    resources = getattr(message, "resources", None)
    if resources is not None:
        parts.append(f"resources={len(resources)}")
    if message.HasField("error_detail") if hasattr(message, "error_detail") else False:
        parts.append(f"NACK: {message.error_detail.message}")
    return "  ".join(p for p in parts if p)
