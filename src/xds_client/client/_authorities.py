"""Authorities (gRFC A47): which xDS servers hold the resources of each ``xdstp://`` name.

:class:`Authority` is what the bootstrap's ``authorities`` map (or the client's
``authorities=`` argument) says about one authority. :class:`AuthorityRouter`
turns a resource name into the ordered list of servers to ask, deduplicating
servers across authorities (the same server is one channel and one stream, as
A47 requires). It is pure: the session uses it to pick a stream for each name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.federation import ResourceNameError, is_xdstp, parse_xdstp
from xds_client.transport import ServerTarget

__all__ = ["Authority", "AuthorityRouter"]

_MEMO_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class Authority:
    """One entry of the bootstrap's ``authorities`` map (gRFC A47)."""

    servers: tuple[ServerTarget, ...] = ()
    """The authority's ``xds_servers`` in priority order; empty means the top-level ones."""
    client_listener_resource_name_template: str | None = None
    """Listener name template for ``xds://<authority>/...`` targets; None means
    ``xdstp://<authority>/envoy.config.listener.v3.Listener/%s``."""
    fallback_on_reachability_only: bool = False
    """gRFC A95: fall back to the next server as soon as the current one is
    unreachable, even with every resource cached. This client's fallback already
    works that way for every authority (A71's "only with uncached resources"
    condition is not applied), so the flag is read and kept, and changes nothing."""


class AuthorityRouter:
    """Distinct servers in one list, and which of them each authority uses."""

    def __init__(
        self, servers: Sequence[ServerTarget], authorities: Mapping[str, Authority]
    ) -> None:
        self.targets: list[ServerTarget] = list(servers)
        """Every distinct server; the top-level ones first, at their old indices."""
        self.default = tuple(range(len(servers)))
        self.authorities = dict(authorities)
        self._groups: dict[str, tuple[int, ...]] = {}
        self._memo: dict[str, tuple[int, ...]] = {}
        """Group of each xdstp name seen (parsing one costs ~50 us)."""
        for name, authority in self.authorities.items():
            if not authority.servers:
                self._groups[name] = self.default
                continue
            indices = []
            for target in authority.servers:
                try:
                    index = self.targets.index(target)
                except ValueError:
                    index = len(self.targets)
                    self.targets.append(target)
                indices.append(index)
            self._groups[name] = tuple(indices)

    def group_of(self, name: str) -> tuple[int, ...]:
        """Indices (into :attr:`targets`) of the servers to ask for ``name``, in order.

        Raises :class:`ResourceNameError` for a malformed ``xdstp`` name or one
        whose authority is not configured (A47: that is an error, not a guess).
        """
        if not is_xdstp(name):
            return self.default
        known = self._memo.get(name)
        if known is not None:
            return known
        authority = parse_xdstp(name).authority
        group = self._groups.get(authority)
        if group is None:
            names = ", ".join(repr(a) for a in sorted(self._groups)) or "none"
            raise ResourceNameError(
                name, f"authority {authority!r} is not configured (authorities: {names})"
            )
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()  # bounded: names come and go with watches
        self._memo[name] = group
        return group

    def authority_of(self, name: str) -> str | None:
        """The authority of an ``xdstp`` name; None for an old-style name."""
        return parse_xdstp(name).authority if is_xdstp(name) else None
