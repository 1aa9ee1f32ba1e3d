"""Events the protocol core hands to its driver: what changed, and why.

Every event is a small immutable value. The driver dispatches them to
watchers; none of them refers back to the protocol object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from google.protobuf.message import Message

__all__ = [
    "Event",
    "RemovalReason",
    "ResourceDeletionIgnored",
    "ResourceErrorReported",
    "ResourceDoesNotExist",
    "ResourceRemoved",
    "ResourceUpdated",
    "ResponseAccepted",
    "ResponseRejected",
]

M = TypeVar("M", bound=Message)

RemovalReason = Literal["deleted", "ttl_expired", "data_error"]


@dataclass(frozen=True, slots=True)
class ResourceUpdated(Generic[M]):
    """A resource arrived for the first time or its serialized bytes changed."""

    type_url: str
    """Type URL of the resource (v3 or v2, as subscribed)."""
    name: str
    """Name of the resource (the wrapper's name when it came in a ``Resource`` wrapper)."""
    version: str
    """SotW: ``version_info`` of the response; delta: the resource's own version."""
    resource: M
    """The decoded message."""
    aliases: tuple[str, ...] = ()
    """Alternative names the server gave (VHDS); a subscription to any of them is satisfied."""
    metadata: Message | None = None
    """The ``metadata`` (``envoy.config.core.v3.Metadata``) of the
    ``envoy.service.discovery.v3.Resource`` it came in (delta, or a SotW wrapper);
    None when it came bare or its wrapper has none."""
    control_plane: str = ""
    """``control_plane.identifier`` of the response that carried it (``""`` when absent)."""

    def __repr__(self) -> str:
        # The message's type and size, not the whole protobuf (clusters run to kilobytes).
        resource = self.resource
        body = f"<{resource.DESCRIPTOR.full_name}, {resource.ByteSize()} bytes>"
        aliases = f", aliases={self.aliases!r}" if self.aliases else ""
        if self.metadata is not None:
            aliases += f", metadata=<{self.metadata.ByteSize()} bytes>"
        if self.control_plane:
            aliases += f", control_plane={self.control_plane!r}"
        return (
            f"ResourceUpdated(type_url={self.type_url!r}, name={self.name!r}, "
            f"version={self.version!r}, resource={body}{aliases})"
        )


_new = object.__new__
(
    _set_type_url, _set_name, _set_version, _set_resource, _set_aliases, _set_metadata,
    _set_control_plane,
) = (getattr(ResourceUpdated, f.name).__set__ for f in fields(ResourceUpdated))  # fmt: skip


def new_resource_updated(  # noqa: PLR0917 - positional like the dataclass it builds
    type_url: str,
    name: str,
    version: str,
    resource: Message,
    aliases: tuple[str, ...],
    metadata: Message | None,
    control_plane: str,
) -> ResourceUpdated[Any]:
    """``ResourceUpdated(...)`` for the hot path: slot setters instead of the frozen
    dataclass's ``object.__setattr__`` per field (about half the cost)."""
    event: ResourceUpdated[Any] = _new(ResourceUpdated)
    _set_type_url(event, type_url)
    _set_name(event, name)
    _set_version(event, version)
    _set_resource(event, resource)
    _set_aliases(event, aliases)
    _set_metadata(event, metadata)
    _set_control_plane(event, control_plane)
    return event


def new_plain_updates(
    type_url: str, names: Sequence[str], version: str, messages: Sequence[Message],
    control_plane: str,
) -> list[ResourceUpdated[Any]]:  # fmt: skip
    """:func:`new_resource_updated` for many bare resources (no aliases, no metadata)."""
    out: list[ResourceUpdated[Any]] = []
    append = out.append
    new = _new
    for name, message in zip(names, messages, strict=True):
        event: ResourceUpdated[Any] = new(ResourceUpdated)
        _set_type_url(event, type_url)
        _set_name(event, name)
        _set_version(event, version)
        _set_resource(event, message)
        _set_aliases(event, ())
        _set_metadata(event, None)
        _set_control_plane(event, control_plane)
        append(event)
    return out


@dataclass(frozen=True, slots=True)
class ResourceRemoved:
    """A cached resource is gone: the server deleted it, or its TTL ran out."""

    type_url: str
    """Type URL of the resource."""
    name: str
    """Name of the resource."""
    reason: RemovalReason
    """``"deleted"`` (absent from a full-state SotW response, or in delta
    ``removed_resources``) or ``"ttl_expired"`` (no refresh before its TTL)."""
    aliases: tuple[str, ...] = ()
    """Alternative names the resource had (VHDS), so alias watchers hear of it too."""


@dataclass(frozen=True, slots=True)
class ResourceDoesNotExist:
    """A subscribed resource did not arrive before the does-not-exist timer fired.

    It may still arrive later; a :class:`ResourceUpdated` then follows.
    """

    type_url: str
    """Type URL of the resource."""
    name: str
    """The subscribed name (or alias)."""


@dataclass(frozen=True, slots=True)
class ResourceErrorReported:
    """The server reported an error for this resource (xRFC TP3 ``resource_errors``).

    Any cached value stays in use; CSDS shows ``RECEIVED_ERROR`` until a valid
    update arrives. (``NOT_FOUND`` is not reported this way: it means the resource
    does not exist, and :class:`ResourceDoesNotExist` or :class:`ResourceRemoved`
    follows.)
    """

    type_url: str
    """Type URL of the resource."""
    name: str
    """Name of the resource the error is about."""
    code: int
    """``google.rpc.Code`` of the error (14 UNAVAILABLE, 13 INTERNAL, ...)."""
    message: str
    """The server's message."""


@dataclass(frozen=True, slots=True)
class ResourceDeletionIgnored:
    """The server deleted a resource, but ``ignore_resource_deletion`` keeps it (gRFC A53).

    Emitted once per deletion; the cached value stays in use.
    """

    type_url: str
    """Type URL of the resource."""
    name: str
    """Name of the resource the server no longer sends."""


@dataclass(frozen=True, slots=True)
class ResponseAccepted:
    """A response was ACKed (one per accepted response)."""

    type_url: str
    """Type URL of the response."""
    version: str
    """SotW ``version_info`` or delta ``system_version_info`` of the response."""
    nonce: str
    """Nonce of the response, copied into the ACK."""
    control_plane: str = ""
    """The response's ``control_plane.identifier`` (which server instance sent it)."""


@dataclass(frozen=True, slots=True)
class ResponseRejected:
    """A response was NACKed (one per rejected response).

    By default (gRFC A46) the valid resources of a rejected response are still
    applied; with ``reject_whole_response`` nothing of it is.
    """

    type_url: str
    """Type URL of the response."""
    nonce: str
    """Nonce of the rejected response, copied into the NACK."""
    version: str
    """Version the server sent (SotW ``version_info`` or delta ``system_version_info``)."""
    errors: Mapping[str, str]
    """Reason per rejected resource name; ``"(response)"`` keys problems of the whole
    response and ``"resources[i]"`` a resource whose name could not be read."""
    control_plane: str = ""
    """The response's ``control_plane.identifier`` (which server instance sent it)."""


Event: TypeAlias = (
    ResourceUpdated[Message]
    | ResourceRemoved
    | ResourceDoesNotExist
    | ResourceDeletionIgnored
    | ResourceErrorReported
    | ResponseAccepted
    | ResponseRejected
)
"""Anything :meth:`receive` or :meth:`tick` returns."""
