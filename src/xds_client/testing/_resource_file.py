"""Load resources from a file shaped like Envoy's filesystem subscriptions.

The file is YAML or JSON holding a ``DiscoveryResponse``-like object::

    version_info: "1"          # optional
    resources:
    - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
      name: backend
      connect_timeout: 1s
    - "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
      cluster_name: backend

Unlike Envoy's files, one file may mix several types. A resource may also be
an ``envoy.service.discovery.v3.Resource`` wrapper holding a named resource.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.message import Message

from xds_client.errors import UnknownResourceTypeError, UsageError
from xds_client.resources import RESOURCE_WRAPPER_TYPE_URL, resource_type
from xds_client.testing._xds._descriptors import message_class_for
from xds_client.testing._xds._store import resource_name

__all__ = ["LoadedResources", "ResourceFileError", "load_resources", "parse_resources"]


class ResourceFileError(UsageError, ValueError):
    """A resource file cannot be read; the message names the file and the entry."""


@dataclass(frozen=True)
class LoadedResources:
    """Resources read from a file, grouped by type URL, then by name."""

    resources: Mapping[str, Mapping[str, Message]] = field(default_factory=dict)
    """``{type_url: {name: message}}`` in file order."""
    version: str | None = None
    """The file's ``version_info``, if it has one."""


_NO_FIELD = re.compile(
    r'Message type "([\w.]+)" has no field named "([^"]+)" at "([^"]*)"\.\s*'
    r"Available Fields\(except extensions\): \"\[(.*)\]\"",
    re.S,
)


def _shorter(text: str) -> str:
    """protobuf's unknown-field error lists ~55 camelCase names: name the near miss instead."""
    found = _NO_FIELD.search(text)
    if found is None:
        return text
    message_type, wrong, where = found.group(1), found.group(2), found.group(3)
    known = re.findall(r"'(\w+)'", found.group(4))
    # The file spells fields as the .proto does (snake_case) or in JSON (camelCase).
    spellings = {_snake(name): name for name in known} | {name: name for name in known}
    near = difflib.get_close_matches(wrong, list(spellings), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    at = f" (in {where})" if where and where != message_type.rsplit(".", 1)[-1] else ""
    return f"{message_type} has no field {wrong!r}{at}{hint}"


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def load_resources(path: str | Path) -> LoadedResources:
    """Read a YAML (``.yaml``/``.yml``) or JSON file of resources.

    JSON needs nothing extra; YAML needs PyYAML (``pip install pyyaml``).
    Raises :class:`ResourceFileError` for unreadable files, unknown
    ``@type`` values, bad fields or names given twice.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResourceFileError(f"{path}: cannot read: {exc}") from exc
    fmt = "json" if path.suffix.lower() == ".json" else "yaml"
    return parse_resources(text, fmt=fmt, source=str(path))


def parse_resources(text: str, *, fmt: str = "yaml", source: str = "<string>") -> LoadedResources:
    """Parse resources from YAML or JSON text (see :func:`load_resources`)."""
    document: Any
    if fmt == "json":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ResourceFileError(f"{source}: invalid JSON: {exc}") from exc
    else:
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ResourceFileError(f"{source}: invalid YAML: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("resources"), list):
        raise ResourceFileError(f"{source}: expected a mapping with a 'resources:' list")
    version = document.get("version_info")
    grouped: dict[str, dict[str, Message]] = {}
    for index, item in enumerate(document["resources"]):
        where = f"{source}: resources[{index}]"
        type_url, name, message = _parse_one(item, where)
        named = grouped.setdefault(type_url, {})
        if name in named:
            raise ResourceFileError(f"{where}: {type_url} {name!r} is given twice")
        named[name] = message
    return LoadedResources(grouped, None if version is None else str(version))


def _parse_one(item: Any, where: str) -> tuple[str, str, Message]:
    if not isinstance(item, dict) or not isinstance(item.get("@type"), str):
        raise ResourceFileError(f"{where}: each resource needs an '@type'")
    body = dict(item)
    type_url: str = body.pop("@type")
    if type_url == RESOURCE_WRAPPER_TYPE_URL:
        inner = body.get("resource")
        if not isinstance(inner, dict):
            raise ResourceFileError(f"{where}: a Resource wrapper needs a 'resource'")
        inner_type, inner_name, message = _parse_one(inner, where + ".resource")
        return inner_type, str(body.get("name") or inner_name), message
    try:
        rtype = resource_type(type_url)
    except UnknownResourceTypeError as exc:
        raise ResourceFileError(f"{where}: unknown '@type' {type_url!r}") from exc
    _import_nested_types(body)
    try:
        message = json_format.ParseDict(body, rtype.message_class())
    except json_format.ParseError as exc:
        raise ResourceFileError(f"{where}: {_shorter(str(exc))}") from exc

    try:
        name = resource_name(message)
    except UsageError as exc:
        raise ResourceFileError(f"{where}: the resource has no name") from exc
    return rtype.type_url, name, message


def _import_nested_types(value: Any) -> None:
    """Import the modules that define nested ``Any`` values (``"@type"`` keys).

    ``ParseDict`` only knows messages whose module was imported.
    """
    if isinstance(value, list):
        for item in value:
            _import_nested_types(item)
        return
    if not isinstance(value, dict):
        return
    type_url = value.get("@type")
    if isinstance(type_url, str):
        message_class_for(type_url)
    for item in value.values():
        _import_nested_types(item)
