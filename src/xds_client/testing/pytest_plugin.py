"""pytest fixtures for xds_client's in-process servers (registered via ``pytest11``).

- ``xds_control_plane``: a running :class:`~xds_client.testing.ControlPlane`.
- ``xds_control_plane_factory``: more of them (a :data:`ControlPlaneFactory`).
- ``xds_client_connected``: an :class:`~xds_client.XdsClient` pointed at
  ``xds_control_plane``.
- ``xds_async_client``: makes :class:`~xds_client.AsyncXdsClient` instances for it, to
  use as ``async with xds_async_client() as client:`` inside your coroutine (an
  :data:`AsyncXdsClientFactory`; no asyncio pytest plugin needed).
- ``resource_store_server`` and ``resource_store_client``.

The type aliases annotate fixture parameters::

    from xds_client.testing import AsyncXdsClientFactory, ControlPlane
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import pytest

if TYPE_CHECKING:
    from xds_client.client import AsyncXdsClient, XdsClient
    from xds_client.store import ResourceStoreClient
    from xds_client.testing._control_plane import ControlPlane
    from xds_client.testing._store_server import ResourceStoreServer

__all__ = ["AsyncXdsClientFactory", "ControlPlaneFactory"]

ControlPlaneFactory: TypeAlias = "Callable[..., ControlPlane]"
"""``xds_control_plane_factory(**ControlPlane options)`` returns a started ControlPlane."""
AsyncXdsClientFactory: TypeAlias = "Callable[..., AsyncXdsClient]"
"""``xds_async_client(**options)``: an AsyncXdsClient for the test's control plane."""

TEST_NODE_ID = "pytest"


@pytest.fixture
def xds_control_plane() -> Iterator[ControlPlane]:
    """A running :class:`~xds_client.testing.ControlPlane` on 127.0.0.1, closed after the test.

    Works in sync and asyncio tests alike (it runs on its own threads).
    """
    from xds_client.testing._control_plane import ControlPlane

    with ControlPlane() as control_plane:
        yield control_plane


@pytest.fixture
def xds_control_plane_factory() -> Iterator[ControlPlaneFactory]:
    """Start extra control planes (``factory(**ControlPlane kwargs)``), all closed after the test.

    For tests with several servers, such as primary and fallback.
    """
    from xds_client.testing._control_plane import ControlPlane

    started: list[ControlPlane] = []

    def start(**kwargs: Any) -> ControlPlane:
        control_plane = ControlPlane(**kwargs).start()
        started.append(control_plane)
        return control_plane

    try:
        yield start
    finally:
        for control_plane in reversed(started):
            control_plane.close()


@pytest.fixture
def xds_client_connected(xds_control_plane: ControlPlane) -> Iterator[XdsClient]:
    """An :class:`~xds_client.XdsClient` for ``xds_control_plane`` (node id ``pytest``).

    Its stream opens with the first watch; closed after the test.
    """
    from xds_client.client import XdsClient
    from xds_client.node import Node

    with XdsClient(xds_control_plane.address, node=Node(id=TEST_NODE_ID)) as client:
        yield client


@pytest.fixture
def xds_async_client(xds_control_plane: ControlPlane) -> AsyncXdsClientFactory:
    """Make :class:`~xds_client.AsyncXdsClient` instances for ``xds_control_plane``.

    Call it inside the test's coroutine: ``async with xds_async_client() as client``
    (keyword options as for AsyncXdsClient; node id ``pytest`` unless given).
    """
    from xds_client.client import AsyncXdsClient
    from xds_client.node import Node

    def make(**options: Any) -> AsyncXdsClient:
        options.setdefault("node", Node(id=TEST_NODE_ID))
        return AsyncXdsClient(xds_control_plane.address, **options)

    return make


@pytest.fixture
def resource_store_server() -> Iterator[ResourceStoreServer]:
    """A running :class:`~xds_client.testing.ResourceStoreServer` (in-memory SQLite).

    ``.address`` is ``"127.0.0.1:PORT"``; stopped after the test.
    """
    from xds_client.testing._store_server import ResourceStoreServer

    with ResourceStoreServer() as server:
        yield server


@pytest.fixture
def resource_store_client(
    resource_store_server: ResourceStoreServer,
) -> Iterator[ResourceStoreClient]:
    """A :class:`~xds_client.store.ResourceStoreClient` connected to ``resource_store_server``."""
    from xds_client.store import ResourceStoreClient

    with ResourceStoreClient(resource_store_server.address) as client:
        yield client
