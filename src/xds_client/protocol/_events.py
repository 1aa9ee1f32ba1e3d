"""Events the protocol core hands to its driver: what changed, and why.

Every event is a small immutable value. The driver dispatches them to
watchers; none of them refers back to the protocol object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from google.protobuf.message import Message

from xds_client._prebuilt_dataclasses import dataclass

from ._mutable_twins import mutable_twin

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
    "UpdateBatch",
    "new_lazy_resource_updated",
]

M = TypeVar("M", bound=Message)

RemovalReason = Literal["deleted", "ttl_expired", "data_error"]

_setattr = object.__setattr__  # what a frozen dataclass's __init__ sets fields with


@dataclass(frozen=True, slots=True)
class ResourceUpdated(Generic[M]):
    """A resource arrived for the first time or its serialized bytes changed.

    Also once when the kept value is sent again unchanged after a NACK or a
    server-reported error of it: its status is clear again (``version`` is then the
    new response's), so a watcher told of the error learns that it is over.
    """

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
) = (getattr(ResourceUpdated, name).__set__ for name in ResourceUpdated.__match_args__)  # fmt: skip


def new_resource_updated(  # noqa: PLR0917 - positional like the dataclass it builds
    type_url: str,
    name: str,
    version: str,
    resource: Message,
    aliases: tuple[str, ...],
    metadata: Message | None,
    control_plane: str,
) -> ResourceUpdated[Any]:
    """``ResourceUpdated(...)`` for the hot path: built as its mutable twin, whose
    class then becomes ``ResourceUpdated`` (see :data:`_Draft`: about half the cost of
    the slot setters, which are about half the cost of the frozen dataclass's
    ``object.__setattr__`` per field)."""
    if _Draft is not None:
        draft = _Draft()
        draft.type_url = type_url
        draft.name = name
        draft.version = version
        draft.resource = resource
        draft.aliases = aliases
        draft.metadata = metadata
        draft.control_plane = control_plane
        draft.__class__ = ResourceUpdated  # frozen from here on
        built: ResourceUpdated[Any] = draft
        return built
    event: ResourceUpdated[Any] = _new(ResourceUpdated)
    _set_type_url(event, type_url)
    _set_name(event, name)
    _set_version(event, version)
    _set_resource(event, resource)
    _set_aliases(event, aliases)
    _set_metadata(event, metadata)
    _set_control_plane(event, control_plane)
    return event


class _LazyResourceUpdated(ResourceUpdated[M]):
    """A :class:`ResourceUpdated` of lean mode (``lazy_decode``): it holds the bytes and
    decodes them on the first access of ``resource`` (then keeps the message)."""

    __slots__ = ("_decode", "_message", "_raw")
    _decode: Callable[[bytes], M]
    _raw: bytes
    _message: M | None

    @property
    def resource(self) -> M:
        """The message, decoded from the bytes on first access."""
        message = self._message
        if message is None:
            message = self._decode(self._raw)
            _set_lazy_message(self, message)
        return message

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.type_url, self.name, self.version, self.resource, self.aliases, self.metadata,
            self.control_plane,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        # Equal to the plain event of the same values (the dataclass's __eq__ wants
        # the same class).
        if type(other) not in (ResourceUpdated, _LazyResourceUpdated):
            return NotImplemented
        return self._fields() == _LazyResourceUpdated._fields(other)  # type: ignore[arg-type]

    __hash__ = ResourceUpdated.__hash__


_set_lazy_decode, _set_lazy_raw, _set_lazy_message = (
    _LazyResourceUpdated.__dict__[slot].__set__ for slot in ("_decode", "_raw", "_message")
)


def new_lazy_resource_updated(  # noqa: PLR0917 - positional like new_resource_updated
    type_url: str,
    name: str,
    version: str,
    decode: Callable[[bytes], Message],
    raw: bytes,
    aliases: tuple[str, ...],
    metadata: Message | None,
    control_plane: str,
) -> ResourceUpdated[Any]:
    """A :class:`ResourceUpdated` whose ``resource`` is ``decode(raw)``, on first access."""
    event: _LazyResourceUpdated[Any] = _new(_LazyResourceUpdated)
    _set_type_url(event, type_url)
    _set_name(event, name)
    _set_version(event, version)
    _set_lazy_decode(event, decode)
    _set_lazy_raw(event, raw)
    _set_lazy_message(event, None)
    _set_aliases(event, aliases)
    _set_metadata(event, metadata)
    _set_control_plane(event, control_plane)
    return event


class UpdateBatch:
    """The :class:`ResourceUpdated` events of many bare resources of one response, as
    one object (not public: ``receive()`` hands out the single events).

    ``values[i]`` is the decoded message of ``names[i]``, or its bytes when ``decode``
    is set (lean mode); each event is built when taken (:meth:`event`), so a response
    of 100,000 new resources costs one object, not 100,000, until watchers take them.
    """

    __slots__ = ("_positions", "control_plane", "decode", "names", "type_url", "values", "version")

    def __init__(  # noqa: PLR0917 - internal, one per response
        self,
        type_url: str,
        version: str,
        control_plane: str,
        names: list[str],
        values: list[Any],
        decode: Callable[[bytes], Message] | None,
    ) -> None:
        self.type_url = type_url
        self.version = version
        self.control_plane = control_plane
        self.names = names
        self.values = values
        self.decode = decode
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def positions(self) -> dict[str, int]:
        """Name -> index (built once, on first use)."""
        positions = self._positions
        if positions is None:
            positions = self._positions = dict(
                zip(self.names, range(len(self.names)), strict=False)
            )
        return positions

    def event(self, index: int) -> ResourceUpdated[Any]:
        """The event of ``names[index]``."""
        decode = self.decode
        if decode is None:
            return new_resource_updated(
                self.type_url, self.names[index], self.version, self.values[index], (), None,
                self.control_plane,
            )  # fmt: skip
        return new_lazy_resource_updated(
            self.type_url, self.names[index], self.version, decode, self.values[index], (),
            None, self.control_plane,
        )  # fmt: skip

    def updates(self) -> list[ResourceUpdated[Any]]:
        """Every event, in order."""
        return self.events(range(len(self.names)))

    def events(self, positions: Iterable[int]) -> list[ResourceUpdated[Any]]:
        """The events of the resources at ``positions``, in that order."""
        names, values = self.names, self.values
        decode = self.decode
        if decode is not None:
            return [self.event(i) for i in positions]
        if not isinstance(positions, range) or positions.step != 1:
            positions = list(positions)
            picked = zip(
                [names[i] for i in positions], [values[i] for i in positions], strict=False
            )
        else:
            picked = zip(
                names[positions.start : positions.stop],
                values[positions.start : positions.stop],
                strict=False,
            )
        type_url, version, plane = self.type_url, self.version, self.control_plane
        if _Draft is None:
            return [
                new_resource_updated(type_url, name, version, message, (), None, plane)
                for name, message in picked
            ]
        out: list[ResourceUpdated[Any]] = []
        append = out.append
        draft, final = _Draft, ResourceUpdated
        for name, message in picked:
            event = draft()  # no __init__: cheaper than object.__new__(draft)
            event.type_url = type_url
            event.name = name
            event.version = version
            event.resource = message
            event.aliases = ()
            event.metadata = None
            event.control_plane = plane
            event.__class__ = final  # frozen from here on
            append(event)
        return out


_Draft = mutable_twin(ResourceUpdated)
"""``ResourceUpdated``'s mutable twin (see :mod:`._mutable_twins`)."""


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

    def __init__(
        self, type_url: str, name: str, reason: RemovalReason, aliases: tuple[str, ...] = ()
    ) -> None:
        # Written out (one per removed resource): as fast as the dataclass's own.
        _setattr(self, "type_url", type_url)
        _setattr(self, "name", name)
        _setattr(self, "reason", reason)
        _setattr(self, "aliases", aliases)


@dataclass(frozen=True, slots=True)
class ResourceDoesNotExist:
    """A subscribed resource did not arrive before the does-not-exist timer fired.

    It may still arrive later; a :class:`ResourceUpdated` then follows.
    """

    type_url: str
    """Type URL of the resource."""
    name: str
    """The subscribed name (or alias)."""

    def __init__(self, type_url: str, name: str) -> None:
        _setattr(self, "type_url", type_url)
        _setattr(self, "name", name)


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
    valid_resources: int = 0
    """How many of the response's resources were wanted and valid, unchanged ones
    included (gRFC A78 counts them: ``grpc.xds_client.resource_updates_valid``)."""

    def __init__(
        self,
        type_url: str,
        version: str,
        nonce: str,
        control_plane: str = "",
        valid_resources: int = 0,
    ) -> None:
        # Written out (one per response): as fast as the dataclass's own.
        _setattr(self, "type_url", type_url)
        _setattr(self, "version", version)
        _setattr(self, "nonce", nonce)
        _setattr(self, "control_plane", control_plane)
        _setattr(self, "valid_resources", valid_resources)


_AcceptedDraft = mutable_twin(ResponseAccepted)
"""``ResponseAccepted``'s mutable twin (see :mod:`._mutable_twins`)."""


def new_response_accepted(
    type_url: str, version: str, nonce: str, control_plane: str, valid_resources: int
) -> ResponseAccepted:
    """``ResponseAccepted(...)`` for the hot path (one per response): built as its
    mutable twin, about half the cost of the written-out ``__init__``."""
    if _AcceptedDraft is None:
        return ResponseAccepted(type_url, version, nonce, control_plane, valid_resources)
    draft = _AcceptedDraft()
    draft.type_url = type_url
    draft.version = version
    draft.nonce = nonce
    draft.control_plane = control_plane
    draft.valid_resources = valid_resources
    draft.__class__ = ResponseAccepted  # frozen from here on
    built: ResponseAccepted = draft
    return built


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
    valid_resources: int = 0
    """How many of the response's resources were wanted and valid (gRFC A78)."""
    invalid_resources: int = 0
    """How many were invalid: wanted ones that failed validation, ones that could not
    be read, or all of them when the response is rejected as a whole (gRFC A78)."""


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
