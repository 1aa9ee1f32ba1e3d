"""What the command line prints: readable lines and tables, or JSON Lines.

Every xDS or store event becomes one record with the same keys (``event``,
``type_url``, ``name``, ``version``, ``reason``, ``error``, ``resource``;
None where they do not apply). ``-o json`` (``--json``) prints each record as
one JSON line, ``-o yaml`` as one YAML document, ``-o name`` as ``cds/backend``;
otherwise a short line per event goes to stdout. stdout holds data only:
connectivity notes go to stderr, progress too and only when stderr is a
terminal, so pipes and files stay clean.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from google.protobuf.message import Message

from xds_client.client import ConnectivityChanged
from xds_client.client import to_dict as message_to_dict
from xds_client.errors import UnknownResourceTypeError
from xds_client.protocol import (
    ResourceDeletionIgnored,
    ResourceDoesNotExist,
    ResourceRemoved,
    ResourceUpdated,
    ResponseRejected,
)
from xds_client.resources import resource_type

__all__ = ["Output", "Progress", "kind_of", "name_of", "store_record", "xds_records"]

RECORD_KEYS = ("event", "type_url", "name", "version", "reason", "error", "resource")


def kind_of(type_url: str) -> str:
    """A short label of a type: its alias in capitals (``CDS``) or its message name."""
    try:
        rtype = resource_type(type_url)
    except UnknownResourceTypeError:
        return type_url.rsplit("/", 1)[-1]
    if rtype.alias:
        return rtype.alias.upper() + (" v2" if rtype.api_version == "v2" else "")
    return rtype.message_name.rsplit(".", 1)[-1]


def _record(event: str, **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    record["event"] = event
    record.update(fields)
    return record


def xds_records(event: object, *, with_resource: bool = True) -> list[dict[str, Any]]:
    """The JSON records of one watch event (a NACK gives one per rejected name)."""
    if isinstance(event, ResourceUpdated):
        resource = message_to_dict(event.resource) if with_resource else None
        return [
            _record(
                "updated",
                type_url=event.type_url,
                name=event.name,
                version=event.version,
                resource=resource,
            )
        ]
    if isinstance(event, ResourceRemoved):
        return [_record("removed", type_url=event.type_url, name=event.name, reason=event.reason)]
    if isinstance(event, ResourceDoesNotExist):
        return [_record("does_not_exist", type_url=event.type_url, name=event.name)]
    if isinstance(event, ResourceDeletionIgnored):
        return [_record("deletion_ignored", type_url=event.type_url, name=event.name)]
    if isinstance(event, ResponseRejected):
        errors = event.errors or {"(response)": "rejected"}
        return [
            _record(
                "nacked", type_url=event.type_url, name=name, version=event.version, error=error
            )
            for name, error in sorted(errors.items())
        ]
    if isinstance(event, ConnectivityChanged):
        return [
            _record(
                "connected" if event.connected else "disconnected",
                server=event.server,
                type_urls=list(event.type_urls),
                error=event.reason,
            )
        ]
    raise TypeError(f"not a watch event: {event!r}")


def store_record(event: Any) -> dict[str, Any]:
    """The JSON record of a store :class:`~xds_client.store.StoreWatchEvent`."""
    key = event.key
    resource = None
    if event.type not in ("bookmark", "resynced"):
        resource = event.json()
    return _record(
        event.type,
        type_url=None,
        name=key.name if key is not None else None,
        namespace=key.namespace if key is not None else None,
        key=str(key) if key is not None else None,
        version=str(event.resource_version),
        resource=resource,
    )


def _text_line(record: Mapping[str, Any], *, wide: bool = False) -> str:
    event = record["event"]
    stamp = time.strftime("%H:%M:%S")
    if event in ("connected", "disconnected"):
        kinds = ",".join(kind_of(t) for t in record.get("type_urls") or ())
        tail = f"  ({record['error']})" if record.get("error") else ""
        return f"{stamp} {event:<16} {record['server']}  [{kinds}]{tail}"
    subject = record.get("key") or record.get("name") or ""
    if record.get("type_url"):
        subject = f"{kind_of(record['type_url']):<5} {subject}"
    parts = [f"{stamp} {event:<16} {subject}".rstrip()]
    if record.get("version"):
        parts.append(f"version {record['version']}")
    if record.get("reason"):
        parts.append(f"reason {record['reason']}")
    if wide:
        # kubectl's -o wide: the same line with more columns.
        if record.get("type_url"):
            parts.append(f"type {record['type_url']}")
        if record.get("namespace") is not None:
            parts.append(f"namespace {record['namespace'] or '(all)'}")
        if record.get("resource") is not None:
            size = len(json.dumps(record["resource"], separators=(",", ":"), default=str))
            parts.append(f"json-bytes {size}")
    if record.get("error"):
        parts.append(f"error: {record['error']}")
    return "  ".join(parts)


class Output:
    """Prints records in one of the ``-o`` formats: text, json (JSON Lines), yaml, wide, name.

    stdout gets data only; notes for the reader (connectivity, headers) go to stderr.
    """

    def __init__(self, out: TextIO, err: TextIO, *, format: str = "text") -> None:
        self.out = out
        self.err = err
        self.format = format
        """``text``, ``json``, ``yaml``, ``wide`` or ``name``."""
        self.headers = True
        """False for ``--no-headers``: tables without their header line."""

    @property
    def json_lines(self) -> bool:
        """True for ``-o json`` (``--json``)."""
        return self.format == "json"

    def record(self, record: Mapping[str, Any]) -> None:
        """One event: a JSON line, a YAML document, a name or a text line.

        Connectivity is a note on stderr, so ``watch --json | jq`` sees resources alone.
        """
        if record["event"] in ("connected", "disconnected"):
            self.note(_text_line(record))
        elif self.format == "json":
            self.json(record)
        elif self.format == "yaml":
            self.yaml(dict(record))
        elif self.format == "name":
            if record.get("name") or record.get("key"):
                self.line(name_of(record))  # a bookmark names nothing: no line
        else:
            self.line(_text_line(record, wide=self.format == "wide"))

    def json(self, value: Any) -> None:
        """One JSON value on one line."""
        self.out.write(json.dumps(value, separators=(",", ":"), default=str) + "\n")
        self.out.flush()

    def yaml(self, value: Any) -> None:
        """One YAML document (``---`` first, so a stream of them parses)."""
        import yaml

        text = yaml.safe_dump(
            json.loads(json.dumps(value, default=str)), sort_keys=False, allow_unicode=True
        )
        self.out.write("---\n" + text)
        self.out.flush()

    def document(self, value: Any) -> None:
        """A resource body: one JSON line (json), a YAML document (yaml), else indented JSON."""
        if self.format == "json":
            self.json(value)
        elif self.format == "yaml":
            self.yaml(value)
        else:
            self.line(json.dumps(value, indent=2, default=str))

    def line(self, text: str = "") -> None:
        """A line of text on stdout."""
        self.out.write(text + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """A line for the reader, not data: on stderr."""
        self.err.write(text + "\n")
        self.err.flush()

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        """Aligned columns (text mode only)."""
        text = format_table(headers, rows)
        if not self.headers:
            text = text.split("\n", 1)[1]
        self.out.write(text)
        self.out.flush()

    def message(self, message: Message) -> None:
        """A protobuf message as proto JSON (one line with json, YAML, or indented JSON)."""
        self.document(message_to_dict(message))


def name_of(record: Mapping[str, Any]) -> str:
    """``cds/backend`` (kubectl's ``-o name``); a store key for store records."""
    if record.get("key"):
        return str(record["key"])
    kind = kind_of(record["type_url"]).lower().replace(" ", "-") if record.get("type_url") else ""
    return f"{kind}/{record.get('name') or ''}"


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain-text table with one space-padded column per header."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


class Progress:
    """A one-line progress note on stderr, shown only when stderr is a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.enabled = stream.isatty()
        self._shown = False

    def update(self, text: str) -> None:
        """Replace the note with ``text``."""
        if self.enabled:
            self._stream.write("\r\x1b[K" + text)
            self._stream.flush()
            self._shown = True

    def done(self) -> None:
        """Erase the note."""
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False
