"""Argument parsing of ``xds-client``: one sub-command per job."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any, NoReturn

from xds_client._version import __version__

from ._examples import EXAMPLES

__all__ = ["CommandError", "UsageExit", "build_parser", "check_address"]

DEFAULT_NODE_ID = "xds-client-cli"
SERVER_ENV = "XDS_CLIENT_SERVER"
"""The environment variable naming the default ``--server`` of the xDS commands."""


class UsageExit(Exception):  # noqa: N818 - a control-flow signal, not an error type
    """argparse wanted to exit: ``code`` 0 for --help, 2 for bad usage."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Help(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written (the epilog); every option's default shown once."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = "default" in text or default in (None, False, "", [], argparse.SUPPRESS)
        if shown or not action.option_strings:
            return text
        return f"{text} (default: {default})"


class CommandError(Exception):
    """A failure the command reports as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports errors as one line and never calls sys.exit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # One line, like every other failure of the command line.
        hint = _did_you_mean(self, message)
        sys.stderr.write(f"{self.prog}: error: {message}{hint} (see {self.prog} --help)\n")
        raise UsageExit(2)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise UsageExit(status)


def _options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every ``--option`` of ``parser`` and of its sub-commands."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options_of(sub)
    return found


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """`` (did you mean --timeout?)`` for a mistyped option, else ``""``."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    wrong = [w.split("=", 1)[0] for w in message.split(":", 1)[1].split() if w.startswith("--")]
    known = sorted(_options_of(parser))
    hints = [m[0] for w in wrong if (m := difflib.get_close_matches(w, known, n=1, cutoff=0.6))]
    return f" (did you mean {' '.join(hints)}?)" if hints else ""


def check_address(text: str, *, rest: bool = False) -> str:
    """Validate ``host:port`` (or ``http(s)://host:port`` for REST); raise ValueError."""
    rest_url = text.startswith(("http://", "https://"))
    if rest and rest_url:
        hostport = text.split("://", 1)[1].rstrip("/")
    elif rest_url:
        raise ValueError(f"{text!r} is a URL; gRPC needs HOST:PORT (URLs are for --transport rest)")
    else:
        hostport = text
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad server address {text!r}: expected HOST:PORT, e.g. 127.0.0.1:18000")
    if "/" in host or " " in host:
        raise ValueError(f"bad server address {text!r}: expected HOST:PORT")
    return text


def _number(text: str, *, positive: bool = True) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"must be {'positive' if positive else '>= 0'}: {text!r}")
    return value


def _positive(text: str) -> float:
    return _number(text)


def _non_negative(text: str) -> float:
    return _number(text, positive=False)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return value


OUTPUT_FORMATS = ("text", "json", "yaml", "wide", "name")


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        "-o",
        choices=OUTPUT_FORMATS,
        default="text",
        help="json: JSON Lines; yaml: YAML documents (resource bodies for fetch and store get); "
        "wide: a table with more columns; name: TYPE/NAME per line (default: text)",
    )
    parser.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as -o json"
    )
    parser.add_argument(
        "--no-headers", action="store_true", help="tables without their header line"
    )


def _security_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS and authentication")
    group.add_argument("--ca-file", metavar="PEM", help="trust this CA (turns TLS on)")
    group.add_argument("--cert", metavar="PEM", help="client certificate for mTLS (with --key)")
    group.add_argument("--key", metavar="PEM", help="client private key for mTLS (with --cert)")
    group.add_argument(
        "--server-name", metavar="NAME", help="check the server certificate for NAME (TLS)"
    )
    group.add_argument("--tls", action="store_true", help="TLS with the system's root CAs")
    token = group.add_mutually_exclusive_group()
    token.add_argument("--token", metavar="TOKEN", help="send 'authorization: Bearer TOKEN'")
    token.add_argument("--token-file", metavar="FILE", help="read the bearer token from FILE")
    group.add_argument(
        "--header",
        "-H",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        type=_header,
        help="extra call metadata (repeatable)",
    )


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    return name.strip().lower(), value


def _xds_options(parser: argparse.ArgumentParser, *, polling: bool = False) -> None:
    group = parser.add_argument_group("server and node")
    group.add_argument(
        "--server", "-s", metavar="HOST:PORT", help=f"the xDS server (default: ${SERVER_ENV})"
    )
    group.add_argument(
        "--bootstrap",
        metavar="FILE",
        help="a gRPC xDS bootstrap file instead of --server "
        "(default: $GRPC_XDS_BOOTSTRAP, else the JSON in $GRPC_XDS_BOOTSTRAP_CONFIG)",
    )
    group.add_argument("--node-id", metavar="ID", help=f"node id (default {DEFAULT_NODE_ID})")
    group.add_argument("--cluster", metavar="C", default="", help="node cluster")
    group.add_argument("--api", choices=("v3", "v2"), default="v3", help="xDS API version")
    if polling:
        group.add_argument(
            "--transport",
            choices=("grpc-fetch", "rest"),
            help="how to poll (default: rest for http:// servers, else grpc-fetch)",
        )
    else:
        group.add_argument("--delta", action="store_true", help="use the delta protocol")
        group.add_argument(
            "--no-ads", action="store_true", help="one stream per type instead of ADS"
        )
    group.add_argument(
        "--log-level",
        choices=("error", "warning", "info", "debug"),
        default="error",
        help="the library's own log lines on stderr (debug: gRPC's too)",
    )
    group.add_argument(
        "--verbose",
        "-v",
        action="count",
        default=0,
        help="print each xDS request and response on stderr (-vv: as proto JSON; secrets redacted)",
    )
    _security_options(parser)
    _output_options(parser)


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", "-s", metavar="HOST:PORT", required=True)
    _security_options(parser)
    grafana = parser.add_argument_group("Grafana service authentication")
    grafana.add_argument(
        "--exchange-url", metavar="URL", help="token exchange URL: send its X-Access-Token"
    )
    grafana.add_argument(
        "--exchange-token-file", metavar="FILE", help="the service token to exchange"
    )
    grafana.add_argument(
        "--exchange-namespace",
        metavar="NS",
        help="namespace of the access token (default: --namespace, else '*')",
    )
    grafana.add_argument(
        "--id-token-file", metavar="FILE", help="send the user's ID token as X-Id-Token"
    )
    _output_options(parser)


def _store_kind(parser: argparse.ArgumentParser, *, name: bool) -> None:
    parser.add_argument(
        "kind", metavar="GROUP/RESOURCE", help="e.g. dashboard.grafana.app/dashboards"
    )
    if name:
        parser.add_argument("name", metavar="NAME")
    if name:
        # One object: kubectl's habit, the `default` namespace unless told.
        parser.add_argument(
            "--namespace", "-n", default="default", help="namespace (tenant; default: default)"
        )
    else:
        parser.add_argument(
            "--namespace", "-n", default="", help="namespace (tenant; default: all namespaces)"
        )


_CONFORM_FORMATS = ("table", "json", "junit")


def _conform_server(text: str) -> str:
    try:
        return check_address(text, rest=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_conform(sub: Any) -> None:
    """The ``conform`` sub-command's arguments (see cli/_conform.py)."""
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
        type=_conform_server,
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
        type=_positive,
        default=2.0,
        metavar="S",
        help="seconds to wait for a response the server owes (default 2)",
    )
    conform.add_argument(
        "--quiet-period",
        type=_positive,
        default=0.3,
        metavar="S",
        help="seconds of silence that mean 'nothing more is coming' (default 0.3)",
    )
    conform.add_argument(
        "--output",
        "-o",
        choices=_CONFORM_FORMATS,
        default="table",
        help="table (default), json, junit",
    )
    conform.add_argument(
        "--no-evidence",
        dest="evidence",
        action="store_false",
        help="table: leave out the wire exchange under each failure",
    )
    conform.add_argument("--list", action="store_true", help="list the checks and exit")
    _security_options(conform)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share between 0 and 1, not {text!r}")
    return value


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key, value


def _add_load(sub: Any) -> None:
    """The ``load`` sub-command's arguments (see cli/_load.py)."""
    load = sub.add_parser(
        "load", help="simulate a fleet of xDS clients against a control plane and measure it"
    )
    target = load.add_argument_group("server")
    target.add_argument("--server", "-s", metavar="HOST:PORT", help="the xDS server (plaintext)")
    target.add_argument(
        "--sample",
        metavar="CLUSTERS",
        type=_count,
        help="instead of --server, serve the sample config with CLUSTERS clusters from an "
        "in-process ControlPlane (and push to it with --push-interval)",
    )
    fleet = load.add_argument_group("fleet")
    fleet.add_argument("--nodes", "-n", type=_count, default=10, help="clients (default 10)")
    fleet.add_argument("--rate", "-r", type=_positive, default=100.0, help="clients started/s")
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
        "--connect-timeout", type=_positive, default=10.0, help="give up when nothing answers"
    )
    scenario = load.add_argument_group("scenario")
    scenario.add_argument(
        "--storm-at", type=_non_negative, metavar="S", help="drop every stream S s after the ramp"
    )
    scenario.add_argument(
        "--churn", type=_share, default=0.0, metavar="SHARE", help="share replaced per minute"
    )
    scenario.add_argument(
        "--push-interval", type=_positive, metavar="S", help="change the config every S seconds"
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


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, sub-commands included."""
    parser = _Parser(
        prog="xds-client",
        description="Watch, fetch and dump xDS resources; serve a test control plane; "
        "use a Grafana ResourceStore; run the demo.",
    )
    parser.add_argument("--version", action="version", version=f"xds-client {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="run the in-process control plane until interrupted")
    serve.add_argument(
        "--resources",
        "-r",
        metavar="FILE",
        required=True,
        help="YAML or JSON resources (reloaded when it changes)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; '::1' too)"
    )
    serve.add_argument("--port", "-p", type=_port, default=0, help="gRPC port (default: free)")
    serve.add_argument(
        "--rest-port", type=_port, default=None, help="REST-JSON port (default: free)"
    )
    serve.add_argument(
        "--store-db",
        metavar="FILE",
        help="also serve a ResourceStore on this SQLite file (':memory:' too; "
        "the announcement names its full path)",
    )
    serve.add_argument(
        "--store-port",
        type=_port,
        default=None,
        help="also serve a ResourceStore on this port (in memory unless --store-db; "
        "default: a free port when --store-db is given)",
    )
    serve.add_argument(
        "--validate",
        action="store_true",
        help="refuse a file whose resources break their proto's rules "
        "(default: serve it with a warning)",
    )
    serve.add_argument(
        "--json", action="store_true", help="announce the ports and reloads as JSON Lines"
    )
    serve.add_argument("--reload-interval", type=_positive, default=1.0, help=argparse.SUPPRESS)

    watch = sub.add_parser("watch", help="subscribe and print events as they come")
    _xds_options(watch)
    watch.add_argument(
        "type",
        metavar="TYPE",
        help="alias (cds), type URL or message name; several joined by commas (cds,eds)",
    )
    watch.add_argument("names", metavar="NAME", nargs="*", help="resource names (none: all)")
    watch.add_argument("--count", type=_count, help="stop after N resource events")
    watch.add_argument("--timeout", type=_positive, help="stop after S seconds")

    fetch = sub.add_parser("fetch", help="poll once (gRPC Fetch or REST) and print the resources")
    _xds_options(fetch, polling=True)
    fetch.add_argument("type", metavar="TYPE")
    fetch.add_argument("names", metavar="NAME", nargs="*")
    fetch.add_argument("--timeout", type=_positive, default=10.0, help="give up after S seconds")

    dump = sub.add_parser("dump", help="subscribe, wait until settled, print the CSDS dump")
    _xds_options(dump)
    dump.add_argument(
        "types", metavar="TYPE", nargs="*", help="types to subscribe to (default: lds rds cds eds)"
    )
    dump.add_argument("--timeout", type=_positive, default=10.0, help="give up after S seconds")

    store = sub.add_parser("store", help="use a Grafana ResourceStore")
    store_sub = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    get = store_sub.add_parser("get", help="read one object")
    _store_options(get)
    _store_kind(get, name=True)
    lst = store_sub.add_parser("list", help="list objects")
    _store_options(lst)
    _store_kind(lst, name=False)
    lst.add_argument("--selector", "-l", default=None, help="label selector, e.g. app=web")
    lst.add_argument("--limit", type=_count, default=500, help="page size")
    swatch = store_sub.add_parser("watch", help="print changes as they come")
    _store_options(swatch)
    _store_kind(swatch, name=False)
    swatch.add_argument("--selector", "-l", default=None)
    swatch.add_argument("--since", type=int, default=0, help="resource version to start after")
    swatch.add_argument("--initial", action="store_true", help="first send the current objects")
    swatch.add_argument("--count", type=_count, help="stop after N events")
    swatch.add_argument("--timeout", type=_positive, help="stop after S seconds")
    for action in ("create", "update"):
        write = store_sub.add_parser(action, help=f"{action} an object from JSON")
        _store_options(write)
        _store_kind(write, name=True)
        source = write.add_mutually_exclusive_group(required=True)
        source.add_argument("--file", "-f", metavar="FILE", help="JSON file ('-': stdin)")
        source.add_argument("--data", "-d", metavar="JSON", help="the JSON document")
        if action == "update":
            write.add_argument(
                "--resource-version",
                type=int,
                default=0,
                help="fail with a conflict unless the object is at this version",
            )
    delete = store_sub.add_parser("delete", help="delete an object")
    _store_options(delete)
    _store_kind(delete, name=True)
    delete.add_argument("--resource-version", type=int, default=0)
    health = store_sub.add_parser("health", help="check the server's health")
    _store_options(health)
    kinds = store_sub.add_parser("kinds", help="the collections (group/resource) that hold objects")
    _store_options(kinds)
    kinds.add_argument("--namespace", "-n", default="", help="namespace (tenant; default: all)")
    kinds.add_argument("--group", default="", help="only this API group")
    quota = store_sub.add_parser("quota", help="a collection's quota: objects held and allowed")
    _store_options(quota)
    _store_kind(quota, name=False)

    graph = sub.add_parser(
        "graph", help="follow a listener to its routes, clusters and endpoints; print the tree"
    )
    _xds_options(graph)
    graph.add_argument("listener", metavar="LISTENER", help="the Listener resource name")
    graph.add_argument("--timeout", type=_positive, default=20.0, help="give up after S seconds")

    _add_conform(sub)
    _add_load(sub)

    demo = sub.add_parser("demo", help="a live story of the xDS protocol (about 20 s)")
    demo.add_argument("--fast", action="store_true", help="no pauses between steps (tests)")
    completion = sub.add_parser("completion", help="print a shell completion script")
    completion.add_argument("shell", choices=("bash", "zsh"), help="the shell")
    _add_examples(parser)
    return parser


def _add_examples(parser: argparse.ArgumentParser) -> None:
    """Each sub-command's ``--help`` ends with examples (from EXAMPLES), as kubectl's do."""
    parser.epilog = parser.epilog or EXAMPLES.get(parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_examples(sub)
