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

from xds_client.errors import RuleViolationError
from xds_client.protocol import validate
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


def _load(
    cp: ControlPlane,
    path: Path,
    previous: frozenset[str],
    *,
    refuse_invalid: bool,
    out: Output,
    pinned: str | None = None,
    reload: int = 0,
) -> tuple[str, dict[str, int], str | None]:
    """Serve exactly the file: types it no longer has are emptied.

    Returns the version served, the count per type and the file's own ``version_info``
    (``pinned`` is the one it had before this reload, ``reload`` counts reloads).

    Resources that break their proto's rules are served with a warning (a test may want
    a client to NACK them), or refused with ``--validate``.
    """
    loaded = load_resources(path)  # a bad file raises ResourceFileError: one line, exit 2
    problems = _rule_violations(loaded.resources)
    if problems and refuse_invalid:
        raise ResourceFileError(f"{path}: {problems[0]} (--validate refuses invalid resources)")
    for problem in problems:
        _warn(out, f"{path}: {problem} (served anyway; --validate refuses such a file)")
    snapshot: dict[str, Mapping[str, Message]] = dict(loaded.resources)
    for gone in previous - snapshot.keys():
        snapshot[gone] = {}
    version = loaded.version
    if version is not None and reload and version == pinned:
        # The file pins a version it already had: a changed file still needs a new one,
        # or clients (Envoy among them) cannot tell the change from a resend.
        version = f"{version}.{reload}"
    version = cp.set_snapshot(snapshot, version=version)
    counts = {type_url: len(items) for type_url, items in loaded.resources.items()}
    return version, counts, loaded.version


def _rule_violations(resources: Mapping[str, Mapping[str, Message]]) -> list[str]:
    problems = []
    for items in resources.values():
        for message in items.values():
            try:
                validate(message)
            except RuleViolationError as exc:
                problems.append(str(exc))
    return problems


def _warn(out: Output, text: str) -> None:
    if out.json_lines:
        out.json({"event": "warning", "error": text})
    else:
        out.note(f"warning: {text}")


def run_serve(args: argparse.Namespace, out: Output, stop: threading.Event | None = None) -> int:
    """Serve ``--resources`` until SIGINT/SIGTERM (or ``stop`` is set), reloading on change."""
    path = Path(args.resources)
    stop = stop or threading.Event()
    with ExitStack() as stack:
        cp = stack.enter_context(
            ControlPlane(host=args.host, port=args.port, rest_port=args.rest_port or 0)
        )
        refuse = bool(getattr(args, "validate", False))
        version, counts, pinned = _load(cp, path, frozenset(), refuse_invalid=refuse, out=out)
        reloads = 0
        stamp = _stamp(path)
        _announce(out, "serving", cp, version, counts)
        store_port = getattr(args, "store_port", None)
        if args.store_db or store_port is not None:
            database = _database(args.store_db)
            store = stack.enter_context(ResourceStoreServer(database, port=store_port or 0))
            _emit(
                out,
                {
                    "event": "serving",
                    "service": "resource-store",
                    "address": store.address,
                    "database": database,
                },
                f"ResourceStore on {store.address} (database {database})",
            )
        stack.callback(_install_signal_handlers(stop))
        while not stop.wait(args.reload_interval):
            current = _stamp(path)
            if current == stamp or current is None:
                continue  # unchanged, or being replaced: look again later
            stamp = current
            try:
                reloads += 1
                version, counts, pinned = _load(
                    cp,
                    path,
                    frozenset(counts),
                    refuse_invalid=refuse,
                    out=out,
                    pinned=pinned,
                    reload=reloads,
                )
            except ResourceFileError as exc:
                # Keep serving the last good resources; say why the new file was refused.
                _emit(
                    out,
                    {"event": "reload_failed", "error": str(exc)},
                    f"reload failed, still serving the previous resources: {exc}",
                )
                continue
            note = None
            if pinned is not None and version != pinned:
                note = f"the file still says version_info {pinned!r}; edit it to choose"
            _announce(out, "reloaded", cp, version, counts, note=note)
    _emit(out, {"event": "stopped"}, "stopped")
    return 0


def _database(store_db: str | None) -> str:
    """The ResourceStore's database: in memory unless a file is named; a file by its full path."""
    if not store_db or store_db == ":memory:":
        return ":memory:"
    return str(Path(store_db).resolve())  # say where the file is, wherever we were started


def _announce(
    out: Output,
    event: str,
    cp: ControlPlane,
    version: str,
    counts: Mapping[str, int],
    *,
    note: str | None = None,
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
            "note": note,
        },
        f"{event} xDS on {cp.address} (REST {cp.rest_url}), version {version}: {summary}"
        + (f" ({note})" if note else ""),
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
