"""The command line never reports a success it did not get.

watch, fetch and dump need a real xDS answer (an ACKed or NACKed response, or
does-not-exist); a health-check answer is not one. A slow server, a gRPC server that
is not an xDS server and UNIMPLEMENTED each end with status 1 and one line.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from xds_client import XdsClient
from xds_client.errors import TransportError, UsageError
from xds_client.testing import ControlPlane

from .conftest import Result

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def not_xds() -> Iterator[str]:
    """A gRPC server with no services at all: every call is UNIMPLEMENTED."""
    server = grpc.server(ThreadPoolExecutor(2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait(5)


@pytest.fixture
def slow() -> Iterator[str]:
    """A control plane that answers health checks but holds every stream response."""
    with ControlPlane() as cp:
        cp.set_resources("cds", [])
        cp.delay_responses(30)
        yield cp.address


@pytest.fixture
def slow_fetch() -> Iterator[str]:
    """A gRPC server whose FetchClusters answers only after the test is over."""
    release = threading.Event()

    def fetch(request: bytes, context: grpc.ServicerContext) -> bytes:
        release.wait(30)
        context.abort(grpc.StatusCode.UNAVAILABLE, "too late")

    handler = grpc.method_handlers_generic_handler(
        "envoy.service.cluster.v3.ClusterDiscoveryService",
        {"FetchClusters": grpc.unary_unary_rpc_method_handler(fetch)},
    )
    server = grpc.server(ThreadPoolExecutor(2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        release.set()
        server.stop(None).wait(5)


def _one_line_failure(result: Result, *needles: str) -> None:
    assert result.code == 1, (result.out, result.err)
    assert result.out == ""
    # Connectivity notes may come first; the failure itself is one line, the last.
    lines = result.err.splitlines()
    assert sum(line.startswith("xds-client: error: ") for line in lines) == 1, result.err
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("xds-client: error: "), result.err
    for needle in needles:
        assert needle in last, last


@pytest.mark.parametrize("command", ["watch", "fetch", "dump"])
def test_slow_server_is_a_timeout_not_an_empty_success(
    cli: Any, request: pytest.FixtureRequest, command: str
) -> None:
    # Streams (watch, dump) wait on a stream response, fetch on a unary Fetch.
    address: str = request.getfixturevalue("slow_fetch" if command == "fetch" else "slow")
    started = time.monotonic()
    result: Result = cli(command, "-s", address, "--timeout", "2", "cds")
    elapsed = time.monotonic() - started
    _one_line_failure(result, "no xDS response", "2s")
    assert elapsed >= 1.9  # it waited the whole --timeout, not until a health check


@pytest.mark.parametrize("command", ["watch", "fetch", "dump"])
def test_non_xds_server_fails_fast(cli: Any, not_xds: str, command: str) -> None:
    started = time.monotonic()
    result: Result = cli(command, "-s", not_xds, "--timeout", "20", "cds")
    _one_line_failure(result, not_xds, "UNIMPLEMENTED")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("command", ["watch", "dump"])
def test_unimplemented_streams_fail(cli: Any, command: str) -> None:
    with ControlPlane() as cp:
        cp.set_resources("cds", [])
        cp.fail_streams(grpc.StatusCode.UNIMPLEMENTED, "no ADS here", count=None)
        result: Result = cli(command, "-s", cp.address, "--timeout", "20", "cds")
    _one_line_failure(result, "UNIMPLEMENTED")


def test_empty_wildcard_answer_is_a_success(cli: Any) -> None:
    # An ACKed empty response is a real answer: no resources, status 0.
    with ControlPlane() as cp:
        cp.set_resources("cds", [])
        result: Result = cli("dump", "-s", cp.address, "--timeout", "10", "cds")
    assert result.code == 0, result.err
    assert "TYPE" in result.out


@pytest.mark.parametrize(
    ("server", "transport", "needle"),
    [
        ("127.0.0.1:18000", "rest", "http://"),
        ("http://127.0.0.1:18000", "grpc", "HOST:PORT"),
        ("https://127.0.0.1:18000", "grpc-fetch", "HOST:PORT"),
    ],
)
def test_address_that_does_not_fit_the_transport_is_a_usage_error(
    server: str, transport: Any, needle: str
) -> None:
    with pytest.raises(UsageError, match=needle):
        XdsClient(server, transport=transport)


def test_fetch_rest_to_a_grpc_port_fails(cli: Any, not_xds: str) -> None:
    result: Result = cli(
        "fetch", "-s", f"http://{not_xds}", "--transport", "rest", "--timeout", "5", "cds"
    )
    assert result.code == 1, result.out
    assert result.out == ""
    assert len(result.err.strip().splitlines()) == 1


def test_control_plane_refuses_a_port_in_use() -> None:
    with ControlPlane() as first, pytest.raises(TransportError, match="cannot bind"):
        ControlPlane(port=first.port).start()


def test_serve_refuses_a_port_in_use(cli: Any) -> None:
    with ControlPlane() as first:
        result: Result = cli(
            "serve", "--resources", "docs/examples/resources.yaml", "--port", str(first.port)
        )
    assert result.code == 1, result.out
    assert "cannot bind" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_port_held_by_a_plain_socket_is_refused_too() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(TransportError, match="cannot bind"):
            ControlPlane(port=busy.getsockname()[1]).start()
