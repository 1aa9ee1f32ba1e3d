"""The last good config on disk (Envoy's ``xds_resources_delegate`` idea).

With ``cache_dir=``, the client writes what it accepted, one JSON file per
server and type (resources with their versions, the SotW ``version_info``;
delta per-resource versions), atomically (a temporary file, fsync, rename).
At start it reads them back, so watchers get that config at once, as
:class:`ResourceRestored` events, even while every server is down; the
streams then resume from it (SotW ``version_info``, delta
``initial_resource_versions``), so unchanged resources are not sent again.

A file that is corrupt, of another format, node, server or type is reported
(a warning naming the file) and ignored; it never stops the client. Secret
resources (SDS) are not written unless ``persist_secrets=True``, because the
file would hold keys in clear.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xds_client.protocol import CachedResource, ResourceUpdated

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "FORMAT",
    "SECRET_TYPES",
    "ConfigCache",
    "PersistedType",
    "ResourceRestored",
]

log = logging.getLogger("xds_client.client")

FORMAT = "xds_client.last_good_config/1"
SECRET_TYPES = frozenset(
    {
        "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        "type.googleapis.com/envoy.api.v2.auth.Secret",
    }
)


class ResourceRestored(ResourceUpdated[Any]):
    """A resource from the last good config on disk, not (yet) confirmed by a server.

    It is a :class:`ResourceUpdated`, so code that waits for values takes it
    as one; check ``isinstance(event, ResourceRestored)`` to tell it apart. A
    server sending the same bytes later gives no further event; different
    bytes give an ordinary :class:`ResourceUpdated`.
    """

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class PersistedType:
    """What one file holds: the accepted config of one type from one server."""

    server: str
    type_url: str
    protocol: str
    version_info: str
    resources: tuple[tuple[str, str, str, bytes], ...]
    """``(name, version, resource_version, serialized message)`` per resource."""
    _: KW_ONLY
    entries: Mapping[str, CachedResource[Any]] | None = None
    """For a record to save: the cache entries as accepted (immutable values), turned
    into ``resources`` only when written, so taking a snapshot is one dict copy."""

    def __repr__(self) -> str:
        return (
            f"PersistedType(server={self.server!r}, type_url={self.type_url!r}, "
            f"protocol={self.protocol!r}, version_info={self.version_info!r}, "
            f"resources={len(self.items())})"
        )

    def items(self) -> tuple[tuple[str, str, str, bytes], ...]:
        """``resources``, built from ``entries`` when those are given."""
        if self.entries is None:
            return self.resources
        return tuple(
            (name, entry.version, entry.resource_version, _serialized(entry))
            for name, entry in sorted(self.entries.items())
        )


class ConfigCache:
    """The directory of last good config files of one client."""

    def __init__(self, directory: str | os.PathLike[str], *, node_id: str,
                 persist_secrets: bool = False) -> None:  # fmt: skip
        self.directory = Path(directory)
        self.node_id = node_id
        self.persist_secrets = persist_secrets
        self.problems: list[str] = []
        """Files found unusable at load (their path and why), also logged."""

    def path_for(self, server: str, type_url: str, protocol: str) -> Path:
        """The file of one (server, type, protocol)."""

        digest = hashlib.sha256(f"{server}\n{type_url}\n{protocol}".encode()).hexdigest()[:24]
        return self.directory / f"{digest}.json"

    def wants(self, type_url: str) -> bool:
        """Whether resources of ``type_url`` may be written (secrets only when asked)."""
        return self.persist_secrets or type_url not in SECRET_TYPES

    def snapshot(
        self,
        server: str,
        type_url: str,
        protocol: str,
        version_info: str,
        resources: Mapping[str, CachedResource[Any]],
    ) -> PersistedType:
        """A record of the cache of one type, ready for :meth:`save` (one dict copy)."""
        return PersistedType(server, type_url, protocol, version_info, (), entries=dict(resources))

    def save(self, record: PersistedType) -> None:
        """Write one record atomically: a temporary file in the same directory, then rename."""
        if not self.wants(record.type_url):
            return

        document = {
            "format": FORMAT,
            "node": self.node_id,
            "server": record.server,
            "type_url": record.type_url,
            "protocol": record.protocol,
            "version_info": record.version_info,
            "resources": [
                {"name": n, "version": v, "resource_version": rv,
                 "value": base64.b64encode(raw).decode("ascii")}
                for n, v, rv, raw in record.items()
            ],
        }  # fmt: skip
        target = self.path_for(record.server, record.type_url, record.protocol)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)

            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(document, out, separators=(",", ":"))
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            log.warning("cannot write the last good config to %s: %s", target, exc.strerror)

    def load(self, server: str, type_url: str, protocol: str) -> PersistedType | None:
        """The record of one (server, type, protocol), or None when absent or unusable."""
        path = self.path_for(server, type_url, protocol)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            return self._problem(path, f"cannot be read ({exc})")

        try:
            document = json.loads(text)
        except ValueError:
            return self._problem(path, "is not JSON (corrupt?)")
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            return self._problem(path, f"is not a {FORMAT} file")
        expected = {"node": self.node_id, "server": server, "type_url": type_url,
                    "protocol": protocol}  # fmt: skip
        for key, want in expected.items():
            if document.get(key) != want:
                return self._problem(path, f"belongs to another {key} ({document.get(key)!r})")
        version_info = document.get("version_info")
        raw_resources = document.get("resources")
        if not isinstance(version_info, str) or not isinstance(raw_resources, list):
            return self._problem(path, "has no version_info or resources list")
        resources = []
        for index, item in enumerate(raw_resources):
            try:
                resources.append(_resource(item))
            except (KeyError, TypeError, ValueError, binascii.Error):
                return self._problem(path, f"resources[{index}] is malformed")
        return PersistedType(server, type_url, protocol, version_info, tuple(resources))

    def _problem(self, path: Path, why: str) -> PersistedType | None:
        """Report an unusable file and ignore it (returns None, for ``return``)."""
        message = f"{path} {why}; ignored"
        self.problems.append(message)
        log.warning("last good config: %s", message)
        return None


def _serialized(entry: CachedResource[Any]) -> bytes:
    raw = entry.raw
    if raw:
        return raw
    resource: Message = entry.resource
    return resource.SerializeToString()


def _resource(item: Any) -> tuple[str, str, str, bytes]:
    name, version, rversion = item["name"], item["version"], item["resource_version"]
    if not all(isinstance(v, str) for v in (name, version, rversion)) or not name:
        raise TypeError("name, version and resource_version are strings")
    return name, version, rversion, base64.b64decode(item["value"], validate=True)
