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

import importlib
import importlib.util
import json
import logging
import pkgutil
from typing import Any

from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

# One redaction rule for CSDS dumps, the CLI and these helpers.
from ._csds import redact

__all__ = ["resolve_any_types", "to_dict", "to_json"]

log = logging.getLogger("xds_client.client")
_MAX_DEPTH = 8  # an Any inside an Any inside ...; real configs nest three or four deep
_tried_packages: set[str] = set()


def _known(full_name: str) -> bool:
    try:
        descriptor_pool.Default().FindMessageTypeByName(full_name)
    except KeyError:
        return False
    return True


def _new_message(full_name: str) -> Message:
    descriptor = descriptor_pool.Default().FindMessageTypeByName(full_name)
    return message_factory.GetMessageClass(descriptor)()


def _import_package_of(full_name: str) -> bool:
    """Import the modules of the package that defines ``full_name``; True when found."""
    parts = full_name.split(".")
    # ``a.b.v3.Outer.Inner``: try the longest package prefix first.
    for cut in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:cut])
        if package in _tried_packages:
            continue
        _tried_packages.add(package)
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        for info in pkgutil.iter_modules(spec.submodule_search_locations):
            if info.name.endswith("_pb2"):
                try:
                    importlib.import_module(f"{package}.{info.name}")
                except Exception:  # a broken generated module must not break printing
                    log.debug("cannot import %s.%s", package, info.name, exc_info=True)
        if _known(full_name):
            return True
    return _known(full_name)


def _walk(message: Message, depth: int, found: list[str]) -> None:
    if isinstance(message, AnyProto):
        if not message.type_url:
            return
        name = message.type_url.rsplit("/", 1)[-1]
        if not _known(name) and not _import_package_of(name):
            found.append(message.type_url)
            return
        if depth >= _MAX_DEPTH:
            return
        inner = _new_message(name)
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
        name = message.type_url.rsplit("/", 1)[-1]
        if message.type_url and not _known(name):
            # Struct JSON is always printable, so mark the hole with it.
            from google.protobuf.struct_pb2 import Struct

            marker = Struct()
            marker.update({"@type": message.type_url, "@unresolved": True})
            message.Pack(marker)
            return
        if _known(name):
            inner = _new_message(name)
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
