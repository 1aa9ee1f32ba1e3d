#!/usr/bin/env python3
"""Generate the thread twins of the asyncio drivers (httpcore's ``unasync`` idea).

The asyncio modules are the only hand-written twins. Each file in ``FILES`` is
rewritten with the substitution table (``async def`` -> ``def``, ``await`` -> nothing,
``AsyncX`` -> ``X``, the asyncio backend -> the thread backend, ...), gets its own
module docstring and a header saying it is generated, and is passed through
``ruff check --select I --fix`` and ``ruff format`` so the output is lint-clean.

Lines ending in ``# async-only`` and blocks between ``# begin async-only`` and
``# end async-only`` are dropped; a comment line ``# sync-only: CODE`` becomes ``CODE``.

    python tools/gen_sync.py           # rewrite the generated files
    python tools/gen_sync.py --check   # fail when one is stale or a substitution went unused
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from _ruff import tidy

ROOT = Path(__file__).resolve().parent.parent

Rule = tuple[str, str]

# Order matters: specific names before the generic ``AsyncX`` -> ``X``.
COMMON: tuple[Rule, ...] = (
    (r"xds_client\._backends\.asyncio\b", "xds_client._backends.threads"),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"__aiter__", "__iter__"),
    (r"__anext__", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\baclose\b", "close"),
    (r"\bAsync([A-Z]\w*)", r"\1"),
)


@dataclass(frozen=True)
class Twin:
    source: str
    target: str
    doc: str
    """The generated module's docstring (the source's is about asyncio)."""
    rules: tuple[Rule, ...] = field(default=())
    """Substitutions for this file only, applied before the common ones."""


FILES: tuple[Twin, ...] = (
    Twin(
        "src/xds_client/client/_async.py",
        "src/xds_client/client/_sync.py",
        "XdsClient: the thread driver of :class:`~xds_client.client._session.Session`.\n\n"
        "Generated from ``_async.py`` with the thread backend: one I/O thread runs the\n"
        "session (timers, opening streams, sending), one reader thread per stream applies\n"
        "responses to it, and one dispatcher thread runs ``on_event`` callbacks. No asyncio\n"
        "is involved, so the client also works from code inside an event loop (a notebook).",
        rules=(
            (r"An asyncio xDS client", "A thread-based xDS client"),
            (r"asynchronous=True", "asynchronous=False"),
            (
                r"; with AsyncXdsClient it runs\s+on the loop \(call ``watch`` inside it\) "
                r"and may be a coroutine function\.",
                ": a thread.",
            ),
        ),
    ),
    Twin(
        "src/xds_client/store/_async_informer.py",
        "src/xds_client/store/_informer.py",
        "Informer: a local dict of objects kept current by list+watch, on a thread.\n\n"
        "Generated from ``_async_informer.py``; the dict, the indexes and the handler rules\n"
        "are in :class:`~xds_client.store._informer_cache.InformerCache`. Handlers run on\n"
        "the informer's thread, outside its lock, so they may read the informer.",
        rules=(
            (r"A task keeping", "A thread keeping"),
            (r"the background task", "the background thread"),
            (r"for the task to end", "for the thread to end"),
            (r"; needs a running loop\)", ")"),
        ),
    ),
    Twin(
        "src/xds_client/store/_async_client.py",
        "src/xds_client/store/_client.py",
        "ResourceStoreClient: the blocking client of Grafana's ResourceStore.\n\n"
        "Generated from ``_async_client.py`` with the thread backend. Safe to call from a\n"
        "thread that runs an asyncio loop (notebooks): it uses the plain blocking gRPC\n"
        "channel, never the loop.",
        rules=(
            (r"An asyncio client of", "A blocking client of"),
            (r"\bgrpc\.aio\.", "grpc."),
            (r"Awaitable\[([^\[\]]*)\]", r"\1"),
            (
                r"\n\s*Create it inside a running loop; ``list`` and ``watch`` return async"
                r" iterators\.",
                "",
            ),
            (r"in a task\.", "in a thread."),
            (r"store\._async_informer\b", "store._informer"),
        ),
    ),
    Twin(
        "src/xds_client/transport/_async_polling_stream.py",
        "src/xds_client/transport/_polling_stream.py",
        "PollingStream: a :class:`~xds_client.transport.Stream` made of polls, for threads.\n\n"
        "Generated from ``_async_polling_stream.py``; the scheduling rules are in\n"
        ":class:`~xds_client.transport._polling.PollScheduler`.",
        rules=((r"Awaitable\[([^\[\]]*)\]", r"\1"),),
    ),
    Twin(
        "src/xds_client/transport/_async_grpc.py",
        "src/xds_client/transport/_grpc.py",
        "Bidirectional gRPC streams for xDS on ``grpc`` (threads).\n\n"
        "Generated from ``_async_grpc.py`` with the thread backend: gRPC's own thread\n"
        "drains the request queue; a blocking ``recv(None)`` reads the call in the\n"
        "caller's thread, and a reader thread starts only for a ``recv`` with a timeout.\n"
        "What both share is in :mod:`._grpc_common`.",
        rules=(
            (r"\bgrpc\.aio\.", "grpc."),
            (r"a reader task fills", "a reader thread fills"),
            (r"for asyncio: one ``grpc\.aio`` channel", "for threads: one ``grpc`` channel"),
        ),
    ),
    Twin(
        "src/xds_client/transport/_async_fetch.py",
        "src/xds_client/transport/_fetch.py",
        "Unary gRPC ``Fetch*`` polling on ``grpc`` (threads).\n\n"
        "Generated from ``_async_fetch.py`` with the thread backend; what both share is in\n"
        ":mod:`._fetch_common`, the polling rules in :mod:`._polling`.",
        rules=(
            (r"\bgrpc\.aio\.", "grpc."),
            (r"transport\._async_(grpc|polling_stream)\b", r"transport._\1"),
            (r"methods from asyncio;", "methods from threads;"),
        ),
    ),
    Twin(
        "src/xds_client/transport/_async_rest.py",
        "src/xds_client/transport/_rest.py",
        "REST-JSON polling for threads, over the standard library's ``http.client``.\n\n"
        "Generated from ``_async_rest.py`` with the thread backend: each poll runs in the\n"
        "polling stream's caller. The HTTP poster is :mod:`._rest_http`, the wire format\n"
        ":mod:`._rest_codec`, the polling rules :mod:`._polling`.",
        rules=(
            (r"transport\._async_polling_stream\b", "transport._polling_stream"),
            (r"server from asyncio;", "server from threads;"),
            (r"``AsyncRestTransport\(", "``RestTransport("),
            (r" Polls run in a worker thread\.", ""),
        ),
    ),
    Twin(
        "src/xds_client/lrs/_async_client.py",
        "src/xds_client/lrs/_client.py",
        "LrsClient: load reports to an LRS server, on threads.\n\n"
        "Generated from ``_async_client.py`` with the thread backend: one thread runs the\n"
        "stream and the report timer, one reads the server's responses, and gRPC's own\n"
        "thread writes the requests. Every decision is the sans-I/O\n"
        ":class:`~xds_client.lrs._reporter.LoadReporter`'s.",
        rules=(
            (r"An asyncio client of", "A blocking client of"),
            (
                r"\n\s*Create it inside a running loop; use ``async with`` or"
                r" ``start\(\)``/``aclose\(\)``\.",
                "\n\n    Use ``with`` or ``start()``/``close()``.",
            ),
        ),
    ),
    Twin(
        "src/xds_client/graph/_async_watch.py",
        "src/xds_client/graph/_watch.py",
        "ConfigWatch: complete snapshots of one listener's configuration, for threads.\n\n"
        "Generated from ``_async_watch.py`` with the thread backend. The watches the graph\n"
        "needs are opened and closed by :class:`~xds_client.graph._follower._Follower`.",
        rules=(
            (r"as an async iterator", "as a blocking iterator"),
            (r" Create it inside the\s+running loop\.", ""),
        ),
    ),
)

TESTS: tuple[Twin, ...] = (
    Twin(
        "tests/transport/test_async_polling_stream.py",
        "tests/transport/test_polling_stream.py",
        "PollingStream on a scripted poster (generated from test_async_polling_stream.py).",
        rules=((r"transport\._async_polling_stream\b", "transport._polling_stream"),),
    ),
    Twin(
        "tests/store/test_async_client.py",
        "tests/store/test_client_sync.py",
        "ResourceStoreClient against the in-process SQLite ResourceStoreServer (generated\n"
        "from test_async_client.py; the sync-only tests are in test_client_sync_only.py).",
    ),
    Twin(
        "tests/store/test_async_auth_quota.py",
        "tests/store/test_auth_quota.py",
        "Grafana's service authentication, quotas and newer calls on ResourceStoreClient\n"
        "(generated from test_async_auth_quota.py), against both test servers.",
    ),
    Twin(
        "tests/store/test_async_edges.py",
        "tests/store/test_edges.py",
        "Issue 26's ResourceStore edges on ResourceStoreClient (generated from\n"
        "test_async_edges.py): ghosts after a 410, a field-selector watch that relisted\n"
        "without backoff, and bulk's errors and modes.",
    ),
    Twin(
        "tests/store/test_async_informer.py",
        "tests/store/test_informer.py",
        "Informer against the in-process store (generated from test_async_informer.py).\n\n"
        "The informer never gives up (client-go's reflector): it relists after any error and\n"
        "reports the differences. Handlers may read the informer they belong to: the sync\n"
        "informer used to call them under its non-reentrant lock, so ``informer.get()`` in a\n"
        "handler deadlocked.",
    ),
    Twin(
        "tests/transport/_async_stream_checks.py",
        "tests/transport/_stream_checks.py",
        "Checks shared by the thread transport tests (generated from _async_stream_checks.py).",
        rules=((r"Awaitable\[([^\[\]]*)\]", r"\1"),),
    ),
    Twin(
        "tests/transport/test_async_fetch_transport.py",
        "tests/transport/test_fetch_transport.py",
        "FetchTransport against a local gRPC server (generated from "
        "test_async_fetch_transport.py).",
        rules=(
            (r"transport\._async_fetch\b", "transport._fetch"),
            (r"\._async_stream_checks\b", "._stream_checks"),
        ),
    ),
    Twin(
        "tests/transport/test_async_rest_transport.py",
        "tests/transport/test_rest_transport.py",
        "RestTransport against a local stub server (generated from test_async_rest_transport.py).",
        rules=(
            (r"transport\._async_rest\b", "transport._rest"),
            (r"\._async_stream_checks\b", "._stream_checks"),
        ),
    ),
    Twin(
        "tests/transport/test_async_grpc_transport.py",
        "tests/transport/test_grpc_transport.py",
        "GrpcTransport against a scripted gRPC server (generated from "
        "test_async_grpc_transport.py).",
        rules=(
            (r"transport\._async_grpc\b", "transport._grpc"),
            (r"\._async_stream_checks\b", "._stream_checks"),
        ),
    ),
    Twin(
        "tests/lrs/test_async_lrs_client.py",
        "tests/lrs/test_lrs_client.py",
        "LrsClient against the in-process ControlPlane's LRS side (generated from\n"
        "test_async_lrs_client.py).",
    ),
    Twin(
        "tests/graph/test_async_config_watch.py",
        "tests/graph/test_config_watch.py",
        "ConfigWatch on XdsClient (generated from test_async_config_watch.py).",
        rules=((r"\b(wait_for_\w+)_async\b", r"\1"),),
    ),
    Twin(
        "tests/interop/test_async_go_control_plane.py",
        "tests/interop/test_go_control_plane.py",
        "XdsClient against go-control-plane v0.14.0 (generated from\n"
        "test_async_go_control_plane.py; the peer is tests/peers/go_control_plane).",
        rules=((r"\b(wait_for_\w+)_async\b", r"\1"),),
    ),
)

HEADER = "# Generated from {source} by tools/gen_sync.py: do not edit.\n"
_ASYNC_ONLY_LINE = re.compile(r".*#\s*async-only\s*$")
_SYNC_ONLY = re.compile(r"^(\s*)#\s*sync-only:\s?(.*)$")


def _drop_markers(text: str) -> str:
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped == "# begin async-only":
            skipping = True
            continue
        if stripped == "# end async-only":
            skipping = False
            continue
        if skipping or _ASYNC_ONLY_LINE.match(line):
            continue
        sync_only = _SYNC_ONLY.match(line)
        out.append(f"{sync_only.group(1)}{sync_only.group(2)}\n" if sync_only else line)
    return "".join(out)


def _replace_docstring(text: str, doc: str) -> str:
    tree = ast.parse(text)
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        raise SystemExit("a twin source must start with a module docstring")
    lines = text.splitlines(keepends=True)
    assert first.end_lineno is not None
    return f'"""{doc}\n"""\n' + "".join(lines[first.end_lineno :])


def generate(twin: Twin, used: dict[Rule, int]) -> str:
    """The thread twin of ``twin.source``; counts each rule's matches in ``used``."""
    text = (ROOT / twin.source).read_text()
    text = _replace_docstring(_drop_markers(text), twin.doc)
    for rule in (*twin.rules, *COMMON):
        text, count = re.subn(rule[0], rule[1], text)
        used[rule] = used.get(rule, 0) + count
    return HEADER.format(source=twin.source.removeprefix("src/")) + tidy(text, twin.target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail instead of writing")
    args = parser.parse_args(argv)
    used: dict[Rule, int] = {}
    problems: list[str] = []
    for twin in (*FILES, *TESTS):
        text = generate(twin, used)
        path = ROOT / twin.target
        if args.check:
            if not path.exists() or path.read_text() != text:
                problems.append(f"{twin.target} is stale: run python tools/gen_sync.py")
        elif not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {twin.target}")
    for rule, count in used.items():
        if count == 0:
            problems.append(f"substitution {rule[0]!r} -> {rule[1]!r} went unused")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
