"""go-control-plane as a test peer: a Go program (main.go here) driven over stdin/stdout.

The program serves ADS and the per-type services, SotW and delta, from go-control-plane's
``SnapshotCache`` (ADS mode or not) and optionally a ``LinearCache`` for one type. It
logs every request it receives and every response it sends; :class:`GoControlPlane`
starts it, sends it commands and keeps that log as :class:`PeerRequest` and
:class:`PeerResponse` records.

The binary is built from the pinned ``go.mod``/``go.sum`` into ``.peers/go-control-plane``
(``make peers``); :func:`peer_binary` builds it when it is missing or older than its
sources and ``go`` is on the PATH, and otherwise says why it cannot.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from google.protobuf.message import Message

__all__ = [
    "GoControlPlane",
    "PeerRequest",
    "PeerResponse",
    "WithTtl",
    "build_env",
    "peer_binary",
]

SOURCE = Path(__file__).resolve().parent
ROOT = SOURCE.parents[2]
BINARY = ROOT / ".peers" / "go-control-plane" / "xds-peer"
BUILD_TIMEOUT = 900.0
T = TypeVar("T")


def build_env() -> dict[str, str]:
    """The environment `go build` runs in: the committed go.sum only, the local toolchain,
    and the module proxy without the ``direct`` fallback (no version-control fetches)."""
    env = {
        **os.environ,
        "GOFLAGS": "-mod=readonly -buildvcs=false",
        "GOTOOLCHAIN": "local",
        "GOWORK": "off",
        "CGO_ENABLED": "0",
    }
    go = shutil.which("go")
    if go is not None:
        proxy = subprocess.run(
            [go, "env", "GOPROXY"], capture_output=True, text=True, check=False, env=env
        ).stdout.strip()
        kept = [p for p in proxy.replace("|", ",").split(",") if p and p != "direct"]
        env["GOPROXY"] = ",".join(kept) or "off"
    return env


def _stale(binary: Path) -> bool:
    if not binary.exists():
        return True
    built = binary.stat().st_mtime
    return any(p.stat().st_mtime > built for p in (SOURCE / n for n in _SOURCES))


_SOURCES = ("main.go", "go.mod", "go.sum")


def peer_binary() -> tuple[Path | None, str]:
    """The built peer, building it first if needed; or None and the reason there is none."""
    if not _stale(BINARY):
        return BINARY, ""
    go = shutil.which("go")
    if go is None:
        return None, "go not found: the go-control-plane peer cannot be built (`make peers`)"
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [go, "build", "-o", str(BINARY), "."],
        cwd=SOURCE,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        return None, f"go build of the go-control-plane peer failed:\n{done.stderr}"
    return BINARY, ""


@dataclass(frozen=True)
class WithTtl:
    """A snapshot resource the cache serves with a TTL (SotW heartbeats come from these)."""

    resource: Message
    ttl: float
    """Seconds."""


@dataclass(frozen=True)
class PeerRequest:
    """One request as go-control-plane's callbacks saw it."""

    index: int
    """Position in the peer's event log (compare with :meth:`GoControlPlane.mark`)."""
    stream: int
    """The server's stream id (SotW and delta streams are counted apart)."""
    delta: bool
    type_url: str
    response_nonce: str
    node_id: str
    """The node of the request's stream (the wrapper fills it in when the request had none)."""
    has_node: bool
    """Delta: whether the request carried a node. SotW: always true once the stream had one
    (the server copies the first node into later requests before its callback runs)."""
    version_info: str = ""
    """SotW only."""
    resource_names: tuple[str, ...] = ()
    """SotW only."""
    subscribe: tuple[str, ...] = ()
    unsubscribe: tuple[str, ...] = ()
    initial_resource_versions: Mapping[str, str] = field(default_factory=dict)
    error_code: int | None = None
    """``error_detail.code`` of a NACK; None for an ACK or a subscription change."""
    error_message: str = ""
    at: float = 0.0
    """``time.monotonic()`` when the wrapper read it from the peer's log."""

    @property
    def is_nack(self) -> bool:
        return self.error_code is not None


@dataclass(frozen=True)
class PeerResponse:
    """One response go-control-plane sent."""

    index: int
    stream: int
    delta: bool
    type_url: str
    nonce: str
    node_id: str
    """The node of the response's stream."""
    resources: tuple[str, ...]
    """Names of the resources with a body, sorted."""
    version_info: str = ""
    """SotW ``version_info``; delta ``system_version_info``."""
    heartbeats: tuple[str, ...] = ()
    """SotW: names sent as bodiless ``Resource`` wrappers (TTL heartbeats)."""
    removed: tuple[str, ...] = ()
    """Delta ``removed_resources``."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """Delta: per-resource versions."""
    at: float = 0.0
    """``time.monotonic()`` when the wrapper read it from the peer's log."""


def _request(index: int, event: dict[str, Any]) -> PeerRequest:
    error = event.get("error_detail")
    return PeerRequest(
        index=index,
        stream=event["stream"],
        delta=event["delta"],
        type_url=event["type_url"],
        response_nonce=event["response_nonce"],
        node_id=event["node_id"],
        has_node=event["has_node"],
        version_info=event.get("version_info", ""),
        resource_names=tuple(event.get("resource_names", ())),
        subscribe=tuple(event.get("subscribe", ())),
        unsubscribe=tuple(event.get("unsubscribe", ())),
        initial_resource_versions=dict(event.get("initial_resource_versions", {})),
        error_code=None if error is None else int(error.get("code", 0)),
        error_message="" if error is None else str(error.get("message", "")),
        at=event.get("at", 0.0),
    )


def _response(index: int, event: dict[str, Any]) -> PeerResponse:
    return PeerResponse(
        index=index,
        stream=event["stream"],
        delta=event["delta"],
        type_url=event["type_url"],
        nonce=event["nonce"],
        node_id=event.get("node_id", ""),
        resources=tuple(event["resources"]),
        version_info=event.get("version_info", event.get("system_version_info", "")),
        heartbeats=tuple(event.get("heartbeats", ())),
        removed=tuple(event.get("removed", ())),
        versions=dict(event.get("versions", {})),
        at=event.get("at", 0.0),
    )


class GoControlPlane:
    """A running go-control-plane peer on 127.0.0.1; use it as a context manager.

    ``ads`` is the SnapshotCache's ADS flag (hold a named SotW request until it names
    every resource of the type in the snapshot). ``linear_type`` serves that type URL
    from a LinearCache (:meth:`upsert`, :meth:`remove`) and the rest from the snapshot
    cache. ``heartbeat`` (seconds) makes the snapshot cache resend resources that have a
    TTL at that interval, as bodiless SotW heartbeats. The gRPC server offers ADS and the
    per-type services, SotW and delta, whatever the flags.
    """

    def __init__(
        self,
        *,
        ads: bool = True,
        linear_type: str | None = None,
        heartbeat: float | None = None,
        port: int = 0,
        binary: Path | None = None,
    ) -> None:
        if binary is None:
            binary, why = peer_binary()
            if binary is None:
                raise RuntimeError(why)
        argv = [str(binary), f"-port={port}", f"-ads={'true' if ads else 'false'}"]
        if linear_type is not None:
            argv.append(f"-linear={linear_type}")
        if heartbeat is not None:
            argv.append(f"-heartbeat={int(heartbeat * 1000)}ms")
        self.linear_type = linear_type
        self._events: list[dict[str, Any]] = []
        self._stream_nodes: dict[tuple[bool, int], str] = {}
        self._replies: dict[int, dict[str, Any]] = {}
        self._changed = threading.Condition()
        self._next_id = 0
        self._write_lock = threading.Lock()
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, name="go-peer-out", daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, name="go-peer-err", daemon=True)
        self._err_reader.start()
        try:
            listening = self._wait(lambda: self._first("listening"), 30.0, "the peer to listen")
        except BaseException:
            self.close()
            raise
        self.port: int = listening["port"]
        """The port on 127.0.0.1; kept across :meth:`stop`/:meth:`start`."""

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> GoControlPlane:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Quit the peer (killing it, by its PID, if it does not end within 5 s)."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError, ValueError), self._write_lock:
                assert self._proc.stdin is not None
                self._proc.stdin.write('{"op":"quit"}\n')
                self._proc.stdin.flush()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._reader.join(timeout=5)
        self._err_reader.join(timeout=5)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "garbage", "line": line}
            event["at"] = time.monotonic()
            kind = event.get("event")
            if kind in ("request", "response"):
                stream = (event["delta"], event["stream"])
                if kind == "request" and event["has_node"]:
                    self._stream_nodes[stream] = event["node_id"]
                event["node_id"] = self._stream_nodes.get(stream, "")
            with self._changed:
                if kind == "reply" and isinstance(event.get("id"), int):
                    self._replies[event["id"]] = event
                else:
                    self._events.append(event)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _read_err(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line.rstrip("\n"))

    def _first(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in self._events if e.get("event") == kind), None)

    def _wait(self, probe: Callable[[], T | None], timeout: float, what: str) -> T:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = probe()
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self._proc.poll() is not None and not self._reader.is_alive()):
                    tail = "\n".join(self._stderr[-10:])
                    raise AssertionError(
                        f"go-control-plane peer: timed out after {timeout}s waiting for {what}"
                        f" (exit={self._proc.poll()}){': ' + tail if tail else ''}"
                    )
                self._changed.wait(min(left, 0.5))

    def _command(self, op: str, timeout: float = 30.0, **args: Any) -> None:
        with self._write_lock:
            self._next_id += 1
            ident = self._next_id
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps({"op": op, "id": ident, **args}) + "\n")
            self._proc.stdin.flush()
        reply = self._wait(lambda: self._replies.pop(ident, None), timeout, f"the reply to {op}")
        if not reply.get("ok"):
            raise RuntimeError(f"go-control-plane peer refused {op}: {reply.get('error')}")

    # ------------------------------------------------------------------ commands

    def set_snapshot(
        self,
        node_id: str,
        resources: Mapping[str, Iterable[Message | WithTtl]],
        version: str,
        *,
        versions: Mapping[str, str] | None = None,
    ) -> None:
        """Set ``node_id``'s snapshot: every type at ``version`` (or ``versions[type]``);
        types left out are served empty."""
        wire: dict[str, list[dict[str, Any]]] = {}
        for type_url, items in resources.items():
            wire[type_url] = [_wire(item) for item in items]
        self._command(
            "set_snapshot",
            node=node_id,
            version=version,
            versions=dict(versions or {}),
            resources=wire,
        )

    def clear_snapshot(self, node_id: str) -> None:
        self._command("clear_snapshot", node=node_id)

    def upsert(self, resource: Message) -> None:
        """Add or change one resource in the LinearCache (its type must be ``linear_type``)."""
        self._command(
            "upsert",
            type_url="type.googleapis.com/" + resource.DESCRIPTOR.full_name,
            value=base64.b64encode(resource.SerializeToString()).decode(),
        )

    def remove(self, name: str) -> None:
        """Remove one resource from the LinearCache."""
        self._command("remove", name=name)

    def stop(self) -> None:
        """Stop the gRPC server at once (every stream ends); the port stays ours to reuse."""
        self._command("stop")

    def start(self) -> None:
        """Serve again on the same port, with the caches as they were."""
        self._command("start")

    def restart(self) -> None:
        self._command("restart")

    # ------------------------------------------------------------------ the log

    def mark(self) -> int:
        """A position in the log: pass it as ``since`` to see only what came after."""
        with self._changed:
            return len(self._events)

    def requests(
        self,
        type_url: str | None = None,
        *,
        since: int = 0,
        delta: bool | None = None,
        node_id: str | None = None,
    ) -> list[PeerRequest]:
        """Requests received (of ``type_url``; SotW or delta only; from ``node_id``'s
        streams), oldest first."""
        with self._changed:
            events = list(enumerate(self._events))[since:]
        return [
            _request(i, e)
            for i, e in events
            if e.get("event") == "request"
            and (type_url is None or e["type_url"] == type_url)
            and (delta is None or e["delta"] == delta)
            and (node_id is None or e["node_id"] == node_id)
        ]

    def responses(
        self,
        type_url: str | None = None,
        *,
        since: int = 0,
        delta: bool | None = None,
        node_id: str | None = None,
    ) -> list[PeerResponse]:
        """Responses sent (of ``type_url``, on ``node_id``'s streams), oldest first."""
        with self._changed:
            events = list(enumerate(self._events))[since:]
        return [
            _response(i, e)
            for i, e in events
            if e.get("event") == "response"
            and (type_url is None or e["type_url"] == type_url)
            and (delta is None or e["delta"] == delta)
            and (node_id is None or e["node_id"] == node_id)
        ]

    def streams_opened(self, *, since: int = 0) -> list[tuple[int, bool, str]]:
        """(stream id, delta, type URL or "" for ADS) of each stream opened."""
        with self._changed:
            events = self._events[since:]
        return [
            (e["stream"], e["delta"], e["type_url"])
            for e in events
            if e.get("event") == "stream_open"
        ]

    def wait_for_request(
        self,
        predicate: Callable[[PeerRequest], bool] = lambda r: True,
        *,
        type_url: str | None = None,
        node_id: str | None = None,
        since: int = 0,
        timeout: float = 10.0,
    ) -> PeerRequest:
        """The first request (after ``since``) that meets ``predicate``."""
        return self._wait(
            lambda: next(
                (r for r in self.requests(type_url, since=since, node_id=node_id) if predicate(r)),
                None,
            ),
            timeout,
            f"a request{' of ' + type_url if type_url else ''} meeting {predicate}",
        )

    def wait_for_response(
        self,
        predicate: Callable[[PeerResponse], bool] = lambda r: True,
        *,
        type_url: str | None = None,
        node_id: str | None = None,
        since: int = 0,
        timeout: float = 10.0,
    ) -> PeerResponse:
        """The first response (after ``since``) that meets ``predicate``."""
        return self._wait(
            lambda: next(
                (r for r in self.responses(type_url, since=since, node_id=node_id) if predicate(r)),
                None,
            ),
            timeout,
            f"a response{' of ' + type_url if type_url else ''} meeting {predicate}",
        )

    async def wait_for_request_async(
        self,
        predicate: Callable[[PeerRequest], bool] = lambda r: True,
        *,
        type_url: str | None = None,
        node_id: str | None = None,
        since: int = 0,
        timeout: float = 10.0,
    ) -> PeerRequest:
        """:meth:`wait_for_request` without blocking the event loop."""
        return await asyncio.to_thread(
            self.wait_for_request,
            predicate,
            type_url=type_url,
            node_id=node_id,
            since=since,
            timeout=timeout,
        )

    async def wait_for_response_async(
        self,
        predicate: Callable[[PeerResponse], bool] = lambda r: True,
        *,
        type_url: str | None = None,
        node_id: str | None = None,
        since: int = 0,
        timeout: float = 10.0,
    ) -> PeerResponse:
        """:meth:`wait_for_response` without blocking the event loop."""
        return await asyncio.to_thread(
            self.wait_for_response,
            predicate,
            type_url=type_url,
            node_id=node_id,
            since=since,
            timeout=timeout,
        )


def _wire(item: Message | WithTtl) -> dict[str, Any]:
    if isinstance(item, WithTtl):
        value, ttl_ms = item.resource.SerializeToString(), round(item.ttl * 1000)
    else:
        value, ttl_ms = item.SerializeToString(), 0
    return {"value": base64.b64encode(value).decode(), "ttl_ms": ttl_ms}
