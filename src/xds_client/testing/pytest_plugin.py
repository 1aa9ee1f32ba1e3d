"""pytest fixtures for xds_client's in-process servers (registered via ``pytest11``).

- ``xds_control_plane``: a running :class:`~xds_client.testing.ControlPlane`.
- ``xds_control_plane_factory``: more of them (a :data:`ControlPlaneFactory`).
- ``xds_client_connected``: an :class:`~xds_client.XdsClient` pointed at
  ``xds_control_plane``; each test that uses it runs twice, over SotW and delta
  (``[sotw]`` and ``[delta]`` in its id).
- ``xds_async_client``: makes :class:`~xds_client.AsyncXdsClient` instances for it, to
  use as ``async with xds_async_client() as client:`` inside your coroutine (an
  :data:`AsyncXdsClientFactory`; no asyncio pytest plugin needed).
- ``resource_store_server`` and ``resource_store_client``.
- ``xds_conformance``: runs :mod:`xds_client.conformance` against a server (yours, or a
  :class:`~xds_client.testing.ControlPlane`) and fails the test on a failed MUST check
  (a :data:`ConformanceRunner`).

The type aliases annotate fixture parameters::

    from xds_client.testing import AsyncXdsClientFactory, ControlPlane

A test that leaves an XdsClient or AsyncXdsClient running (started, never closed)
gets an :class:`XdsClientLeakWarning` naming it: its threads would outlive the test.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import pytest

if TYPE_CHECKING:
    from xds_client.client import AsyncXdsClient, XdsClient
    from xds_client.conformance import Report
    from xds_client.store import ResourceStoreClient
    from xds_client.testing._control_plane import ControlPlane
    from xds_client.testing._store_server import ResourceStoreServer

__all__ = [
    "AsyncXdsClientFactory",
    "ConformanceRunner",
    "ControlPlaneFactory",
    "XdsClientLeakWarning",
]

ControlPlaneFactory: TypeAlias = "Callable[..., ControlPlane]"
"""``xds_control_plane_factory(**ControlPlane options)`` returns a started ControlPlane."""
AsyncXdsClientFactory: TypeAlias = "Callable[..., AsyncXdsClient]"
"""``xds_async_client(**options)``: an AsyncXdsClient for the test's control plane."""

ConformanceRunner: TypeAlias = "Callable[..., Report]"
"""``xds_conformance(server, *, strict=True, **options)`` runs the checks, returns the Report."""

TEST_NODE_ID = "pytest"


class XdsClientLeakWarning(ResourceWarning):
    """A test left an xDS client running: close it (``with`` / ``async with``)."""


@pytest.fixture(autouse=True)
def _xds_client_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Warn about clients a test started and did not close (checked after its fixtures)."""
    from xds_client.client._watchers import RUNNING

    before = set(RUNNING)
    yield
    leaked = [client for client in list(RUNNING) if client not in before]
    for client in leaked:
        warnings.warn(
            f"{request.node.nodeid} left {client!r} running; close it "
            "(with XdsClient(...) as client, or client.close())",
            XdsClientLeakWarning,
            stacklevel=1,
        )


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


@pytest.fixture(params=["sotw", "delta"])
def xds_client_connected(
    xds_control_plane: ControlPlane, request: pytest.FixtureRequest
) -> Iterator[XdsClient]:
    """An :class:`~xds_client.XdsClient` for ``xds_control_plane`` (node id ``pytest``).

    Parametrized over the protocol: the test runs once over SotW and once over delta
    (``request.param`` / the test id says which). Its stream opens with the first watch;
    closed after the test.
    """
    from xds_client.client import XdsClient
    from xds_client.node import Node

    with XdsClient(
        xds_control_plane.address, node=Node(id=TEST_NODE_ID), protocol=request.param
    ) as client:
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


@pytest.fixture
def xds_conformance() -> ConformanceRunner:
    """Check an xDS server against the protocol: ``xds_conformance(server, **options)``.

    ``server`` is ``"host:port"``, a :class:`~xds_client.transport.ServerTarget`, or a
    running :class:`~xds_client.testing.ControlPlane` (then its driver is used for the
    checks that need a push). Keyword options are those of
    :func:`xds_client.conformance.run` (``protocols``, ``transports``, ``only``, ``skip``,
    ``options``, ``driver``). With ``strict=True`` (the default) a failed MUST check fails
    the test, showing the wire exchange; the :class:`~xds_client.conformance.Report` is
    returned either way. From an asyncio test, ``await xds_client.conformance.arun(...)``.
    """
    from xds_client.conformance import ControlPlaneDriver, run
    from xds_client.testing._control_plane import ControlPlane

    def check(server: Any, *, strict: bool = True, **options: Any) -> Report:
        if isinstance(server, ControlPlane):
            options.setdefault("driver", ControlPlaneDriver(server))
            server = server.address
        report = run(server, **options)
        if strict:
            report.raise_for_failures()
        return report

    return check
