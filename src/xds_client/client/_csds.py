"""CSDS ``ClientConfig`` building and secret redaction.

Redaction follows Envoy's own rule: a field annotated ``(udpa.annotations.sensitive)``
(private keys, passwords, generic secrets, session ticket keys, OAuth secrets
...) is blanked, at any depth, also inside ``Any`` fields whose type is known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from envoy.admin.v3.config_dump_shared_pb2 import ClientResourceStatus, UpdateFailureState
from envoy.config.core.v3.base_pb2 import Node as NodeProto
from envoy.service.status.v3.csds_pb2 import ClientConfig
from google.protobuf import symbol_database
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from udpa.annotations import sensitive_pb2

from xds_client.protocol._cache import CachedResource, ResourceState
from xds_client.transport._base import REDACTED

__all__ = ["REDACTED", "build_client_config", "redact"]

_STATUS = {
    "REQUESTED": ClientResourceStatus.REQUESTED,
    "ACKED": ClientResourceStatus.ACKED,
    "NACKED": ClientResourceStatus.NACKED,
    "DOES_NOT_EXIST": ClientResourceStatus.DOES_NOT_EXIST,
    "RECEIVED_ERROR": ClientResourceStatus.RECEIVED_ERROR,
    "TIMEOUT": ClientResourceStatus.TIMEOUT,
}
_sensitive_cache: dict[str, bool] = {}


def _is_sensitive(field: FieldDescriptor) -> bool:
    hit = _sensitive_cache.get(field.full_name)
    if hit is None:
        options = field.GetOptions()
        hit = bool(options.Extensions[sensitive_pb2.sensitive])
        _sensitive_cache[field.full_name] = hit
    return hit


def _blank(message: Message, field: FieldDescriptor) -> None:
    if field.type == FieldDescriptor.TYPE_STRING:
        if _is_repeated(field):
            values = getattr(message, field.name)
            for i in range(len(values)):
                values[i] = REDACTED
        else:
            setattr(message, field.name, REDACTED)
    elif field.type == FieldDescriptor.TYPE_BYTES:
        if _is_repeated(field):
            values = getattr(message, field.name)
            for i in range(len(values)):
                values[i] = REDACTED.encode()
        else:
            setattr(message, field.name, REDACTED.encode())
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        # A DataSource or similar: replace the whole value with an inline marker
        # when it has an inline_string field, else clear it.
        targets = list(getattr(message, field.name)) if _is_repeated(field) else None
        if targets is None:
            if not message.HasField(field.name):
                return
            targets = [getattr(message, field.name)]
        for sub in targets:
            fields = sub.DESCRIPTOR.fields_by_name
            sub.Clear()
            if "inline_string" in fields:
                sub.inline_string = REDACTED
    else:
        message.ClearField(field.name)


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _walk(message: Message) -> bool:
    """Redact ``message`` in place; True when anything changed."""
    changed = False
    if isinstance(message, AnyProto):
        return _walk_any(message)
    for field, value in message.ListFields():
        if _is_sensitive(field):
            _blank(message, field)
            changed = True
            continue
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            entry_value = message_type.fields_by_name["value"]
            if entry_value.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value.values():
                    changed |= _walk(item)
            continue
        if _is_repeated(field):
            for item in value:
                changed |= _walk(item)
        else:
            changed |= _walk(value)
    return changed


def _walk_any(packed: AnyProto) -> bool:
    name = packed.type_url.rsplit("/", 1)[-1]
    try:
        cls: Any = symbol_database.Default().GetSymbol(name)
    except KeyError:
        return False  # unknown type: nothing we can look into
    inner = cls()
    if not packed.Unpack(inner):
        return False
    if _walk(inner):
        type_url = packed.type_url
        packed.Pack(inner)
        packed.type_url = type_url
        return True
    return False


def redact(message: Message) -> Message:
    """A copy of ``message`` with every sensitive field blanked (``[redacted]``)."""
    copy = type(message)()
    copy.CopyFrom(message)
    _walk(copy)
    return copy


def _timestamp(wall: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(wall * 1e9))
    return ts


def build_client_config(
    node: NodeProto,
    items: Iterable[tuple[ResourceState, CachedResource[Any] | None]],
    to_wall: Callable[[float], float],
) -> ClientConfig:
    """One GenericXdsConfig per resource; resource bodies redacted.

    ``to_wall`` turns the client's monotonic timestamps into Unix time.
    """
    config = ClientConfig()
    config.node.CopyFrom(node)
    for state, cached in items:
        generic = config.generic_xds_configs.add(
            type_url=state.type_url,
            name=state.name,
            version_info=state.version,
            client_status=_STATUS[state.status],
        )
        if cached is not None:
            generic.xds_config.Pack(redact(cached.resource))
        if state.last_updated:
            generic.last_updated.CopyFrom(_timestamp(to_wall(state.last_updated)))
        if state.status in ("NACKED", "RECEIVED_ERROR"):
            failure = UpdateFailureState(
                details=state.error or "", version_info=state.failed_version or ""
            )
            if state.failed_at is not None:
                failure.last_update_attempt.CopyFrom(_timestamp(to_wall(state.failed_at)))
            generic.error_state.CopyFrom(failure)
    return config
