"""Tables for notebooks: ``_repr_html_`` on what the client hands out."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from xds_client.protocol import CachedResource

__all__ = ["ResourceCache", "html_table"]

M = TypeVar("M")


def html_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain HTML table, every cell escaped."""

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class ResourceCache(dict[str, CachedResource[Any]]):
    """The cache of one type, as :meth:`XdsClient.resources` returns it: a plain dict
    (name -> :class:`CachedResource`) that a notebook shows as a table."""

    def __init__(self, type_url: str, items: Mapping[str, CachedResource[Any]]) -> None:
        super().__init__(items)
        self.type_url = type_url
        """The type of every resource in it."""

    def _repr_html_(self) -> str:
        kind = self.type_url.rsplit(".", 1)[-1]
        rows = [
            (name, item.version, kind, len(item.raw), "" if item.ttl is None else f"{item.ttl:g}s")
            for name, item in sorted(self.items())
        ]
        return html_table(("name", "version", "type", "bytes", "ttl"), rows)
