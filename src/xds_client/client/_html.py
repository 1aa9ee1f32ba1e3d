"""Tables for notebooks: ``_repr_html_`` on what the client hands out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from xds_client._tables import html_table, text_table
from xds_client.protocol import CachedResource

__all__ = ["ResourceCache", "html_table"]

M = TypeVar("M")


_HEADERS = ("name", "version", "type", "bytes", "ttl")


class ResourceCache(dict[str, CachedResource[Any]]):
    """The cache of one type, as :meth:`XdsClient.resources` returns it: a plain dict
    (name -> :class:`CachedResource`) that a notebook shows as a table."""

    def __init__(self, type_url: str, items: Mapping[str, CachedResource[Any]]) -> None:
        super().__init__(items)
        self.type_url = type_url
        """The type of every resource in it."""

    def _rows(self) -> list[tuple[object, ...]]:
        kind = self.type_url.rsplit(".", 1)[-1]
        return [
            (name, item.version, kind, len(item.raw), "" if item.ttl is None else f"{item.ttl:g}s")
            for name, item in sorted(self.items())
        ]

    def _repr_html_(self) -> str:
        return html_table(_HEADERS, self._rows())

    def __repr__(self) -> str:
        # The same table as text: a dict of messages and timestamps reads badly (and
        # changes from run to run); ``dict(cache)`` still shows everything.
        return text_table(_HEADERS, self._rows())
