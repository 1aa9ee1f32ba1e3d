"""Drivers: how the checker makes the server change a resource (an update, a deletion).

Checks such as "a deleted subscribed resource is reported in removed_resources"
need the server's state to change while the checker watches. A driver makes
that change: built in for the in-process :class:`~xds_client.testing.ControlPlane`,
a shell command for any other server (``--change-command``), or a Python callable.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, runtime_checkable

from xds_client.errors import XdsClientError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from google.protobuf.any_pb2 import Any as AnyProto

__all__ = [
    "ChangeHook",
    "CommandDriver",
    "ControlPlaneDriver",
    "Driver",
    "DriverError",
    "HookDriver",
]

Action: TypeAlias = Literal["update", "delete"]
ChangeHook: TypeAlias = Callable[[Action, str, str], None]
"""``hook(action, type_url, name)``: make the server serve the change, then return."""


class DriverError(XdsClientError):
    """A driver could not make the change it was asked for (the check is skipped)."""


@runtime_checkable
class Driver(Protocol):
    """Makes the server change one resource; returns once the server serves the change.

    ``update`` gives the resource a new version (and brings it back after a
    ``delete``); ``delete`` stops serving it. Both are called from a worker thread.
    """

    def update(self, type_url: str, name: str) -> None:
        """Serve ``name`` of ``type_url`` at a new version (recreate it if deleted)."""

    def delete(self, type_url: str, name: str) -> None:
        """Stop serving ``name`` of ``type_url``."""


class HookDriver:
    """A driver from one Python callable: ``hook("update" | "delete", type_url, name)``."""

    def __init__(self, hook: ChangeHook) -> None:
        self._hook = hook

    def update(self, type_url: str, name: str) -> None:
        self._hook("update", type_url, name)

    def delete(self, type_url: str, name: str) -> None:
        self._hook("delete", type_url, name)


class CommandDriver:
    """Runs ``COMMAND update|delete TYPE_URL NAME`` through the shell; exit 0 means served."""

    def __init__(self, command: str, *, timeout: float = 10.0) -> None:
        self.command = command
        self.timeout = timeout

    def _run(self, action: Action, type_url: str, name: str) -> None:
        line = f"{self.command} {action} {shlex.quote(type_url)} {shlex.quote(name)}"
        try:
            done = subprocess.run(
                line, shell=True, capture_output=True, text=True, timeout=self.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise DriverError(f"the change command took over {self.timeout:g} s: {line}") from None
        if done.returncode != 0:
            tail = " ".join(done.stderr.split())[-200:]
            raise DriverError(
                f"the change command failed (exit {done.returncode}): {line}"
                + (f": {tail}" if tail else "")
            )

    def update(self, type_url: str, name: str) -> None:
        self._run("update", type_url, name)

    def delete(self, type_url: str, name: str) -> None:
        self._run("delete", type_url, name)


class ServedResources(Protocol):
    """What :class:`ControlPlaneDriver` uses of an in-process
    :class:`~xds_client.testing.ControlPlane` (declared here: the testing package sits
    above this one and imports it)."""

    def resources(self, type: str, *, node_id: str | None = None) -> dict[str, AnyProto]: ...

    def update(
        self,
        type: str,
        resources: Mapping[str, AnyProto],
        *,
        versions: Mapping[str, str] | None = None,
        node_id: str | None = None,
    ) -> str: ...

    def remove(self, type: str, names: Iterable[str], *, node_id: str | None = None) -> str: ...


class ControlPlaneDriver:
    """Changes resources of an in-process :class:`~xds_client.testing.ControlPlane`.

    An update serves the same body at a new per-resource version; a deletion
    removes it and remembers the body, so the next update brings it back.
    """

    def __init__(self, control_plane: ServedResources, *, node_id: str | None = None) -> None:
        self._cp = control_plane
        self._node_id = node_id
        self._lock = threading.Lock()
        self._deleted: dict[tuple[str, str], AnyProto] = {}
        self._count = 0

    def update(self, type_url: str, name: str) -> None:
        with self._lock:
            body = self._deleted.pop((type_url, name), None)
            if body is None:
                served = self._cp.resources(type_url, node_id=self._node_id)
                if name not in served:
                    raise DriverError(f"the ControlPlane serves no {type_url} named {name!r}")
                body = served[name]
            self._count += 1
            version = f"conformance-{self._count}"
            self._cp.update(type_url, {name: body}, versions={name: version}, node_id=self._node_id)

    def delete(self, type_url: str, name: str) -> None:
        with self._lock:
            served = self._cp.resources(type_url, node_id=self._node_id)
            if name in served:
                self._deleted[(type_url, name)] = served[name]
            self._cp.remove(type_url, [name], node_id=self._node_id)
