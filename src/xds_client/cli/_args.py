"""Argument parsing of ``xds-client``: one sub-command per job."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from xds_client._version import __version__

__all__ = ["CommandError", "UsageExit", "build_parser", "check_address"]

DEFAULT_NODE_ID = "xds-client-cli"


class UsageExit(Exception):  # noqa: N818 - a control-flow signal, not an error type
    """argparse wanted to exit: ``code`` 0 for --help, 2 for bad usage."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class CommandError(Exception):
    """A failure the command reports as one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports errors as one line and never calls sys.exit."""

    def error(self, message: str) -> NoReturn:
        # One line, like every other failure of the command line.
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise UsageExit(2)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise UsageExit(status)


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


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


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
    group.add_argument("--server", "-s", metavar="HOST:PORT", help="the xDS server")
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
    _security_options(parser)
    _output_options(parser)


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", "-s", metavar="HOST:PORT", required=True)
    _security_options(parser)
    _output_options(parser)


def _store_kind(parser: argparse.ArgumentParser, *, name: bool) -> None:
    parser.add_argument(
        "kind", metavar="GROUP/RESOURCE", help="e.g. dashboard.grafana.app/dashboards"
    )
    if name:
        parser.add_argument("name", metavar="NAME")
    parser.add_argument("--namespace", "-n", default="", help="namespace (tenant)")


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
        help="also serve a ResourceStore on this SQLite file (':memory:' too)",
    )
    serve.add_argument(
        "--json", action="store_true", help="announce the ports and reloads as JSON Lines"
    )
    serve.add_argument("--reload-interval", type=_positive, default=1.0, help=argparse.SUPPRESS)

    watch = sub.add_parser("watch", help="subscribe and print events as they come")
    _xds_options(watch)
    watch.add_argument("type", metavar="TYPE", help="alias (cds), type URL or message name")
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

    graph = sub.add_parser(
        "graph", help="follow a listener to its routes, clusters and endpoints; print the tree"
    )
    _xds_options(graph)
    graph.add_argument("listener", metavar="LISTENER", help="the Listener resource name")
    graph.add_argument("--timeout", type=_positive, default=20.0, help="give up after S seconds")

    demo = sub.add_parser("demo", help="a live story of the xDS protocol (about 20 s)")
    demo.add_argument("--fast", action="store_true", help="no pauses between steps (tests)")
    return parser
