"""``xds-client load``: a fleet of simulated xDS clients against a control plane."""

from __future__ import annotations

import argparse
import asyncio
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from xds_client.errors import TransportError, UsageError
from xds_client.load import (
    SAMPLE_LISTENER,
    CommandDriver,
    ControlPlaneDriver,
    Fleet,
    FleetOptions,
    UpdateDriver,
    render_svg,
    sample_config,
)
from xds_client.testing import ControlPlane

from ._args import CommandError, check_address
from ._output import Output, Progress

__all__ = ["run_load"]


def run_load(args: argparse.Namespace, out: Output) -> int:
    """Run the fleet; print the table or the JSON report."""
    if (args.server is None) == (args.sample is None):
        raise CommandError("give exactly one of --server HOST:PORT and --sample CLUSTERS", 2)
    if args.server is not None:
        try:
            check_address(args.server)
        except ValueError as exc:
            raise CommandError(str(exc), 2) from None
    if args.push_interval is not None and args.sample is None and not args.push_command:
        raise CommandError("--push-interval needs --push-command CMD (or --sample)", 2)
    if args.plot and not args.plot.endswith(".svg"):
        raise CommandError(f"--plot writes SVG: name the file *.svg, not {args.plot!r}", 2)
    with ExitStack() as stack:
        server = args.server
        driver: UpdateDriver | None = None
        if args.sample is not None:
            plane = stack.enter_context(
                ControlPlane(max_workers=2 * args.nodes + 16, rest_port=None)
            )
            plane.set_snapshot(sample_config(args.sample))
            server = plane.address
            driver = ControlPlaneDriver(plane, clusters=args.sample)
        if args.push_command:
            driver = CommandDriver(args.push_command)
        try:
            options = FleetOptions(
                server=server,
                nodes=args.nodes,
                rate=args.rate,
                duration=args.duration,
                protocol="delta" if args.delta else "sotw",
                profile=args.profile,
                listener=args.listener or SAMPLE_LISTENER,
                node_id=args.node_id,
                cluster=args.cluster,
                region=args.region,
                zone=args.zone,
                metadata=dict(args.metadata),
                validate=args.validate,
                keep_messages=args.keep_messages,
                storm_at=args.storm_at,
                churn=args.churn,
                push_interval=args.push_interval,
                connect_timeout=args.connect_timeout,
            )
        except UsageError as exc:
            raise CommandError(str(exc), 2) from None
        progress = Progress(out.out)

        def show(sample: Any) -> None:
            progress.update(
                f"{sample.t:6.0f} s  started {sample.started}  connected {sample.connected}  "
                f"complete {sample.complete}  ACKs {sample.acks}  NACKs {sample.nacks}  "
                f"errors {sample.errors}"
            )

        fleet = Fleet(
            options,
            driver=driver if args.push_interval is not None else None,
            progress=show if progress.enabled else None,
        )
        try:
            report = asyncio.run(fleet.run())
        except UsageError as exc:
            raise CommandError(str(exc), 2) from None
        except TransportError as exc:
            raise CommandError(str(exc), 1) from None
        finally:
            progress.done()
    if args.plot:
        Path(args.plot).write_text(render_svg(report))
    if out.format == "json":
        out.line(json.dumps(report.to_dict(), separators=(",", ":")))
    else:
        out.out.write(report.table())
        out.out.flush()
    if report.failure:
        out.note(f"xds-client: error: {report.failure}")
        return 1
    return 0
