"""The two wire dialects of the ResourceStore API, and what each puts on the wire.

Grafana changed ``resource.proto`` after its first version (mid 2024, "the
seed") in ways that stay silent when a client and a server disagree:

===============================  ======================  ==========================
field                            ``SEED``                ``GRAFANA`` (today)
===============================  ======================  ==========================
``ReadRequest.resource_version``  field 3                 field 2
``ListRequest`` version match     ``version_match`` (3)   ``version_match_v2`` (7)
``ListRequest.source``            (none: STORE only)      HISTORY, TRASH (6)
``ListResponse.error``            (none: status details)  field 5
``Requirement.exact``             (none)                  field 4
``BulkStore.BulkProcess``         (none)                  yes
===============================  ======================  ==========================

One generated module carries both (the seed's fields are named ``seed_*`` or
kept under the deprecated names); the functions here fill the fields of one
dialect and read them back on the server side. A client decodes
``ListResponse.error`` in either dialect: a seed server never sets it.
"""

from __future__ import annotations

from enum import Enum

from xds_client.errors import UsageError
from xds_client.store._proto import resource_pb2 as pb

__all__ = ["Dialect", "ListSource"]


class Dialect(str, Enum):
    """Which ``resource.proto`` a client speaks or a test server serves."""

    GRAFANA = "grafana"
    """Grafana's current ``pkg/storage/unified/proto/resource.proto`` (the default)."""
    SEED = "seed"
    """Grafana's first ResourceStore proto (mid 2024)."""

    @classmethod
    def of(cls, value: Dialect | str) -> Dialect:
        """Accept a :class:`Dialect` or its name (``"grafana"``, ``"seed"``)."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(repr(d.value) for d in cls)
            raise UsageError(
                f"unknown ResourceStore dialect {value!r}; use one of {names}"
            ) from None


class ListSource(str, Enum):
    """Where a list reads from (today's Grafana only)."""

    STORE = "store"
    """The current objects."""
    HISTORY = "history"
    """Every kept version of one object (the key needs a name)."""
    TRASH = "trash"
    """Deleted objects, the last version of each."""


_SOURCE_TO_WIRE = {
    ListSource.STORE: pb.ListRequest.STORE,
    ListSource.HISTORY: pb.ListRequest.HISTORY,
    ListSource.TRASH: pb.ListRequest.TRASH,
}


# ------------------------------------------------------------------ client side


def read_request(key: pb.ResourceKey, resource_version: int, dialect: Dialect) -> pb.ReadRequest:
    """A read of ``key`` (at ``resource_version`` when not 0)."""
    if dialect is Dialect.SEED:
        return pb.ReadRequest(key=key, seed_resource_version=resource_version)
    return pb.ReadRequest(key=key, resource_version=resource_version)


def set_version_match(
    req: pb.ListRequest, resource_version: int, *, exact: bool, dialect: Dialect
) -> None:
    """Fill the version match of a list request in the dialect's field."""
    if exact and resource_version <= 0:
        raise UsageError("a list at an exact version needs resource_version > 0")
    if dialect is Dialect.SEED:
        if exact:
            req.version_match = pb.DEPRECATED_Exact
        return
    if exact:
        req.version_match_v2 = pb.Exact
    elif resource_version > 0:
        req.version_match_v2 = pb.NotOlderThan
    else:
        req.version_match_v2 = pb.Unset


def set_source(req: pb.ListRequest, source: ListSource | str, dialect: Dialect) -> None:
    """Ask for history or trash; only today's Grafana has them."""
    try:
        value = ListSource(source)
    except ValueError:
        names = ", ".join(repr(s.value) for s in ListSource)
        raise UsageError(f"unknown list source {source!r}; use one of {names}") from None
    if value is ListSource.STORE:
        return
    if dialect is Dialect.SEED:
        raise UsageError(f"listing {value.value!r} needs the 'grafana' dialect")
    req.source = _SOURCE_TO_WIRE[value]


# ------------------------------------------------------------------ server side


def requested_read_version(req: pb.ReadRequest, dialect: Dialect) -> int:
    """The version a read asks for, as a server of ``dialect`` decodes it."""
    return req.seed_resource_version if dialect is Dialect.SEED else req.resource_version


def wants_exact(req: pb.ListRequest, dialect: Dialect) -> bool:
    """Whether a list asks for exactly its resource version, as a server of ``dialect`` reads it.

    Today's Grafana migrates the deprecated ``version_match`` when
    ``version_match_v2`` is not set (``MigrateListRequestVersionMatch`` in
    ``pkg/storage/unified/resource``): the seed's Exact becomes Exact and its
    NotOlderThan becomes Unset (what the seed's servers did with it). A seed
    server knows nothing of the v2 field.
    """
    if dialect is Dialect.SEED:
        return req.HasField("version_match") and req.version_match == pb.DEPRECATED_Exact
    if req.version_match_v2 == pb.UNKNOWN and req.HasField("version_match"):
        return req.version_match == pb.DEPRECATED_Exact
    return req.version_match_v2 == pb.Exact


def requested_source(req: pb.ListRequest, dialect: Dialect) -> ListSource:
    """The source a list reads from (a seed server only has the store)."""
    if dialect is Dialect.SEED:
        return ListSource.STORE
    for source, wire in _SOURCE_TO_WIRE.items():
        if wire == req.source:
            return source
    return ListSource.STORE
