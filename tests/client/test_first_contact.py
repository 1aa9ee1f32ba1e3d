"""Misuses a new user makes first (issue #35): each fails at once, naming its cause."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client import (
    AsyncXdsClient,
    BootstrapError,
    Node,
    ResourceNotFoundError,
    TransportError,
    UsageError,
    XdsClient,
    load_bootstrap,
)
from xds_client.testing import ControlPlane

pytestmark = pytest.mark.timeout(60)


def _refused_address() -> str:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_wait_for_a_refused_port_raises_the_cause_before_its_timeout() -> None:
    address = _refused_address()
    started = time.monotonic()
    with (
        XdsClient(address, node=Node(id="n1")) as client,
        pytest.raises(TransportError, match=address) as caught,
    ):
        client.wait_for(Cluster, "a", timeout=30)
    assert time.monotonic() - started < 15  # not the whole timeout
    assert "refused" in str(caught.value).lower() or "unavailable" in str(caught.value).lower()


def test_wait_for_a_name_already_known_missing_raises_at_once() -> None:
    node = Node(id="n1")
    with ControlPlane() as cp, XdsClient(cp.address, node=node, protocol="delta") as client:
        cp.set_resources("cds", [Cluster(name="a")])
        client.wait_for(Cluster, "a", timeout=10)
        with client.watch(Cluster, "b") as watch:  # delta: the server says "b" is missing
            while type(watch.get(10)).__name__ != "ResourceDoesNotExist":
                pass
            started = time.monotonic()
            with pytest.raises(ResourceNotFoundError, match="'b' does not exist"):
                client.wait_for(Cluster, "b", timeout=30)
            assert time.monotonic() - started < 5


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_wait_for_ends_when_the_server_says_missing_during_the_wait(protocol: Any) -> None:
    # Delta: the server says so; SotW: the does-not-exist timer does (shortened here).
    with (
        ControlPlane() as cp,
        XdsClient(
            cp.address, node=Node(id="n1"), protocol=protocol, does_not_exist_timeout=1
        ) as client,
    ):
        cp.set_resources("cds", [Cluster(name="a")])
        started = time.monotonic()
        with pytest.raises(ResourceNotFoundError, match="'missing' does not exist"):
            client.wait_for(Cluster, "missing", timeout=30)
        assert time.monotonic() - started < 5  # not the whole timeout


def test_wait_for_still_waits_for_a_name_that_may_come() -> None:
    # A name the server has not said is missing is waited for.
    with ControlPlane() as cp, XdsClient(cp.address, node=Node(id="n1")) as client:
        cp.set_resources("cds", [Cluster(name="a")])
        client.wait_for(Cluster, "a", timeout=10)
        cp.update("cds", [Cluster(name="late")])
        assert client.wait_for(Cluster, "late", timeout=10).name == "late"


@pytest.mark.parametrize("name", [None, "", 42, ["a", "b"]])
def test_wait_for_one_name_only(name: Any) -> None:
    with XdsClient("127.0.0.1:1", node=Node(id="n1")) as client, pytest.raises(UsageError):
        client.wait_for(Cluster, name, timeout=0.1)


def test_node_may_be_an_id() -> None:
    with ControlPlane() as cp, XdsClient(cp.address, node="n1") as client:
        cp.set_resources("cds", [Cluster(name="a")])
        client.wait_for(Cluster, "a", timeout=10)
        node = cp.streams()[0].node
        assert node is not None
        assert node.id == "n1"


@pytest.mark.parametrize("node", [42, {"id": "n1"}, Cluster(name="x")])
def test_a_node_of_another_kind_is_refused_in_the_constructor(node: Any) -> None:
    with pytest.raises(UsageError, match="node must be"):
        XdsClient("127.0.0.1:1", node=node)


def test_watch_names_of_the_wrong_kind() -> None:
    with XdsClient("127.0.0.1:1", node=Node(id="n1")) as client:
        with pytest.raises(UsageError, match="names must be"):
            client.watch(Cluster, 42)  # type: ignore[call-overload]
        with pytest.raises(UsageError, match="on_event must be a callable"):
            client.watch(Cluster, "a", on_event=42)  # type: ignore[call-overload]


@pytest.mark.parametrize("client_class", [XdsClient, AsyncXdsClient])
def test_an_unknown_option_is_named_with_a_near_miss(client_class: Any) -> None:
    with pytest.raises(UsageError, match="'nodes' \\(did you mean 'node'\\?\\)") as caught:
        client_class("127.0.0.1:1", nodes=Node(id="n1"))
    assert "build_options" not in str(caught.value)


def test_bootstrap_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bootstrap.json"
    path.write_text('{"xds_servers": []}')
    with pytest.raises(BootstrapError, match=str(path)):
        load_bootstrap(path)
    with pytest.raises(BootstrapError, match="GRPC_XDS_BOOTSTRAP_CONFIG"):
        load_bootstrap(environ={"GRPC_XDS_BOOTSTRAP_CONFIG": "{"})
