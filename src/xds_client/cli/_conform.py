"""``xds-client conform``: check an xDS server against the protocol, rule by rule.

Exit status 0 when every MUST check passed, 1 when one failed (SHOULD
failures are reported only), 2 for bad usage. See docs/conformance.md.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

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

from ._args import CommandError
from ._security import channel_options

__all__ = ["run_conform"]


def run_conform(args: argparse.Namespace, stdout: Any) -> int:
    """Run the checks the arguments select; print the report; return the exit status."""
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
