"""Find message classes for type URLs, importing the xds-protos module on demand.

JSON (de)serialization of an ``Any`` needs its message in the default
descriptor pool, which only holds modules imported so far. xds-protos lays
each protobuf package out as a Python package of ``*_pb2`` modules, so the
package named by the type URL is imported as a whole.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

__all__ = ["import_nested", "message_class_for"]

# Deep enough for any real config; guards against pathological recursion.
_MAX_DEPTH = 64


def _import_package(package: str) -> None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return
    for info in pkgutil.iter_modules((spec.submodule_search_locations if spec else None) or []):
        if info.name.endswith("_pb2"):
            try:
                importlib.import_module(f"{package}.{info.name}")
            except ImportError:
                continue


def message_class_for(type_url: str) -> type[Message] | None:
    """The class of the message a type URL names, or None when no module defines it."""
    full_name = type_url.rsplit("/", 1)[-1]
    pool = descriptor_pool.Default()
    try:
        descriptor = pool.FindMessageTypeByName(full_name)
    except KeyError:
        _import_package(full_name.rsplit(".", 1)[0])
        try:
            descriptor = pool.FindMessageTypeByName(full_name)
        except KeyError:
            return None
    cls: type[Message] = message_factory.GetMessageClass(descriptor)
    return cls


def import_nested(message: Message, depth: int = 0) -> None:
    """Import the modules of every ``Any`` inside ``message``, at any depth."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(message, AnyProto):
        cls = message_class_for(message.type_url)
        if cls is not None:
            try:
                import_nested(cls.FromString(message.value), depth + 1)
            except DecodeError:
                return  # rendering will report the bad bytes
        return
    for field, value in message.ListFields():
        entry = field.message_type
        if field.type != FieldDescriptor.TYPE_MESSAGE or entry is None:
            continue
        if entry.GetOptions().map_entry:
            value_field = entry.fields_by_name["value"]
            if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value.values():
                    import_nested(item, depth + 1)
        elif field.is_repeated:
            for item in value:
                import_nested(item, depth + 1)
        else:
            import_nested(value, depth + 1)
