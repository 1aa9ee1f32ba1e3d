"""Update drivers: what changes the server's config during a fan-out run.

A driver has one coroutine, ``push(step)``, called every ``push_interval`` seconds
with step 1, 2, 3 ... Built in: :class:`ControlPlaneDriver` for the in-process
:class:`~xds_client.testing.ControlPlane`; :class:`CommandDriver` runs a shell
command (any other control plane: a script that edits its config);
:class:`CallableDriver` wraps a function.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from xds_client.errors import XdsClientError

from ._sample import sample_endpoints

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["CallableDriver", "CommandDriver", "ControlPlaneDriver", "PushError", "UpdateDriver"]


class PushError(XdsClientError):
    """An update driver could not change the server's config."""


class UpdateDriver(Protocol):
    """Changes the server's config once per call."""

    async def push(self, step: int) -> None:
        """Make change number ``step`` (1, 2, ...); return once the server has it."""


class SetsResources(Protocol):
    """What :class:`ControlPlaneDriver` uses of an in-process
    :class:`~xds_client.testing.ControlPlane` (declared here: the testing package sits
    above this one and imports it)."""

    def set_resources(self, type: str, resources: list[Message]) -> str: ...


class ControlPlaneDriver:
    """Moves the endpoints of every cluster of the sample config (an EDS push) on a
    :class:`~xds_client.testing.ControlPlane`, the most common change in a mesh."""

    def __init__(self, control_plane: SetsResources, *, clusters: int, endpoints: int = 3) -> None:
        self.control_plane = control_plane
        self.clusters = clusters
        self.endpoints = endpoints

    async def push(self, step: int) -> None:
        assignments = sample_endpoints(self.clusters, endpoints=self.endpoints, revision=step)
        await asyncio.to_thread(self.control_plane.set_resources, "eds", assignments)


class CommandDriver:
    """Runs a shell command for each push, with ``XDS_LOAD_STEP`` set to the step; a
    non-zero exit status fails the run (:class:`PushError`)."""

    def __init__(self, command: str, *, timeout: float = 60.0) -> None:
        self.command = command
        self.timeout = timeout

    async def push(self, step: int) -> None:
        env = {**os.environ, "XDS_LOAD_STEP": str(step)}
        process = await asyncio.create_subprocess_shell(
            self.command,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, err = await asyncio.wait_for(process.communicate(), self.timeout)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
            raise PushError(
                f"push command took longer than {self.timeout:g} s: {self.command}"
            ) from None
        if process.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise PushError(
                f"push command exited with status {process.returncode}: {self.command}"
                + (f" ({tail[0]})" if tail[0] else "")
            )


class CallableDriver:
    """Calls ``function(step)`` for each push; a coroutine function is awaited, a plain
    one runs in a worker thread (it may block)."""

    def __init__(self, function: Callable[[int], None] | Callable[[int], Awaitable[None]]) -> None:
        self.function = function

    async def push(self, step: int) -> None:
        if inspect.iscoroutinefunction(self.function):
            await self.function(step)
        else:
            await asyncio.to_thread(self.function, step)
