"""``store get|list|watch|create|update|delete|health|kinds|quota``: a Grafana ResourceStore."""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from typing import Any

from xds_client.store import (
    ResourceKey,
    ResourceStoreClient,
    RetryPolicy,
    SelectorError,
    StoredObject,
    StoreNotImplementedError,
    UnavailableError,
    parse_selector,
)

from ._args import CommandError, check_address
from ._output import Output, Progress, store_record
from ._security import store_channel_options

__all__ = ["run_store"]

# Fail within seconds when the server is down, instead of the library's patient minute.
_CLI_RETRY = RetryPolicy(max_attempts=3, deadline=10.0)
_JOIN_TIMEOUT = 5.0


def _prefix(args: argparse.Namespace) -> ResourceKey:
    parts = args.kind.split("/")
    if len(parts) != 2 or not all(parts):
        raise CommandError(
            f"bad kind {args.kind!r}: expected GROUP/RESOURCE, "
            "e.g. dashboard.grafana.app/dashboards",
            2,
        )
    return ResourceKey(parts[0], parts[1], args.namespace)


def _object_record(obj: StoredObject) -> dict[str, Any]:
    key = obj.key
    return {
        "event": None,
        "type_url": None,
        "key": str(key),
        "name": key.name,
        "namespace": key.namespace,
        "version": str(obj.resource_version),
        "reason": None,
        "error": None,
        "resource": obj.json(),
    }


def _read_document(args: argparse.Namespace) -> dict[str, Any]:
    if args.data is not None:
        text, source = args.data, "--data"
    elif args.file == "-":
        text, source = sys.stdin.read(), "stdin"
    else:
        source = args.file
        try:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise CommandError(f"cannot read {args.file}: {exc.strerror or exc}", 2) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{source}: invalid JSON: {exc}", 2) from None
    if not isinstance(doc, dict):
        raise CommandError(f"{source}: expected a JSON object", 2)
    return doc


def run_store(args: argparse.Namespace, out: Output) -> int:
    """Dispatch a ``store`` action."""
    try:
        server = check_address(args.server)
    except ValueError as exc:
        raise CommandError(str(exc), 2) from None
    labels = getattr(args, "selector", None)
    if labels:
        try:
            parse_selector(labels)  # a bad selector is a usage error, found before any I/O
        except SelectorError as exc:
            raise CommandError(f"bad label selector {labels!r}: {exc}", 2) from None
    channel = store_channel_options(args)
    try:
        return _run_action(args, server, labels, channel, out)
    except StoreNotImplementedError as exc:
        if "method not found" in str(exc).lower():
            # A gRPC server, but not a ResourceStore (an xDS port, say): say that.
            raise CommandError(f"{server} is not a ResourceStore server ({exc})") from None
        raise
    except UnavailableError as exc:
        raise CommandError(f"cannot reach ResourceStore at {server}: {exc}") from None


def _run_action(
    args: argparse.Namespace, server: str, labels: str | None, channel: dict[str, Any], out: Output
) -> int:
    action = args.store_command
    with ResourceStoreClient(server, timeout=10.0, retry=_CLI_RETRY, **channel) as client:
        if action == "health":
            # Unreachable and not-a-store raise (status 1, with the cause); an answer that
            # is not SERVING is the server's own verdict.
            status = client.health()
            healthy = status == "SERVING"
            if out.json_lines:
                out.json({"event": "health", "server": server, "healthy": healthy,
                          "status": status})  # fmt: skip
            else:
                out.line(f"{server}: {status.replace('_', ' ')}")
            return 0 if healthy else 1
        if action == "kinds":
            return _kinds(client, args, out)
        prefix = _prefix(args)
        if action == "quota":
            return _quota(client, prefix, out)
        if action == "get":
            obj = client.read(prefix.with_name(args.name))
            if out.format == "json":
                out.json(obj.json())  # the object itself, as kubectl get -o json prints it
            elif out.format == "name":
                out.line(str(obj.key))
            else:
                # stdout is the document alone (`store get ... | jq` works); the rest is a note.
                out.note(f"{obj.key} @ resource version {obj.resource_version}")
                out.document(obj.json())
            return 0
        if action == "list":
            return _list(client, prefix, labels, args.limit, out)
        if action == "watch":
            return _watch(client, prefix, labels, args, out)
        if action in ("create", "update"):
            key = prefix.with_name(args.name)
            doc = _read_document(args)
            if action == "create":
                rv = client.create(key, doc)
            else:
                rv = client.update(key, doc, resource_version=args.resource_version)
            _written(out, action + "d", key, rv)
            return 0
        key = prefix.with_name(args.name)
        rv = client.delete(key, resource_version=args.resource_version)
        _written(out, "deleted", key, rv)
        return 0


def _kinds(client: ResourceStoreClient, args: argparse.Namespace, out: Output) -> int:
    found = client.list_stored_resources(args.namespace, group=args.group)
    if out.json_lines:
        for key in found:
            out.json(
                {
                    "event": "stored",
                    "kind": f"{key.group}/{key.resource}",
                    "namespace": key.namespace,
                    "group": key.group,
                    "resource": key.resource,
                }
            )
    else:
        rows = [(k.namespace, k.group, k.resource) for k in found]
        out.table(("NAMESPACE", "GROUP", "RESOURCE"), rows)
    return 0


def _quota(client: ResourceStoreClient, prefix: ResourceKey, out: Output) -> int:
    usage = client.quota_usage(prefix)
    kind = f"{prefix.group}/{prefix.resource}"
    if out.json_lines:
        out.json(
            {
                "event": "quota",
                "kind": kind,
                "namespace": prefix.namespace,
                "usage": usage.usage,
                "limit": usage.limit,
            }
        )
    else:
        out.line(
            f"{kind} in {prefix.namespace or '(cluster)'}: {usage.usage} of {usage.limit} "
            f"used, {usage.remaining} left"
        )
    return 0


def _written(out: Output, what: str, key: ResourceKey, rv: int) -> None:
    if out.json_lines:
        out.json(
            {
                "event": what,
                "key": str(key),
                "name": key.name,
                "namespace": key.namespace,
                "version": str(rv),
            }
        )
    else:
        out.line(f"{what} {key} at resource version {rv}")


def _list(
    client: ResourceStoreClient, prefix: ResourceKey, labels: str | None, limit: int, out: Output
) -> int:
    progress = Progress(out.err)
    rows: list[tuple[str, ...]] = []
    wide = out.format == "wide"
    items = client.list(prefix, labels=labels, limit=limit)
    try:
        for count, obj in enumerate(items, 1):
            if out.format == "json":
                out.json(_object_record(obj))
            elif out.format == "yaml":
                out.yaml(obj.json())
            elif out.format == "name":
                out.line(str(obj.key))
            else:
                key = obj.key
                labels_text = ",".join(f"{k}={v}" for k, v in sorted(obj.labels.items()))
                row: tuple[str, ...] = (key.namespace, key.name, str(obj.resource_version))
                if wide:
                    metadata = obj.json().get("metadata") or {}
                    row += (str(metadata.get("uid", "")), str(len(obj.value)))
                rows.append((*row, labels_text))
            if count % 100 == 0:
                progress.update(f"listed {count} objects ({items.pages} pages) ...")
    finally:
        progress.done()
    if out.format in ("text", "wide"):
        extra = ("UID", "BYTES") if wide else ()
        out.table(("NAMESPACE", "NAME", "VERSION", *extra, "LABELS"), rows)
    return 0


def _watch(
    client: ResourceStoreClient,
    prefix: ResourceKey,
    labels: str | None,
    args: argparse.Namespace,
    out: Output,
) -> int:
    # The watch retries an unreachable server forever; a one-item list first turns a
    # wrong address into one clear error instead of a silent wait.
    client.list_page(prefix, labels=labels, limit=1)
    watch = client.watch(prefix, since=args.since, labels=labels, send_initial_events=args.initial)
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    done = object()

    def pump() -> None:
        # The store watch blocks in gRPC; a thread lets --timeout and --count end it.
        try:
            for event in watch:
                events.put(event)
        except Exception as exc:
            events.put(exc)
        events.put(done)

    reader = threading.Thread(target=pump, name="xds-client-store-watch", daemon=True)
    reader.start()
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    count = 0
    try:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return 0
            try:
                item = events.get(timeout=remaining)
            except queue.Empty:
                return 0
            if item is done:
                return 0
            if isinstance(item, Exception):
                raise item
            out.record(store_record(item))
            count += 1
            if args.count is not None and count >= args.count:
                return 0
    finally:
        watch.close()
        reader.join(_JOIN_TIMEOUT)
