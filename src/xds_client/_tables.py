"""HTML tables for notebooks (``_repr_html_``), shared by the xDS and store clients."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["html_table", "object_html", "objects_table", "text_table"]


def _escape(text: str) -> str:
    import html  # loads with the first table a notebook shows, not with the client

    return html.escape(text)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain HTML table, every cell escaped."""
    head = "".join(f"<th>{_escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{_escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """The same table as aligned text (what a terminal shows)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def objects_table(objects: Iterable[Any], *, note: str = "") -> str:
    """Store objects (``StoredObject``) as a table: namespace, name, version, labels.

    ``note`` is a caption above the rows (escaped).
    """
    rows = [
        (
            o.key.namespace,
            o.key.name,
            o.resource_version,
            ",".join(f"{k}={v}" for k, v in sorted(o.labels.items())),
        )
        for o in objects
    ]
    table = html_table(("namespace", "name", "resource version", "labels"), rows)
    if note:
        table = table.replace("<table>", f"<table><caption>{_escape(note)}</caption>", 1)
    return table


def object_html(obj: Any) -> str:
    """One store object: its row, then its JSON document."""
    import html
    import json

    document = html.escape(json.dumps(obj.json(), indent=2, default=str))
    return f"{objects_table([obj])}<pre>{document}</pre>"
