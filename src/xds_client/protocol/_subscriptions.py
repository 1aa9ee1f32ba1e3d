"""What a client wants of each type: explicit names and the wildcard.

SotW and delta share this bookkeeping; only how it is framed on the wire
differs. ``"*"`` given as a name means the wildcard.
"""

from __future__ import annotations

from collections.abc import Iterable

from xds_client.errors import ProtocolUsageError
from xds_client.federation import glob_collection_of, is_glob_collection

__all__ = ["WILDCARD", "Subscription", "split_wildcard"]

WILDCARD = "*"
"""The name that subscribes every resource of a type (legacy wildcard, xDS and A47)."""


def split_wildcard(names: Iterable[str] | None, what: str) -> tuple[list[str], bool]:
    """Split a caller's names into explicit names and a wildcard flag.

    None (or ``"*"`` among the names) means the wildcard. A bare string is
    refused: it would otherwise be taken as one name per character.
    """
    if names is None:
        return [], True
    if isinstance(names, (str, bytes)):
        raise ProtocolUsageError(
            f"{what}() takes an iterable of names, not a single string {names!r}; pass [{names!r}]"
        )
    explicit: list[str] = []
    wildcard = False
    for name in names:
        if not isinstance(name, str):
            raise ProtocolUsageError(f"resource names are strings, got {name!r}")
        if name == WILDCARD:
            wildcard = True
        elif name:
            explicit.append(name)
        else:
            raise ProtocolUsageError("resource names must not be empty")
    return explicit, wildcard


class Subscription:
    """The subscription of one type, independent of any stream."""

    __slots__ = ("has_globs", "names", "wildcard")

    def __init__(self) -> None:
        self.names: dict[str, None] = {}
        """Explicitly subscribed names (insertion-ordered set)."""
        self.wildcard = False
        """Whether every resource of the type is wanted."""
        self.has_globs = False
        """Whether an ``xdstp://.../*`` glob collection was ever subscribed (TP1)."""

    @property
    def active(self) -> bool:
        """True when anything of the type is wanted."""
        return self.wildcard or bool(self.names)

    def wants(self, name: str, aliases: Iterable[str] = ()) -> bool:
        """Whether a resource called ``name`` (with ``aliases``) is wanted."""
        if self.wildcard or name in self.names:
            return True
        if self.has_globs and glob_collection_of(name) in self.names:
            return True
        return any(alias in self.names for alias in aliases)

    def add(self, names: Iterable[str], wildcard: bool) -> tuple[list[str], bool]:
        """Add names (and the wildcard); returns what was new."""
        added = []
        for name in names:
            if name not in self.names:
                self.names[name] = None
                added.append(name)
                if not self.has_globs and is_glob_collection(name):
                    self.has_globs = True
        wildcard_added = wildcard and not self.wildcard
        if wildcard:
            self.wildcard = True
        return added, wildcard_added

    def remove(self, names: Iterable[str], wildcard: bool) -> tuple[list[str], bool]:
        """Remove names (and the wildcard); returns what was actually removed."""
        removed = []
        for name in names:
            if name in self.names:
                del self.names[name]
                removed.append(name)
        wildcard_removed = wildcard and self.wildcard
        if wildcard_removed:
            self.wildcard = False
        return removed, wildcard_removed
