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

import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from xds_client._prebuilt_dataclasses import dataclass
from xds_client.protocol import CachedResource, DeltaProtocol, Event, ResourceUpdated, SotwProtocol

if TYPE_CHECKING:
    from pathlib import Path

    from google.protobuf.message import Message

# The client loads this module; json, base64, hashlib, tempfile and pathlib load only
# when a file is first read or written (pyproject's PLC0415 list).

__all__ = [
    "FORMAT",
    "SECRET_TYPES",
    "ConfigCache",
    "LastGoodConfig",
    "PersistedType",
    "ResourceRestored",
    "SaveConfig",
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
    entries: Mapping[str, CachedResource[Any]] | None = field(default=None, kw_only=True)
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
        from pathlib import Path

        self.directory = Path(directory)
        self.node_id = node_id
        self.persist_secrets = persist_secrets
        self.problems: list[str] = []
        """Files found unusable at load (their path and why), also logged."""

    def path_for(self, server: str, type_url: str, protocol: str) -> Path:
        """The file of one (server, type, protocol)."""
        import hashlib

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
        import base64
        import json

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
            import tempfile

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
        import binascii
        import json

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
    import base64

    name, version, rversion = item["name"], item["version"], item["resource_version"]
    if not all(isinstance(v, str) for v in (name, version, rversion)) or not name:
        raise TypeError("name, version and resource_version are strings")
    return name, version, rversion, base64.b64decode(item["value"], validate=True)


# ---------------------------------------------------------------------- the session's side


@dataclass(frozen=True, slots=True)
class SaveConfig:
    """A driver action: write this type's accepted config to disk (``cache_dir``)."""

    cache: ConfigCache = field(repr=False)
    record: PersistedType

    def write(self) -> None:
        """Write the file (atomically); failures are logged, never raised."""
        self.cache.save(self.record)


@dataclass(slots=True, eq=False)
class LastGoodConfig:
    """What one stream slot read from the cache directory and has yet to write there.

    Files are keyed by the slot's first server (the primary), whichever server
    serves now, so a restart finds them while the primary is down.
    """

    cache: ConfigCache
    server: str
    """URI of the slot's primary server: part of the file's key."""
    protocol: str
    """``"sotw"`` or ``"delta"``: part of the file's key."""
    restored_types: set[str] = field(default_factory=set)
    """Types whose file was read (once per type)."""
    unconfirmed: set[tuple[str, str]] = field(default_factory=set)
    """(type, name) read from disk that no accepted response has confirmed yet."""
    dirty: dict[str, PersistedType] = field(default_factory=dict)
    """By type: the config as accepted last, not yet written."""

    def restore(self, core: SotwProtocol | DeltaProtocol, type_url: str, now: float) -> None:
        """Seed ``core`` with the last good config of ``type_url`` (the first time only)."""
        if type_url in self.restored_types:
            return
        self.restored_types.add(type_url)
        record = self.cache.load(self.server, type_url, self.protocol)
        if record is None:
            return
        names, errors = core.restore(type_url, record.version_info, record.resources, now)
        for name, why in errors.items():
            log.warning("last good config: %s %s not restored: %s", type_url, name, why)
        self.unconfirmed.update((type_url, name) for name in names)
        if names:
            log.info("restored %d %s from the last good config", len(names), type_url)

    def accepted(self, core: SotwProtocol | DeltaProtocol, type_url: str) -> None:
        """A response of ``type_url`` was accepted: remember its config, confirm the type."""
        if self.cache.wants(type_url):
            # Taken now: a watch closing before the write must not empty it.
            self.dirty[type_url] = self.cache.snapshot(
                self.server, type_url, self.protocol, core.version_info(type_url),
                core.resources(type_url),
            )  # fmt: skip
        if self.unconfirmed:
            self.unconfirmed = {u for u in self.unconfirmed if u[0] != type_url}

    def mark_restored(self, events: list[Event]) -> list[Event]:
        """``events`` (a core's replay), values not yet confirmed as :class:`ResourceRestored`."""
        if not self.unconfirmed:
            return events
        return [
            ResourceRestored(e.type_url, e.name, e.version, e.resource, e.aliases)
            if isinstance(e, ResourceUpdated) and (e.type_url, e.name) in self.unconfirmed
            else e
            for e in events
        ]

    def saves(self) -> list[SaveConfig]:
        """The writes due: one per type accepted since the last call."""
        actions = [SaveConfig(self.cache, record) for _, record in sorted(self.dirty.items())]
        self.dirty.clear()
        return actions
