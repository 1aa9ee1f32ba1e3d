"""``watch``, ``fetch`` and ``dump``: the xDS client commands."""

from __future__ import annotations

import argparse
import queue
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from envoy.admin.v3.config_dump_shared_pb2 import ClientResourceStatus

from xds_client.client import Backoff, ConnectivityChanged, XdsClient
from xds_client.client import to_dict as message_to_dict
from xds_client.errors import UnknownResourceTypeError
from xds_client.node import Node
from xds_client.protocol import ResourceDoesNotExist, ResourceUpdated, ResponseRejected
from xds_client.resources import ResourceType, resource_type
from xds_client.transport import Transport

from ._args import DEFAULT_NODE_ID, CommandError, check_address
from ._hints import explain
from ._output import Output, Progress, kind_of, xds_records
from ._security import bootstrap_from_env, security_options
from ._verbose import VerboseTransport

__all__ = ["run_dump", "run_fetch", "run_watch"]

# A command-line client should notice a dead server quickly and come back fast.
_CLI_BACKOFF = Backoff(initial=0.5, maximum=5.0)
_SETTLE_QUIET = 0.3  # seconds without events after which a subscription counts as settled
_DEFAULT_DUMP_TYPES = ("lds", "rds", "cds", "eds")


def _resolve(spec: str, api: str) -> ResourceType[Any]:
    return resource_type(spec, "v2" if api == "v2" else "v3")


def _make_client(
    args: argparse.Namespace,
    events: queue.SimpleQueue[object],
    *,
    transport: str = "grpc",
    metrics: _AnswerMetrics | None = None,
) -> XdsClient:
    options: dict[str, Any] = {
        "api_version": args.api,
        "transport": transport,
        "backoff": _CLI_BACKOFF,
        "metrics": _AnswerMetrics(events) if metrics is None else metrics,
    }
    if transport == "grpc":
        options["protocol"] = "delta" if args.delta else "sotw"
        options["ads"] = not args.no_ads
    else:
        options["poll_interval"] = 1.0
    if args.bootstrap and args.server:
        raise CommandError("give --server or --bootstrap, not both", 2)
    # As gRPC clients do: no --server and no --bootstrap means the environment's bootstrap.
    use_bootstrap = bool(args.bootstrap) or (not args.server and bootstrap_from_env() is not None)
    if args.node_id or args.cluster or not use_bootstrap:
        options["node"] = Node(id=args.node_id or DEFAULT_NODE_ID, cluster=args.cluster)
    options.update(security_options(args))
    verbose = getattr(args, "verbose", 0)
    client_class = _verbose_client(verbose) if verbose else XdsClient
    if use_bootstrap:
        return client_class.from_bootstrap(args.bootstrap or None, **options)
    if not args.server:
        raise CommandError(
            "give the xDS server with --server HOST:PORT (or --bootstrap FILE, "
            "or set $XDS_CLIENT_SERVER or $GRPC_XDS_BOOTSTRAP)",
            2,
        )
    try:
        server = check_address(args.server, rest=transport == "rest")
    except ValueError as exc:
        raise CommandError(str(exc), 2) from None
    if transport == "rest" and "://" not in server:
        server = "http://" + server  # `--transport rest -s HOST:PORT` means plain HTTP
    return client_class(server, **options)


def _verbose_client(level: int) -> type[XdsClient]:
    """An XdsClient printing each message on stderr (``-v``), whatever its servers.

    Every server keeps the transport the client makes for it (gRPC stream, Fetch or REST
    polls; a bootstrap's fallbacks and authorities), wrapped where the client takes it.
    """

    class VerboseXdsClient(XdsClient):
        def _transport(self, server: int) -> Transport:
            return VerboseTransport(super()._transport(server), sys.stderr, level)

    return VerboseXdsClient


@dataclass(frozen=True)
class _Answered:
    """The server answered ``type_url`` with a response we ACKed or NACKed."""

    type_url: str
    accepted: bool = True


class _AnswerMetrics:
    """A :class:`~xds_client.client.Metrics` that tells the command each real xDS answer.

    A health check or an open stream proves nothing: only an ACK or a NACK does
    (or a does-not-exist, which the event itself shows).
    """

    def __init__(self, events: queue.SimpleQueue[object]) -> None:
        self._events = events
        self.control_planes: dict[str, str] = {}
        """``control_plane.identifier`` of the last response per type URL (when given)."""

    def ack(self, type_url: str, server: str) -> None:
        self._events.put(_Answered(type_url))

    def nack(self, type_url: str, server: str) -> None:
        self._events.put(_Answered(type_url, accepted=False))

    def response(self, type_url: str, server: str, accepted: bool, control_plane: str) -> None:
        if control_plane:
            self.control_planes[type_url] = control_plane

    def reconnect(self, server: str) -> None:
        pass

    def resources(self, type_url: str, counts: Mapping[str, int]) -> None:
        pass


@contextmanager
def _subscribed(
    client: XdsClient,
    events: queue.SimpleQueue[object],
    rtypes: list[ResourceType[Any]],
    names: list[str] | None,
) -> Iterator[queue.SimpleQueue[object]]:
    """Watch each type; every event lands in ``events``, read by the main thread."""
    with ExitStack() as stack:
        for rtype in rtypes:
            stack.enter_context(client.watch(rtype, names, on_event=events.put))
        yield events


def _where(args: argparse.Namespace) -> str:
    return str(args.server or args.bootstrap or bootstrap_from_env())


def _unreachable(event: ConnectivityChanged, *, tls: bool) -> CommandError:
    return CommandError(explain(event.server, event.reason or "unavailable", tls=tls))


def uses_tls(args: argparse.Namespace) -> bool:
    """Whether the command was asked to speak TLS (for the hints of a failed handshake)."""
    return bool(args.tls or args.ca_file or args.cert or args.server_name)


def _no_answer(server: str, what: str, timeout: float) -> CommandError:
    return CommandError(
        f"no xDS response from {server} for {what} within {timeout:g}s "
        "(the server accepts connections but did not answer the subscription)"
    )


class _Answers:
    """Which subscribed types have had a real xDS answer."""

    def __init__(self, rtypes: list[ResourceType[Any]], *, tls: bool = False) -> None:
        self.waiting = {r.type_url for r in rtypes}
        self.tls = tls

    def note(self, event: object) -> None:
        """Count ``event`` if it is an answer; raise if it says the server is not one."""
        answer = (_Answered, ResourceDoesNotExist, ResourceUpdated, ResponseRejected)
        if isinstance(event, answer):
            self.waiting.discard(event.type_url)
        elif isinstance(event, ConnectivityChanged) and not event.connected and self.waiting:
            # Refused, unreachable, UNIMPLEMENTED ... before any answer: say so, do not retry.
            raise _unreachable(event, tls=self.tls)

    @property
    def all_answered(self) -> bool:
        return not self.waiting


def _settle(
    events: queue.SimpleQueue[object],
    rtypes: list[ResourceType[Any]],
    timeout: float,
    server: str,
    *,
    tls: bool = False,
    silent: set[str] | None = None,
) -> list[object]:
    """Events until every type had a real answer plus a quiet spell; errors if none in time.

    With ``silent`` (a set to fill), types still unanswered at the deadline are added to
    it instead, and only a server that answered none of them is an error.
    """
    deadline = time.monotonic() + timeout
    seen: list[object] = []
    answers = _Answers(rtypes, tls=tls)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if answers.all_answered:
                return seen
            if silent is not None and len(answers.waiting) < len(rtypes):
                silent.update(answers.waiting)
                return seen
            what = ", ".join(kind_of(t) for t in sorted(answers.waiting))
            raise _no_answer(server, what, timeout)
        quiet = answers.all_answered
        try:
            event = events.get(timeout=min(remaining, _SETTLE_QUIET) if quiet else remaining)
        except queue.Empty:
            if quiet:
                return seen
            continue
        answers.note(event)
        if not isinstance(event, ConnectivityChanged | _Answered):
            seen.append(event)


def _watched_types(args: argparse.Namespace) -> list[ResourceType[Any]]:
    """``cds`` or ``cds,eds`` (kubectl's ``get pods,svc``); a NAME that is a type is refused."""
    rtypes = [_resolve(spec, args.api) for spec in args.type.split(",") if spec]
    if not rtypes:
        raise CommandError(f"no resource type in {args.type!r}", 2)
    for name in args.names:
        try:
            _resolve(name, args.api)
        except UnknownResourceTypeError:
            continue
        raise CommandError(
            f"{name!r} is a resource type, not a name: to watch several types, join them "
            f"with commas ({args.type},{name}); names then apply to each type",
            2,
        )
    return rtypes


def run_watch(args: argparse.Namespace, out: Output) -> int:
    """Subscribe and print events until --count, --timeout or Ctrl-C."""
    rtypes = _watched_types(args)
    names = list(args.names) or None
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    count = 0
    events: queue.SimpleQueue[object] = queue.SimpleQueue()
    answers = _Answers(rtypes, tls=uses_tls(args))
    last_connectivity: ConnectivityChanged | None = None
    with (
        _make_client(args, events) as client,
        _subscribed(client, events, rtypes, names),
    ):
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                if remaining is not None and remaining <= 0:
                    raise queue.Empty
                event = events.get(timeout=remaining)
            except queue.Empty:
                if not answers.all_answered:
                    what = ", ".join(kind_of(t) for t in sorted(answers.waiting))
                    raise _no_answer(_where(args), what, args.timeout) from None
                return 0
            answers.note(event)
            if isinstance(event, _Answered) or event == last_connectivity:
                continue  # one note per change, not one per watched type of an ADS stream
            if isinstance(event, ConnectivityChanged):
                last_connectivity = event
            for record in xds_records(event):
                out.record(record)
            if not isinstance(event, ConnectivityChanged):
                count += 1
                if args.count is not None and count >= args.count:
                    return 0


def run_fetch(args: argparse.Namespace, out: Output) -> int:
    """One poll: print what the server returns, then exit."""
    transport = args.transport
    if transport is None:
        transport = (
            "rest" if (args.server or "").startswith(("http://", "https://")) else "grpc-fetch"
        )
    rtype = _resolve(args.type, args.api)
    names = list(args.names) or None
    events: queue.SimpleQueue[object] = queue.SimpleQueue()
    progress = Progress(out.err)
    progress.update(f"polling {_where(args)} for {kind_of(rtype.type_url)} ...")
    try:
        with (
            _make_client(args, events, transport=transport) as client,
            _subscribed(client, events, [rtype], names),
        ):
            seen = _settle(events, [rtype], args.timeout, _where(args), tls=uses_tls(args))
            cached = client.resources(rtype)  # before unsubscribing drops the cache
    finally:
        progress.done()
    rejected = [e for e in seen if isinstance(e, ResponseRejected)]
    missing = sorted(set(names or ()) - set(cached))
    kind = kind_of(rtype.type_url)
    if out.format in ("json", "name"):
        for name in sorted(cached):
            item = cached[name]
            out.record(
                xds_records(ResourceUpdated(rtype.type_url, name, item.version, item.resource))[0]
            )
        for name in missing:
            out.record(xds_records(ResourceDoesNotExist(rtype.type_url, name))[0])
        for event in rejected:
            for record in xds_records(event):
                out.record(record)
        return 1 if missing else 0  # kubectl exits 1 on NotFound
    if out.format == "yaml":
        # The resource bodies themselves, ready for a file; the rest is a note.
        for name in sorted(cached):
            out.yaml(message_to_dict(cached[name].resource))
    else:
        wide = out.format == "wide"
        headers = ("TYPE", "NAME", "VERSION") + (("BYTES", "TYPE URL") if wide else ())
        rows: list[tuple[object, ...]] = []
        for name in sorted(cached):
            row: tuple[object, ...] = (kind, name, cached[name].version)
            if wide:
                row += (cached[name].resource.ByteSize(), rtype.type_url)
            rows.append(row)
        rows += [
            (kind, name, "(does not exist)") + (("", rtype.type_url) if wide else ())
            for name in missing
        ]
        out.table(headers, rows)
    if out.format == "yaml":
        for name in missing:
            out.note(f"{kind} {name}: does not exist")
    for event in rejected:
        for record in xds_records(event):
            text = f"NACKed {record['name']}: {record['error']}"
            out.note(text) if out.format == "yaml" else out.line(text)
    return 1 if missing else 0  # kubectl exits 1 on NotFound


def run_dump(args: argparse.Namespace, out: Output) -> int:
    """Subscribe to every resource of some types, wait until settled, print the CSDS dump."""
    rtypes = [_resolve(spec, args.api) for spec in (args.types or _DEFAULT_DUMP_TYPES)]

    progress = Progress(out.err)
    progress.update("subscribing and waiting for the server to settle ...")
    events: queue.SimpleQueue[object] = queue.SimpleQueue()
    metrics = _AnswerMetrics(events)
    try:
        with (
            _make_client(args, events, metrics=metrics) as client,
            _subscribed(client, events, rtypes, None),
        ):
            silent: set[str] = set()
            _settle(events, rtypes, args.timeout, _where(args), tls=uses_tls(args), silent=silent)
            dump = client.config_dump()
    finally:
        progress.done()
    for type_url in sorted(silent):
        # What answered is printed; a type the server never answered is REQUESTED.
        out.note(f"{kind_of(type_url)}: no answer from {_where(args)} within {args.timeout:g}s")
    if out.format in ("json", "yaml"):
        out.message(dump)  # the client redacted secrets; message() redacts again, deeper
        return 0
    wide = out.format == "wide"
    rows = []
    errors = []
    for item in dump.generic_xds_configs:
        status = ClientResourceStatus.Name(item.client_status)
        if out.format == "name":
            out.line(f"{kind_of(item.type_url).lower().replace(' ', '-')}/{item.name}")
            continue
        row: tuple[object, ...] = (kind_of(item.type_url), item.name, item.version_info, status)
        if wide:
            updated = item.last_updated.ToJsonString() if item.HasField("last_updated") else ""
            error = item.error_state.details if item.HasField("error_state") else ""
            row += (updated, error)
        rows.append(row)
        if item.HasField("error_state") and not wide:
            errors.append(f"{item.name}: {item.error_state.details}")
    if out.format == "name":
        return 0
    out.note(
        f"node {dump.node.id}" + (f" (cluster {dump.node.cluster})" if dump.node.cluster else "")
    )
    # CSDS has no field for it: which server instance answered, from the responses.
    planes = sorted(set(metrics.control_planes.values()))
    if planes:
        out.note("control plane " + ", ".join(planes))
    listed = {item.type_url for item in dump.generic_xds_configs}
    for type_url in sorted(silent - listed):
        rows.append((kind_of(type_url), "*", "", "REQUESTED") + (("", "") if wide else ()))
    headers = ("TYPE", "NAME", "VERSION", "STATUS") + (("LAST UPDATED", "ERROR") if wide else ())
    out.table(headers, rows)
    for line in errors:
        out.line("error " + line)
    return 0
