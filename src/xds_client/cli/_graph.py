"""``graph LISTENER``: the listener's whole configuration as a tree (or JSON)."""

from __future__ import annotations

import argparse
import queue

from xds_client.errors import WaitTimeoutError

from ._args import CommandError
from ._output import Output
from ._xds import _make_client

__all__ = ["run_graph"]


def run_graph(args: argparse.Namespace, out: Output) -> int:
    """Print the first complete snapshot; exit 1 when part of the graph has errors."""
    # A complete snapshot is itself the real xDS answer: the answer queue is not read.
    answers: queue.SimpleQueue[object] = queue.SimpleQueue()
    with _make_client(args, answers) as client, client.watch_config(args.listener) as watch:
        try:
            snapshot = watch.get(timeout=args.timeout)
        except WaitTimeoutError as exc:
            raise CommandError(str(exc)) from None
    if out.json_lines:
        out.json(snapshot.to_dict())
    else:
        out.out.write(snapshot.to_text())
        out.out.flush()
    if snapshot.errors:
        out.err.write(f"xds-client: {len(snapshot.errors)} resource(s) of the graph have errors\n")
        out.err.flush()
        return 1
    return 0
