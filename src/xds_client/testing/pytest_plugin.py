"""pytest fixtures for xds_client's in-process servers (registered via ``pytest11``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from xds_client.testing import ControlPlane


@pytest.fixture
def xds_control_plane() -> Iterator[ControlPlane]:
    """A running :class:`~xds_client.testing.ControlPlane` on 127.0.0.1, closed after the test.

    Works in sync and asyncio tests alike (it runs on its own threads).
    """
    from xds_client.testing import ControlPlane

    with ControlPlane() as control_plane:
        yield control_plane
