"""Proto JSON of resources: ``Any`` fields resolved, secrets redacted (:func:`to_dict`).

``json_format`` can only print an ``Any`` whose message is in the default
descriptor pool, that is whose generated module was imported. xds-protos has
hundreds of modules and we import none of them eagerly, so before printing we
walk the message, and for each ``Any`` of an unknown type we import the
``*_pb2`` modules of its protobuf package (xds-protos lays packages out as
Python packages). Secrets are blanked by the client's own redaction, after the
imports, so that sensitive fields inside ``Any`` values are found too.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct

from xds_client.resources import message_descriptor

# One redaction rule for CSDS dumps, the CLI and these helpers.
from ._csds import redact

__all__ = ["resolve_any_types", "to_dict", "to_json"]

_MAX_DEPTH = 8  # an Any inside an Any inside ...; real configs nest three or four deep


def _new_message(descriptor: Descriptor) -> Message:
    return message_factory.GetMessageClass(descriptor)()


def _walk(message: Message, depth: int, found: list[str]) -> None:
    if isinstance(message, AnyProto):
        if not message.type_url:
            return
        descriptor = message_descriptor(message.type_url.rsplit("/", 1)[-1])
        if descriptor is None:
            found.append(message.type_url)
            return
        if depth >= _MAX_DEPTH:
            return
        inner = _new_message(descriptor)
        if message.Unpack(inner):
            _walk(inner, depth + 1, found)
        return
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            if message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                for item in value.values():
                    _walk(item, depth, found)
            continue
        if field.is_repeated:
            for item in value:
                _walk(item, depth, found)
        else:
            _walk(value, depth, found)


def resolve_any_types(message: Message) -> list[str]:
    """Import what every ``Any`` in ``message`` needs; returns type URLs still unknown."""
    missing: list[str] = []
    _walk(message, 0, missing)
    return missing


def to_dict(message: Message, *, redacted: bool = True) -> dict[str, Any]:
    """Proto JSON of ``message`` as a dict (field names as in the .proto files).

    Every field marked ``(udpa.annotations.sensitive)`` (private keys, passwords ...)
    is replaced with ``"[redacted]"``, inside ``Any`` fields too, unless
    ``redacted=False``. ``Any`` fields are decoded: the message module of each
    ``@type`` is imported on demand; one that no installed module defines is shown
    as ``{"@type": ..., "@unresolved": true}`` instead of failing.
    """
    missing = resolve_any_types(message)
    if redacted:
        message = redact(message)
    if missing:
        message = _strip_unknown_any(message)
    result: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, descriptor_pool=descriptor_pool.Default()
    )
    return result


def to_json(message: Message, *, redacted: bool = True, indent: int | None = None) -> str:
    """:func:`to_dict` as a JSON string (one line unless ``indent`` is given)."""
    separators = (",", ":") if indent is None else None
    return json.dumps(to_dict(message, redacted=redacted), indent=indent, separators=separators)


def _strip_unknown_any(message: Message) -> Message:
    """A copy where each ``Any`` of an unknown type keeps only its type URL."""
    copy = type(message)()
    copy.CopyFrom(message)
    _strip(copy)
    return copy


def _strip(message: Message) -> None:
    if isinstance(message, AnyProto):
        descriptor = message_descriptor(message.type_url.rsplit("/", 1)[-1])
        if message.type_url and descriptor is None:
            # Struct JSON is always printable, so mark the hole with it.
            marker = Struct()
            marker.update({"@type": message.type_url, "@unresolved": True})
            message.Pack(marker)
            return
        if descriptor is not None:
            inner = _new_message(descriptor)
            if message.Unpack(inner):
                _strip(inner)
                type_url = message.type_url
                message.Pack(inner)
                message.type_url = type_url
        return
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            if message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                for item in value.values():
                    _strip(item)
            continue
        if field.is_repeated:
            for item in value:
                _strip(item)
        else:
            _strip(value)
