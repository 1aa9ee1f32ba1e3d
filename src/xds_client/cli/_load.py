"""``xds-client load``: a fleet of simulated xDS clients against a control plane."""

from __future__ import annotations

import argparse
import asyncio
import json
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._args import check_address

if TYPE_CHECKING:
    from ._output import Output

__all__ = ["add_load_parser", "run_load"]


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share between 0 and 1, not {text!r}")
    return value


def _number(text: str, *, positive: bool = True) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"must be {'positive' if positive else '>= 0'}: {text!r}")
    return value


def _non_negative(text: str) -> float:
    return _number(text, positive=False)


def _nodes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key, value


def add_load_parser(sub: Any) -> None:
    """The ``load`` sub-command's arguments."""
    load = sub.add_parser(
        "load", help="simulate a fleet of xDS clients against a control plane and measure it"
    )
    target = load.add_argument_group("server")
    target.add_argument("--server", "-s", metavar="HOST:PORT", help="the xDS server (plaintext)")
    target.add_argument(
        "--sample",
        metavar="CLUSTERS",
        type=_nodes,
        help="instead of --server, serve the sample config with CLUSTERS clusters from an "
        "in-process ControlPlane (and push to it with --push-interval)",
    )
    fleet = load.add_argument_group("fleet")
    fleet.add_argument("--nodes", "-n", type=_nodes, default=10, help="clients (default 10)")
    fleet.add_argument("--rate", "-r", type=_number, default=100.0, help="clients started/s")
    fleet.add_argument(
        "--duration", "-d", type=_non_negative, default=10.0, help="seconds held after the ramp"
    )
    fleet.add_argument("--delta", action="store_true", help="delta xDS instead of SotW")
    fleet.add_argument(
        "--profile",
        choices=("envoy", "grpc"),
        default="envoy",
        help="envoy: LDS+CDS wildcard, then RDS+EDS by name; grpc: LDS by name -> RDS -> CDS -> "
        "EDS (default envoy)",
    )
    fleet.add_argument("--listener", help="listener a grpc-profile client asks for")
    fleet.add_argument("--node-id", default="node-{i}", help="node id template ({i}: index)")
    fleet.add_argument("--cluster", default="load", help="node cluster template")
    fleet.add_argument("--region", default="", help="locality region template")
    fleet.add_argument("--zone", default="", help="locality zone template")
    fleet.add_argument(
        "--metadata", "-m", type=_pair, action="append", default=[], metavar="KEY=VALUE"
    )
    fleet.add_argument("--validate", action="store_true", help="check resources as Envoy does")
    fleet.add_argument(
        "--keep-messages", action="store_true", help="cache decoded messages, not bytes"
    )
    fleet.add_argument(
        "--connect-timeout", type=_number, default=10.0, help="give up when nothing answers"
    )
    scenario = load.add_argument_group("scenario")
    scenario.add_argument(
        "--storm-at", type=_non_negative, metavar="S", help="drop every stream S s after the ramp"
    )
    scenario.add_argument(
        "--churn", type=_share, default=0.0, metavar="SHARE", help="share replaced per minute"
    )
    scenario.add_argument(
        "--push-interval", type=_number, metavar="S", help="change the config every S seconds"
    )
    scenario.add_argument(
        "--push-command",
        metavar="CMD",
        help="shell command that changes the server's config ($XDS_LOAD_STEP: 1, 2, ...)",
    )
    report = load.add_argument_group("report")
    report.add_argument(
        "--output", "-o", choices=("text", "json"), default="text",
        help="text: a table; json: the whole report as one JSON document",
    )  # fmt: skip
    report.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as -o json"
    )
    report.add_argument("--plot", metavar="FILE.svg", help="write an SVG of the run")


def run_load(args: argparse.Namespace, out: Output) -> int:
    """Run the fleet; print the table or the JSON report."""
    # Imported here: building the parser (``--help``) must not pay for grpc and protobuf.
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

    from ._output import Progress
    from ._xds import CommandError

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
            from xds_client.testing import ControlPlane

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
