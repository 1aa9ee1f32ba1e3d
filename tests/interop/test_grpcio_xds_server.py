"""grpcio's xDS-enabled server (gRFC A36) as the oracle of filter-chain selection.

The server fetches its Listener from the ControlPlane and picks a filter chain per
connection. Each chain's HttpConnectionManager answers differently: ``allow`` serves
the RPC, ``deny`` rejects it with an RBAC filter (PERMISSION_DENIED), and a connection
that no chain takes is closed (UNAVAILABLE). Connections come from different source
addresses in 127.0.0.0/8 through small forwarders, and the outcomes are compared with
``select_filter_chain(..., mode="grpc")``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.config.core.v3.address_pb2 import Address, CidrRange, SocketAddress
from envoy.config.listener.v3.listener_components_pb2 import (
    Filter,
    FilterChain,
    FilterChainMatch,
)
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_components_pb2 import (
    NonForwardingAction,
    Route,
    RouteMatch,
    VirtualHost,
)
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2 import (  # noqa: E501
    HttpConnectionManager,
    HttpFilter,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.wrappers_pb2 import UInt32Value

from xds_client.errors import ResourceValidationError
from xds_client.graph import Connection, select_filter_chain, validate_filter_chains
from xds_client.resources import LISTENER
from xds_client.testing import ControlPlane

from ._interop_helpers import HCM_TYPE_URL, ROUTER_TYPE_URL, free_port, python_peer

pytestmark = [pytest.mark.interop, pytest.mark.timeout(90)]

PEER = Path(__file__).with_name("grpc_xds_server_peer.py")
TEMPLATE = "grpc/server?xds.resource.listening_address=%s"
RBAC_TYPE_URL = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"

# No typing stubs are generated for RBAC; it is only built here.
_rbac: Any = importlib.import_module("envoy.extensions.filters.http.rbac.v3.rbac_pb2")
_rbac_config: Any = importlib.import_module("envoy.config.rbac.v3.rbac_pb2")


def manager(*, deny: bool) -> AnyProto:
    """An HCM whose routes serve every RPC, behind an RBAC filter that denies all if asked."""
    filters = []
    if deny:
        policy = _rbac_config.Policy(
            permissions=[_rbac_config.Permission(any=True)],
            principals=[_rbac_config.Principal(any=True)],
        )
        rules = _rbac_config.RBAC(action=_rbac_config.RBAC.DENY, policies={"all": policy})
        filters.append(
            HttpFilter(
                name="rbac",
                typed_config=AnyProto(
                    type_url=RBAC_TYPE_URL, value=_rbac.RBAC(rules=rules).SerializeToString()
                ),
            )
        )
    filters.append(HttpFilter(name="router", typed_config=AnyProto(type_url=ROUTER_TYPE_URL)))
    hcm = HttpConnectionManager(
        stat_prefix="server",
        route_config=RouteConfiguration(
            name="inline",
            virtual_hosts=[
                VirtualHost(
                    name="all",
                    domains=["*"],
                    routes=[
                        Route(
                            match=RouteMatch(prefix="/"),
                            non_forwarding_action=NonForwardingAction(),
                        )
                    ],
                )
            ],
        ),
        http_filters=filters,
    )
    return AnyProto(type_url=HCM_TYPE_URL, value=hcm.SerializeToString())


def chain(name: str, match: FilterChainMatch | None, *, deny: bool) -> FilterChain:
    return FilterChain(
        name=name,
        filter_chain_match=match,
        filters=[
            Filter(
                name="envoy.filters.network.http_connection_manager",
                typed_config=manager(deny=deny),
            )
        ],
    )


def sources(*prefixes: tuple[str, int]) -> FilterChainMatch:
    return FilterChainMatch(
        source_prefix_ranges=[
            CidrRange(address_prefix=a, prefix_len=UInt32Value(value=n)) for a, n in prefixes
        ]
    )


def server_listener(port: int) -> Listener:
    return Listener(
        name=TEMPLATE % f"127.0.0.1:{port}",
        address=Address(socket_address=SocketAddress(address="127.0.0.1", port_value=port)),
        filter_chains=[
            chain("allow-one", sources(("127.0.0.5", 32)), deny=False),
            # Host bits set: normalised to 127.0.0.0/24.
            chain("deny-net", sources(("127.0.0.77", 24)), deny=True),
            chain("allow-other-net", sources(("127.0.3.0", 24)), deny=False),
            # A36: chains naming a destination port or server names never match (Envoy
            # would give every connection to the port one).
            chain(
                "never-port", FilterChainMatch(destination_port=UInt32Value(value=port)), deny=True
            ),
            chain("never-sni", FilterChainMatch(server_names=["x.example.com"]), deny=False),
        ],
    )


@contextlib.contextmanager
def forwarder(source_ip: str, target: int) -> Iterator[int]:
    """127.0.0.1:PORT -> 127.0.0.1:target, with the upstream side bound to ``source_ip``."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def relay(downstream: socket.socket) -> None:
        with downstream, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as upstream:
            try:
                upstream.bind((source_ip, 0))
                upstream.connect(("127.0.0.1", target))
            except OSError:
                return
            back = threading.Thread(target=pump, args=(upstream, downstream), daemon=True)
            back.start()
            pump(downstream, upstream)
            back.join(timeout=10)

    def accept() -> None:
        while not stop.is_set():
            try:
                downstream, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=relay, args=(downstream,), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        acceptor.join(timeout=5)
        listener.close()
        for thread in threads:
            thread.join(timeout=5)


def call(port: int) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        who: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/interop.Echo/Who")
        try:
            who(b"", timeout=3)
        except grpc.RpcError as exc:
            return str(exc.code().name)
        return "OK"


def expected(listener: Listener, source: str, port: int) -> str:
    choice = select_filter_chain(listener, Connection("127.0.0.1", port, source), mode="grpc")
    if choice is None:
        return "UNAVAILABLE"  # no chain: the connection is closed
    return "PERMISSION_DENIED" if choice.name.startswith("deny") else "OK"


def test_grpcio_server_picks_the_same_filter_chains(tmp_path: Path) -> None:
    port = free_port()
    listener = server_listener(port)
    with ControlPlane() as cp:
        cp.set_snapshot({LISTENER: [listener]}, version="1")
        bootstrap = tmp_path / "bootstrap.json"
        bootstrap.write_text(
            json.dumps(
                {
                    "xds_servers": [
                        {
                            "server_uri": cp.address,
                            "channel_creds": [{"type": "insecure"}],
                            "server_features": ["xds_v3"],
                        }
                    ],
                    "node": {"id": "grpcio-server-peer", "cluster": "interop"},
                    "server_listener_resource_name_template": TEMPLATE,
                }
            )
        )
        peer = python_peer(PEER, str(port), env={"GRPC_XDS_BOOTSTRAP": str(bootstrap)})
        try:
            peer.wait_for_line(lambda line: line == "started", timeout=30)
            cp.wait_for_ack(LISTENER, "1", timeout=20)
            rows = ["127.0.0.5", "127.0.0.1", "127.0.0.200", "127.0.3.9", "127.0.9.9"]
            table = []
            with contextlib.ExitStack() as stack:
                ports = {ip: stack.enter_context(forwarder(ip, port)) for ip in rows}
                # The server starts serving a moment after it ACKs the listener.
                for _ in range(50):
                    if call(ports["127.0.0.5"]) == "OK":
                        break
                for ip in rows:
                    table.append((ip, call(ports[ip]), expected(listener, ip, port)))
            # Two chains equal after CIDR normalisation: grpcio NACKs, so does the validator.
            duplicate = server_listener(port)
            duplicate.filter_chains.append(chain("twin", sources(("127.0.0.1", 24)), deny=False))
            cp.set_resources(LISTENER, [duplicate], version="2")
            nack = cp.wait_for_nack(LISTENER, "2", timeout=20)
            assert nack.error_detail is not None
            assert nack.error_detail.code == 3
            with pytest.raises(ResourceValidationError, match=r"filter_chains\[5\] \('twin'\)"):
                validate_filter_chains(duplicate)
            validate_filter_chains(listener)
        finally:
            peer.stop()
    assert [(ip, ours) for ip, _, ours in table] == [(ip, theirs) for ip, theirs, _ in table]
    assert {ours for _, _, ours in table} == {"OK", "PERMISSION_DENIED", "UNAVAILABLE"}
    # Envoy's rules differ here: the destination_port chain would take every connection.
    envoy_mode = select_filter_chain(listener, Connection("127.0.0.1", port, "127.0.0.5"))
    assert envoy_mode is not None
    assert envoy_mode.name == "never-port"
