"""``xds-client conform``: check an xDS server against the protocol, rule by rule.

Exit status 0 when every MUST check passed, 1 when one failed (SHOULD
failures are reported only), 2 for bad usage. See docs/conformance.md.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

__all__ = ["add_parser", "run_conform"]

_FORMATS = ("table", "json", "junit")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _server(text: str) -> str:
    from ._args import check_address

    try:
        return check_address(text, rest=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: Any, security_options: Any) -> None:
    """Add ``conform`` to the sub-commands (``security_options`` adds the TLS/token flags)."""
    conform = sub.add_parser(
        "conform",
        help="check an xDS server against the protocol, rule by rule (SotW and delta)",
        description="Check an xDS management server against the xDS protocol. Exit status "
        "0 when every MUST check passes, 1 when one fails, 2 for bad usage.",
    )
    conform.add_argument(
        "--server",
        "-s",
        metavar="HOST:PORT",
        type=_server,
        help="the xDS server to check (http(s)://HOST:PORT: a REST-JSON server, polled)",
    )
    conform.add_argument(
        "--protocol", choices=("sotw", "delta", "both"), default="both", help="default both"
    )
    conform.add_argument(
        "--transport",
        choices=("ads", "per-type", "both"),
        default="both",
        help="ADS, the per-type services, or both (default)",
    )
    conform.add_argument(
        "--node-id", default="xds-conformance", metavar="ID", help="node id of the requests"
    )
    conform.add_argument(
        "--cluster", default="xds-conformance", metavar="C", help="node cluster of the requests"
    )
    conform.add_argument(
        "--second-node-id",
        metavar="ID",
        help="another node the server serves (best: different resources), for the per-node "
        "checks (without it they are skipped)",
    )
    conform.add_argument(
        "--only",
        nargs="+",
        action="extend",
        default=[],
        metavar="ID",
        help="run only these checks (ids or globs, e.g. 'sotw-*')",
    )
    conform.add_argument(
        "--skip", nargs="+", action="extend", default=[], metavar="ID", help="skip these checks"
    )
    conform.add_argument(
        "--change-command",
        metavar="CMD",
        help="runs 'CMD update TYPE_URL NAME' or 'CMD delete TYPE_URL NAME' through the shell "
        "to make the server change a resource it serves; exit 0 once it serves the change "
        "(without it, checks that need a push are skipped)",
    )
    conform.add_argument(
        "--timeout",
        type=_seconds,
        default=2.0,
        metavar="S",
        help="seconds to wait for a response the server owes (default 2)",
    )
    conform.add_argument(
        "--quiet-period",
        type=_seconds,
        default=0.3,
        metavar="S",
        help="seconds of silence that mean 'nothing more is coming' (default 0.3)",
    )
    conform.add_argument(
        "--output", "-o", choices=_FORMATS, default="table", help="table (default), json, junit"
    )
    conform.add_argument(
        "--no-evidence",
        dest="evidence",
        action="store_false",
        help="table: leave out the wire exchange under each failure",
    )
    conform.add_argument("--list", action="store_true", help="list the checks and exit")
    security_options(conform)


def run_conform(args: argparse.Namespace, stdout: Any) -> int:
    """Run the checks the arguments select; print the report; return the exit status."""
    from xds_client.conformance import (
        CommandDriver,
        Options,
        Protocol,
        TransportKind,
        arun,
        render,
        select,
    )
    from xds_client.transport import ServerTarget

    from ._security import channel_options
    from ._xds import CommandError

    protocols: tuple[Protocol, ...] = (
        ("sotw", "delta") if args.protocol == "both" else (args.protocol,)
    )
    if args.list:
        listed = ("sotw", "delta", "rest") if args.protocol == "both" else protocols
        for check in select(args.only, args.skip, listed):
            stdout.write(f"{check.id:<28} {check.level:<6} {check.rule} ({check.source})\n")
        return 0
    if not args.server:
        raise CommandError("conform needs --server HOST:PORT", 2)
    transports: tuple[TransportKind, ...] = (
        ("ads", "per-type") if args.transport == "both" else (args.transport,)
    )
    security = channel_options(args)
    target = ServerTarget(
        uri=args.server,
        credentials=security.get("credentials"),
        call_metadata=tuple(security.get("metadata", ())),
    )
    options = Options(
        node_id=args.node_id,
        cluster=args.cluster,
        second_node_id=args.second_node_id,
        response_timeout=args.timeout,
        quiet_period=args.quiet_period,
    )
    driver = CommandDriver(args.change_command) if args.change_command else None
    report = asyncio.run(
        arun(
            target,
            protocols=protocols,
            transports=transports,
            only=args.only,
            skip=args.skip,
            options=options,
            driver=driver,
        )
    )
    stdout.write(render(report, args.output, evidence=args.evidence))
    stdout.flush()
    return report.exit_code
