"""pytest fixtures for xds_client's in-process servers (registered via ``pytest11``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from xds_client.store import ResourceStoreClient
    from xds_client.testing import ControlPlane, ResourceStoreServer


@pytest.fixture
def xds_control_plane() -> Iterator[ControlPlane]:
    """A running :class:`~xds_client.testing.ControlPlane` on 127.0.0.1, closed after the test.

    Works in sync and asyncio tests alike (it runs on its own threads).
    """
    from xds_client.testing import ControlPlane

    with ControlPlane() as control_plane:
        yield control_plane


@pytest.fixture
def xds_control_plane_factory() -> Iterator[Callable[..., ControlPlane]]:
    """Start extra control planes (``factory(**ControlPlane kwargs)``), all closed after the test.

    For tests with several servers, such as primary and fallback.
    """
    from xds_client.testing import ControlPlane

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
def resource_store_server() -> Iterator[ResourceStoreServer]:
    """A running :class:`~xds_client.testing.ResourceStoreServer` (in-memory SQLite).

    ``.address`` is ``"127.0.0.1:PORT"``; stopped after the test.
    """
    from xds_client.testing import ResourceStoreServer

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
