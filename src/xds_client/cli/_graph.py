"""``graph LISTENER``: the listener's whole configuration as a tree (or JSON)."""

from __future__ import annotations

import argparse
import queue
import time

from xds_client.errors import WaitTimeoutError
from xds_client.graph import ResourceKey
from xds_client.protocol import ResourceDoesNotExist

from ._args import CommandError
from ._output import Output, Progress
from ._xds import _Answered, _Answers, _make_client, _resolve, _where, uses_tls

__all__ = ["run_graph"]


def run_graph(args: argparse.Namespace, out: Output) -> int:
    """Print the first complete snapshot; exit 1 when part of the graph has errors."""
    # A complete snapshot is itself the real xDS answer. The listener's own events (one
    # more watch of the name watch_config subscribes anyway) tell a refused port, a
    # server that is not xDS or a TLS mistake at once, as watch, fetch and dump do.
    events: queue.SimpleQueue[object] = queue.SimpleQueue()
    listener_type = _resolve("lds", args.api)
    answers = _Answers([listener_type], tls=uses_tls(args))
    progress = Progress(out.err)
    progress.update(f"following listener {args.listener} on {_where(args)} ...")
    deadline = time.monotonic() + args.timeout
    try:
        with (
            _make_client(args, events) as client,
            client.watch(listener_type, args.listener, on_event=events.put),
            client.watch_config(args.listener) as watch,
        ):
            while True:
                try:
                    snapshot = watch.get(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                    break
                except WaitTimeoutError:
                    while not events.empty():
                        event = events.get()
                        answers.note(event)  # raises for a stream that never answered
                        if isinstance(event, ResourceDoesNotExist) or (
                            # SotW: an accepted LDS response holds every listener its
                            # request named (the full state), and graph names only this
                            # one, so its absence is the answer (no 15 s timer to wait).
                            isinstance(event, _Answered)
                            and event.accepted
                            and event.type_url == listener_type.type_url
                            and not args.delta
                            and args.listener not in client.resources(listener_type)
                        ):
                            raise _missing(args) from None
                    if time.monotonic() >= deadline:
                        raise CommandError(
                            f"no complete config of listener {args.listener!r} within "
                            f"{args.timeout:g}s; still watching: "
                            f"{sorted(map(str, watch.subscribed))}"
                        ) from None
    finally:
        progress.done()
    listener = snapshot.statuses.get(ResourceKey("lds", args.listener))
    if listener is not None and listener.state in ("does_not_exist", "removed"):
        raise _missing(args)  # the snapshot came before the listener's own event
    summary = snapshot.to_dict()
    if out.format == "json":
        out.json(summary)
    elif out.format == "yaml":
        out.yaml(summary)
    elif out.format == "name":
        # kubectl's -o name: every resource of the graph, kind/name.
        for key in sorted({*summary["versions"], *summary["errors"]}):
            out.line(key.replace(":", "/", 1))
    else:
        out.out.write(snapshot.to_text())
        out.out.flush()
        if out.format == "wide":
            rows = [
                (key.split(":", 1)[0].upper(), key.split(":", 1)[1],
                 summary["versions"].get(key, ""), summary["errors"].get(key, ""))
                for key in sorted({*summary["versions"], *summary["errors"]})
            ]  # fmt: skip
            out.line()
            out.table(("KIND", "NAME", "VERSION", "ERROR"), rows)
    if snapshot.errors:
        out.err.write(f"xds-client: {len(snapshot.errors)} resource(s) of the graph have errors\n")
        out.err.flush()
        return 1
    return 0


def _missing(args: argparse.Namespace) -> CommandError:
    return CommandError(f"listener {args.listener!r} does not exist on {_where(args)}")
