"""Shared pieces of the real-peer tests: resources, backends and subprocesses."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import grpc
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.address_pb2 import Address, SocketAddress
from envoy.config.core.v3.base_pb2 import Locality
from envoy.config.core.v3.config_source_pb2 import (
    AggregatedConfigSource,
    ApiConfigSource,
    ApiVersion,
    ConfigSource,
)
from envoy.config.endpoint.v3.endpoint_components_pb2 import (
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.listener.v3.api_listener_pb2 import ApiListener
from envoy.config.listener.v3.listener_components_pb2 import Filter, FilterChain
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_components_pb2 import (
    Route,
    RouteAction,
    RouteMatch,
    VirtualHost,
)
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2 import (  # noqa: E501
    HttpConnectionManager,
    HttpFilter,
    Rds,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.wrappers_pb2 import UInt32Value

from xds_client.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xds_client.testing import ControlPlane, RecordedRequest

T = TypeVar("T")

ROUTER_TYPE_URL = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
HCM_TYPE_URL = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
ECHO_METHOD = "/interop.Echo/Who"


def ads_source() -> ConfigSource:
    return ConfigSource(ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3)


def rest_source(cluster: str) -> ConfigSource:
    """Poll the REST-JSON API through the static ``cluster`` every 0.2 s."""
    return ConfigSource(
        api_config_source=ApiConfigSource(
            api_type=ApiConfigSource.REST,
            transport_api_version=ApiVersion.V3,
            cluster_names=[cluster],
            refresh_delay=Duration(nanos=200_000_000),
            request_timeout=Duration(seconds=1),
        ),
        resource_api_version=ApiVersion.V3,
    )


def hcm(route_config_name: str, source: ConfigSource | None = None) -> HttpConnectionManager:
    return HttpConnectionManager(
        stat_prefix="ingress",
        rds=Rds(config_source=source or ads_source(), route_config_name=route_config_name),
        # The Router message has no set fields, so its bytes are empty.
        http_filters=[HttpFilter(name="router", typed_config=AnyProto(type_url=ROUTER_TYPE_URL))],
    )


def _packed_hcm(route_config_name: str, source: ConfigSource | None = None) -> AnyProto:
    value = hcm(route_config_name, source).SerializeToString()
    return AnyProto(type_url=HCM_TYPE_URL, value=value)


def api_listener(name: str, route_config_name: str) -> Listener:
    """A gRPC client's listener: an api_listener holding an HttpConnectionManager."""
    return Listener(
        name=name, api_listener=ApiListener(api_listener=_packed_hcm(route_config_name))
    )


def tcp_listener(
    name: str, port: int, route_config_name: str, source: ConfigSource | None = None
) -> Listener:
    """An Envoy listener on 127.0.0.1:port routing HTTP through RDS."""
    return Listener(
        name=name,
        address=Address(socket_address=SocketAddress(address="127.0.0.1", port_value=port)),
        filter_chains=[
            FilterChain(
                filters=[
                    Filter(
                        name="envoy.filters.network.http_connection_manager",
                        typed_config=_packed_hcm(route_config_name, source),
                    )
                ]
            )
        ],
    )


def route_config(name: str, cluster: str) -> RouteConfiguration:
    return RouteConfiguration(
        name=name,
        virtual_hosts=[
            VirtualHost(
                name="all",
                domains=["*"],
                routes=[Route(match=RouteMatch(prefix=""), route=RouteAction(cluster=cluster))],
            )
        ],
    )


def eds_cluster(name: str, source: ConfigSource | None = None) -> Cluster:
    return Cluster(
        name=name,
        type=Cluster.EDS,
        connect_timeout=Duration(seconds=1),
        eds_cluster_config=Cluster.EdsClusterConfig(eds_config=source or ads_source()),
        lb_policy=Cluster.ROUND_ROBIN,
    )


def endpoints(cluster: str, port: int) -> ClusterLoadAssignment:
    """One endpoint on 127.0.0.1:port, in a locality with a weight (gRPC needs both)."""
    return ClusterLoadAssignment(
        cluster_name=cluster,
        endpoints=[
            LocalityLbEndpoints(
                locality=Locality(region="local", zone="a"),
                load_balancing_weight=UInt32Value(value=1),
                lb_endpoints=[
                    LbEndpoint(
                        endpoint=Endpoint(
                            address=Address(
                                socket_address=SocketAddress(address="127.0.0.1", port_value=port)
                            )
                        ),
                        load_balancing_weight=UInt32Value(value=1),
                    )
                ],
            )
        ],
    )


def my_service_snapshot(backend_port: int) -> dict[str, list[Message]]:
    """``xds:///my-service`` for gRPC clients: api_listener -> route -> EDS cluster -> endpoint."""
    return {
        LISTENER: [api_listener("my-service", "my-route")],
        ROUTE: [route_config("my-route", "my-cluster")],
        CLUSTER: [eds_cluster("my-cluster")],
        ENDPOINT: [endpoints("my-cluster", backend_port)],
    }


def write_bootstrap(path: Path, address: str) -> None:
    """A gRPC xDS bootstrap file (grpcio, grpc-js) for a control plane at ``address``."""
    path.write_text(
        json.dumps(
            {
                "xds_servers": [
                    {
                        "server_uri": address,
                        "channel_creds": [{"type": "insecure"}],
                        "server_features": ["xds_v3"],
                    }
                ],
                "node": {"id": "grpcio-peer", "cluster": "interop", "locality": {"zone": "a"}},
            }
        )
    )


def free_port() -> int:
    """A port that was free a moment ago (for peers that must be told a port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def poll_until(
    probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    """Call ``probe`` until it returns non-None; for peers we can only poll."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        pause.wait(interval)


@contextlib.contextmanager
def grpc_backend(name: str) -> Iterator[int]:
    """A gRPC server on 127.0.0.1 answering ``/interop.Echo/Who`` with its name."""

    def who(request: bytes, context: grpc.ServicerContext) -> bytes:
        return name.encode()

    handler = grpc.method_handlers_generic_handler(
        "interop.Echo", {"Who": grpc.unary_unary_rpc_method_handler(who)}
    )
    executor = ThreadPoolExecutor(4)
    server = grpc.server(executor, handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None).wait(timeout=5)
        executor.shutdown(wait=True)


@contextlib.contextmanager
def http_backend(body: bytes) -> Iterator[int]:
    """A stdlib HTTP server on 127.0.0.1 answering every GET with ``body``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = False
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Peer:
    """A subprocess whose output lines are collected, stopped by PID at the end."""

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.seen: list[str] = []
        self.proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for_line(self, predicate: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                tail = "\n".join(self.seen[-20:])
                raise AssertionError(f"timed out after {timeout}s; last output:\n{tail}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if predicate(line):
                return line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def python_peer(script: Path, *args: str, env: dict[str, str] | None = None) -> Peer:
    return Peer([sys.executable, str(script), *args], env=env)


def serve_and_answer(
    cp: ControlPlane, type_url: str, resource: Message, version: str, timeout: float = 20
) -> RecordedRequest:
    """Serve ``resource`` as the only one of ``type_url`` at ``version``; the peer's ACK or
    NACK of that version. (``version`` must be new: the ControlPlane sends nothing for an
    unchanged resource, so each push should differ from the last.)"""
    since = cp.mark()
    cp.set_resources(type_url, [resource], version=version)

    def answered(r: RecordedRequest) -> bool:
        return r.response_version == version and (r.is_ack or r.is_nack)

    return cp.wait_for_request(type_url, answered, since=since, timeout=timeout)
