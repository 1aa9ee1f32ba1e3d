"""``serve``: the in-process control plane (and a ResourceStore) until interrupted."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from google.protobuf.message import Message

from xds_client.testing import (
    ControlPlane,
    ResourceFileError,
    ResourceStoreServer,
    load_resources,
)

from ._output import Output, kind_of

__all__ = ["run_serve"]


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _load(cp: ControlPlane, path: Path, previous: frozenset[str]) -> tuple[str, dict[str, int]]:
    """Serve exactly the file: types it no longer has are emptied. Returns version, counts."""
    loaded = load_resources(path)  # a bad file raises ResourceFileError: one line, exit 2
    snapshot: dict[str, Mapping[str, Message]] = dict(loaded.resources)
    for gone in previous - snapshot.keys():
        snapshot[gone] = {}
    version = cp.set_snapshot(snapshot, version=loaded.version)
    return version, {type_url: len(items) for type_url, items in loaded.resources.items()}


def run_serve(args: argparse.Namespace, out: Output, stop: threading.Event | None = None) -> int:
    """Serve ``--resources`` until SIGINT/SIGTERM (or ``stop`` is set), reloading on change."""
    path = Path(args.resources)
    stop = stop or threading.Event()
    with ExitStack() as stack:
        cp = stack.enter_context(
            ControlPlane(host=args.host, port=args.port, rest_port=args.rest_port or 0)
        )
        version, counts = _load(cp, path, frozenset())
        stamp = _stamp(path)
        _announce(out, "serving", cp, version, counts)
        if args.store_db:
            store = stack.enter_context(ResourceStoreServer(args.store_db))
            _emit(
                out,
                {"event": "serving", "service": "resource-store", "address": store.address},
                f"ResourceStore on {store.address} (database {args.store_db})",
            )
        stack.callback(_install_signal_handlers(stop))
        while not stop.wait(args.reload_interval):
            current = _stamp(path)
            if current == stamp or current is None:
                continue  # unchanged, or being replaced: look again later
            stamp = current
            try:
                version, counts = _load(cp, path, frozenset(counts))
            except ResourceFileError as exc:
                # Keep serving the last good resources; say why the new file was refused.
                _emit(
                    out,
                    {"event": "reload_failed", "error": str(exc)},
                    f"reload failed, still serving the previous resources: {exc}",
                )
                continue
            _announce(out, "reloaded", cp, version, counts)
    _emit(out, {"event": "stopped"}, "stopped")
    return 0


def _announce(
    out: Output, event: str, cp: ControlPlane, version: str, counts: Mapping[str, int]
) -> None:
    by_kind = {kind_of(type_url): n for type_url, n in counts.items()}
    summary = ", ".join(f"{n} {kind}" for kind, n in by_kind.items()) or "no resources"
    _emit(
        out,
        {
            "event": event,
            "service": "xds",
            "address": cp.address,
            "port": cp.port,
            "rest_url": cp.rest_url,
            "version": version,
            "resources": by_kind,
        },
        f"{event} xDS on {cp.address} (REST {cp.rest_url}), version {version}: {summary}",
    )


def _emit(out: Output, record: dict[str, object], text: str) -> None:
    if out.json_lines:
        out.json(record)
    else:
        out.line(text)


def _install_signal_handlers(stop: threading.Event) -> Callable[[], None]:
    """Make SIGINT/SIGTERM/SIGHUP set ``stop``; returns what restores the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may set handlers; callers then use `stop`

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    wanted = [signal.SIGINT, signal.SIGTERM]
    if os.name == "posix":
        wanted.append(signal.SIGHUP)
    previous = {signum: signal.signal(signum, handle) for signum in wanted}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore
