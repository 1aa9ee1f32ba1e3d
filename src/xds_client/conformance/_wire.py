"""A thin raw stream over ``grpc.aio``: the checker sends exactly the bytes it means to.

The library's own transport normalises what it sends (a client that behaves);
a checker must also send stale nonces, odd type URLs, unknown fields and huge
names. Every message on every stream of a check is kept in order, so a failed
check can show the exchange that proves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc
import grpc.aio
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError, Message

from xds_client.client import redact, to_dict

__all__ = ["Ended", "RawStream", "Wire"]

Request = DiscoveryRequest | DeltaDiscoveryRequest
Response = DiscoveryResponse | DeltaDiscoveryResponse
# The most messages a failure shows (the first ones and the last ones).
_EVIDENCE_HEAD = 6
_EVIDENCE_TAIL = 14
# Long strings (a huge resource name) are cut in the evidence.
_MAX_TEXT = 200


@dataclass(frozen=True)
class Ended:
    """The server ended a stream: its gRPC status."""

    code: grpc.StatusCode
    details: str

    def __str__(self) -> str:
        return f"{self.code.name}: {self.details}" if self.details else self.code.name


@dataclass(frozen=True)
class _Entry:
    stream: int
    method: str
    direction: Literal["sent", "received", "ended"]
    at: float
    message: Message | bytes | Ended | Any


def _identity(data: bytes) -> bytes:
    return data


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return f"{value[:_MAX_TEXT]}... ({len(value)} characters)"
    if isinstance(value, list):
        return [_cut(v) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    return value


def _render(message: Any) -> Any:
    if isinstance(message, Ended):
        return {"status": message.code.name, "details": message.details}
    if hasattr(message, "status") and hasattr(message, "body"):  # a REST HttpAnswer
        text = message.body[:_MAX_TEXT].decode("utf-8", "replace")
        return {"http_status": message.status, "reason": message.reason, "body": text}
    if isinstance(message, bytes):
        return {"bytes": len(message), "hex": message[:64].hex()}
    try:
        return _cut(to_dict(message))  # secrets redacted as the CLI does
    except Exception:  # an Any we cannot decode: show it undecoded, still redacted
        return _cut(MessageToDict(redact(message), preserving_proto_field_name=True))


class Wire:
    """The streams of one check on one channel, and the record of their messages."""

    def __init__(
        self,
        channel: grpc.aio.Channel | None,
        metadata: Sequence[tuple[str, str]],
        new_channel: Callable[[], grpc.aio.Channel] | None = None,
    ) -> None:
        self.channel = channel
        self.metadata = tuple(metadata)
        self._new_channel = new_channel
        self._own_channels: list[grpc.aio.Channel] = []
        self._entries: list[_Entry] = []
        self._streams: list[RawStream] = []
        self._start = time.monotonic()

    def open(self, method: str, *, delta: bool, own_connection: bool = False) -> RawStream:
        """Start a bidi stream on ``method`` (ADS or a per-type service); with
        ``own_connection``, on a channel (an HTTP/2 connection) of its own."""
        channel = self.channel
        if own_connection or channel is None:
            if self._new_channel is None:
                raise RuntimeError("this Wire cannot open channels")
            channel = self._new_channel()
            self._own_channels.append(channel)
        stream = RawStream(self, len(self._streams) + 1, method, delta=delta, channel=channel)
        self._streams.append(stream)
        return stream

    def note(
        self,
        stream: int,
        method: str,
        direction: Literal["sent", "received", "ended"],
        message: Message | bytes | Ended | Any,
    ) -> None:
        self._entries.append(
            _Entry(stream, method, direction, round(time.monotonic() - self._start, 3), message)
        )

    def evidence(self) -> tuple[dict[str, Any], ...]:
        """What was sent and received, oldest first (long exchanges: both ends)."""
        entries = self._entries
        if len(entries) > _EVIDENCE_HEAD + _EVIDENCE_TAIL:
            entries = entries[:_EVIDENCE_HEAD] + entries[-_EVIDENCE_TAIL:]
        return tuple(
            {
                "stream": e.stream,
                "method": e.method,
                "direction": e.direction,
                "at": e.at,
                "message": _render(e.message),
            }
            for e in entries
        )

    async def close(self) -> None:
        """Cancel every stream of the check."""
        for stream in self._streams:
            await stream.close()
        for channel in self._own_channels:
            await channel.close()


class RawStream:
    """One bidi stream: ``send`` messages or bytes, ``recv`` parsed responses."""

    def __init__(
        self, wire: Wire, number: int, method: str, *, delta: bool, channel: grpc.aio.Channel
    ) -> None:
        self.wire = wire
        self.number = number
        self.method = method
        self.delta = delta
        self._parse = DeltaDiscoveryResponse.FromString if delta else DiscoveryResponse.FromString
        factory = channel.stream_stream(
            method, request_serializer=_identity, response_deserializer=_identity
        )
        self._call: grpc.aio.StreamStreamCall[bytes, bytes] = factory(metadata=wire.metadata)
        self._inbox: asyncio.Queue[Response | Ended] = asyncio.Queue()
        self.ended: Ended | None = None
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while True:
                data = await self._call.read()
                if data is grpc.aio.EOF:
                    break
                assert isinstance(data, bytes)
                try:
                    response = self._parse(data)
                except DecodeError:
                    self.wire.note(self.number, self.method, "received", data)
                    continue
                self.wire.note(self.number, self.method, "received", response)
                await self._inbox.put(response)
        except grpc.aio.AioRpcError as exc:
            end = Ended(exc.code(), exc.details() or "")
        except asyncio.CancelledError:
            return
        else:
            code = await self._call.code()
            end = Ended(code, await self._call.details() or "")
        self.ended = end
        self.wire.note(self.number, self.method, "ended", end)
        await self._inbox.put(end)

    async def send(self, message: Request | bytes, *, timeout: float = 5.0) -> bool:
        """Send a request (or raw bytes); False if the stream is over or the write hung."""
        data = message if isinstance(message, bytes) else message.SerializeToString()
        self.wire.note(self.number, self.method, "sent", message)
        if self.ended is not None:
            return False
        try:
            await asyncio.wait_for(self._call.write(data), timeout)
        except (asyncio.TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
            return False
        return True

    async def recv(self, timeout: float) -> Response | Ended | None:
        """The next response, the stream's end, or None when nothing came within ``timeout``."""
        if not self._inbox.empty():
            return self._inbox.get_nowait()
        if self.ended is not None:
            return self.ended
        try:
            return await asyncio.wait_for(self._inbox.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def drain(self, window: float, *, limit: float | None = None) -> list[Response | Ended]:
        """Everything that arrives until ``window`` seconds pass without a message, or
        ``limit`` seconds in all (default: twice the window, at least half a second more;
        TTL heartbeats may never leave the stream quiet)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + (limit if limit is not None else max(2 * window, window + 0.5))
        got: list[Response | Ended] = []
        while (left := end - loop.time()) > 0:
            item = await self.recv(min(window, left))
            if item is None:
                return got
            got.append(item)
            if isinstance(item, Ended):
                return got
        return got

    async def close(self) -> None:
        """Cancel the call (idempotent)."""
        self._call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self._reader
