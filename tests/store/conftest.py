"""Fixtures shared by the ResourceStore tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from xds_client.testing import ResourceStoreServer


@pytest.fixture
def server() -> Iterator[ResourceStoreServer]:
    """A fresh in-memory ResourceStoreServer (a module may define its own ``server``)."""
    with ResourceStoreServer() as srv:
        yield srv
