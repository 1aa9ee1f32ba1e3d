"""The ``xds-client`` command line (also ``python -m xds_client``).

Commands: ``serve``, ``watch``, ``fetch``, ``dump``, ``graph``, ``store
get|list|watch|create|update|delete|health|kinds|quota``, ``conform``, ``load``,
``completion`` and ``demo``; see ``docs/cli.md``.
Every failure is one line on stderr and a non-zero exit status (2 for bad
usage: unknown type, bad address, selector or file), never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from typing import TextIO

from xds_client.errors import UsageError, XdsClientError

from ._args import SERVER_ENV, CommandError, UsageExit, build_parser
from ._hints import cli_words

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    # gRPC's C core logs to stderr (connection chatter, and at ERROR a bad PEM file or a
    # port in use) in its own format; our one-line errors already say it in CLI words.
    # Only effective before grpc is imported; GRPC_VERBOSITY=error (or debug) asks for them.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    return run(argv, sys.stdout, sys.stderr)


def run(argv: Sequence[str] | None, stdout: TextIO, stderr: TextIO) -> int:
    """:func:`main` with explicit streams."""
    try:
        # argparse prints --help and usage errors on sys.stdout / sys.stderr.
        with redirect_stdout(stdout), redirect_stderr(stderr):
            args = build_parser().parse_args(argv)
    except UsageExit as exc:
        return exc.code
    # The library logs NACKs and reconnections; the CLI prints them as events instead,
    # unless --log-level asks for the library's own lines too.
    library_log = logging.getLogger("xds_client")
    level = library_log.level
    wanted = getattr(args, "log_level", None) or "error"
    library_log.setLevel(wanted.upper())
    handler: logging.Handler | None = None
    verbosity = os.environ.get("GRPC_VERBOSITY")
    if wanted != "error":
        handler = logging.StreamHandler(stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        library_log.addHandler(handler)
        if wanted == "debug" and os.environ.get("GRPC_VERBOSITY") == "NONE":
            os.environ["GRPC_VERBOSITY"] = "DEBUG"  # asked for: gRPC's own lines too
    try:
        return _dispatch(args, stdout, stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `xds-client watch ... | head`: the reader left; that is not an error of ours.
        return 0
    except Exception as exc:
        code, text = _describe(exc)
        stderr.write(f"xds-client: error: {text}\n")
        stderr.flush()
        return code
    finally:
        library_log.setLevel(level)
        if handler is not None:
            library_log.removeHandler(handler)
            if verbosity is not None:
                os.environ["GRPC_VERBOSITY"] = verbosity  # for whatever runs after us


def _describe(exc: Exception) -> tuple[int, str]:
    """Exit status and one-line message of a failure."""
    text = cli_words(" ".join(str(exc).split())) or type(exc).__name__
    if isinstance(exc, CommandError):
        return exc.code, text
    if isinstance(exc, UsageError):
        return 2, text
    if isinstance(exc, XdsClientError):
        return 1, text
    if isinstance(exc, OSError):
        return 1, text
    # Anything else is a bug of ours; still one line, with the type to report it by.
    return 1, f"{type(exc).__name__}: {text}"


def _dispatch(args: object, stdout: TextIO, stderr: TextIO) -> int:
    # Each command's module is imported when it runs: `xds-client --help` should not pay
    # for grpc and the Envoy protos, nor a store command for the xDS client.
    from ._output import Output

    assert isinstance(args, argparse.Namespace)
    output = getattr(args, "output", None) or ("json" if getattr(args, "json", False) else "text")
    out = Output(stdout, stderr, format=output)
    out.headers = not getattr(args, "no_headers", False)
    command = args.command
    if command in ("watch", "fetch", "dump", "graph") and not (args.server or args.bootstrap):
        args.server = os.environ.get(SERVER_ENV) or None  # like kubectl's current context
    if command == "watch":
        from ._xds import run_watch

        return run_watch(args, out)
    if command == "fetch":
        from ._xds import run_fetch

        return run_fetch(args, out)
    if command == "dump":
        from ._xds import run_dump

        return run_dump(args, out)
    if command == "serve":
        from ._serve import run_serve

        return run_serve(args, out)
    if command == "graph":
        from ._graph import run_graph

        return run_graph(args, out)
    if command == "conform":
        from ._conform import run_conform

        return run_conform(args, stdout)
    if command == "load":
        from ._load import run_load

        return run_load(args, out)
    if command == "store":
        from ._store import run_store

        return run_store(args, out)
    if command == "completion":
        from ._completion import run_completion

        return run_completion(args, out)
    from ._demo import run_demo

    return run_demo(args, out)
