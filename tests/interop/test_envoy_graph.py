"""Envoy as the oracle of route and filter-chain selection: one table, compared row by row.

The same RouteConfiguration (and Listener) is served to Envoy by the ControlPlane and
given to :func:`select_route` / :func:`select_filter_chain`. Each backend answers
with its own name, so Envoy's choice is read from the reply body.
"""

from __future__ import annotations

import contextlib
import importlib
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.core.v3.address_pb2 import Address, CidrRange, SocketAddress
from envoy.config.core.v3.base_pb2 import DataSource, RuntimeFractionalPercent
from envoy.config.endpoint.v3.endpoint_components_pb2 import (
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment
from envoy.config.listener.v3.listener_components_pb2 import (
    Filter,
    FilterChain,
    FilterChainMatch,
    ListenerFilter,
)
from envoy.config.listener.v3.listener_pb2 import AdditionalAddress, Listener
from envoy.config.route.v3.route_components_pb2 import (
    DirectResponseAction,
    HeaderMatcher,
    QueryParameterMatcher,
    Route,
    RouteAction,
    RouteMatch,
    VirtualHost,
    WeightedCluster,
)
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.type.matcher.v3.regex_pb2 import RegexMatcher
from envoy.type.matcher.v3.string_pb2 import StringMatcher
from envoy.type.v3.percent_pb2 import FractionalPercent
from envoy.type.v3.range_pb2 import Int64Range
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.protobuf.wrappers_pb2 import BoolValue, UInt32Value

from xds_client.errors import ResourceValidationError
from xds_client.graph import (
    ConfigTracker,
    Connection,
    ResourceKey,
    select_filter_chain,
    select_route,
    validate_filter_chains,
)
from xds_client.protocol._events import ResourceUpdated
from xds_client.resources import CLUSTER, LISTENER, ROUTE
from xds_client.testing import ControlPlane

from ._interop_helpers import free_port, http_backend, poll_until, tcp_listener
from .test_envoy import envoy_factory  # noqa: F401 - the fixture

# No typing stubs are generated for this extension; it is only built here.
DirectResponseConfig: Any = importlib.import_module(
    "envoy.extensions.filters.network.direct_response.v3.config_pb2"
).Config

pytestmark = [pytest.mark.interop, pytest.mark.envoy, pytest.mark.timeout(90)]


def static_cluster(name: str, port: int) -> Cluster:
    address = Address(socket_address=SocketAddress(address="127.0.0.1", port_value=port))
    return Cluster(
        name=name,
        type=Cluster.STATIC,
        connect_timeout=Duration(seconds=1),
        load_assignment=ClusterLoadAssignment(
            cluster_name=name,
            endpoints=[
                LocalityLbEndpoints(lb_endpoints=[LbEndpoint(endpoint=Endpoint(address=address))])
            ],
        ),
    )


def fraction(numerator: int) -> RuntimeFractionalPercent:
    return RuntimeFractionalPercent(
        default_value=FractionalPercent(numerator=numerator, denominator=FractionalPercent.HUNDRED)
    )


def to(cluster: str) -> RouteAction:
    return RouteAction(cluster=cluster)


def one_route_host(name: str, domains: list[str], cluster: str) -> VirtualHost:
    return VirtualHost(
        name=name, domains=domains, routes=[Route(match=RouteMatch(prefix="/"), route=to(cluster))]
    )


def differential_routes() -> RouteConfiguration:
    default_routes = [
        Route(match=RouteMatch(path="/exact"), route=to("path")),
        Route(
            match=RouteMatch(prefix="/CaSe", case_sensitive=BoolValue(value=False)),
            route=to("case"),
        ),
        Route(match=RouteMatch(safe_regex=RegexMatcher(regex="/re/[0-9]+")), route=to("regex")),
        Route(match=RouteMatch(path_separated_prefix="/sep"), route=to("sep")),
        Route(
            match=RouteMatch(
                prefix="/h", headers=[HeaderMatcher(name="x-env", exact_match="prod")]
            ),
            route=to("hdr_prod"),
        ),
        Route(
            match=RouteMatch(
                prefix="/h",
                headers=[
                    HeaderMatcher(
                        name="x-canary", string_match=StringMatcher(prefix="yes", ignore_case=True)
                    )
                ],
            ),
            route=to("canary"),
        ),
        Route(
            match=RouteMatch(
                prefix="/h",
                headers=[HeaderMatcher(name="x-env", present_match=True, invert_match=True)],
            ),
            route=to("no_env"),
        ),
        Route(
            match=RouteMatch(
                prefix="/range",
                headers=[HeaderMatcher(name="x-n", range_match=Int64Range(start=10, end=20))],
            ),
            route=to("range"),
        ),
        Route(
            match=RouteMatch(
                prefix="/q",
                query_parameters=[
                    QueryParameterMatcher(name="v", string_match=StringMatcher(exact="2"))
                ],
            ),
            route=to("q2"),
        ),
        Route(
            match=RouteMatch(
                prefix="/q",
                query_parameters=[QueryParameterMatcher(name="debug", present_match=True)],
            ),
            route=to("qdebug"),
        ),
        Route(match=RouteMatch(prefix="/frac", runtime_fraction=fraction(0)), route=to("never")),
        Route(match=RouteMatch(prefix="/frac", runtime_fraction=fraction(100)), route=to("always")),
        Route(
            match=RouteMatch(prefix="/w"),
            route=RouteAction(
                weighted_clusters=WeightedCluster(
                    clusters=[
                        WeightedCluster.ClusterWeight(name="wa", weight=UInt32Value(value=100)),
                        WeightedCluster.ClusterWeight(name="wb", weight=UInt32Value(value=0)),
                    ]
                )
            ),
        ),
        Route(
            match=RouteMatch(prefix="/direct"),
            direct_response=DirectResponseAction(
                status=200, body=DataSource(inline_string="direct")
            ),
        ),
        Route(match=RouteMatch(prefix="/fallback"), route=to("fallback")),
    ]
    return RouteConfiguration(
        name="routes",
        virtual_hosts=[
            one_route_host("suffix", ["*.example.com"], "suffix"),
            one_route_host("longer", ["*.shop.example.com"], "longer"),
            one_route_host("exact", ["api.example.com"], "exact"),
            one_route_host("prefix", ["shop.*", "sh.*"], "prefixvh"),
            VirtualHost(name="default", domains=["*"], routes=default_routes),
        ],
    )


ROUTE_ROWS: list[tuple[str, str, dict[str, str]]] = [
    ("api.example.com", "/", {}),
    ("API.Example.COM", "/x", {}),
    ("a.example.com", "/", {}),
    ("x.shop.example.com", "/", {}),
    (".example.com", "/", {}),
    ("shop.example.org", "/", {}),
    ("shop.example.com", "/", {}),  # a suffix wildcard beats a prefix wildcard
    ("other", "/exact", {}),
    ("other", "/exact?x=1", {}),
    ("other", "/exact/more", {}),
    ("other", "/case/and/more", {}),
    ("other", "/re/123", {}),
    ("other", "/re/12a", {}),
    ("other", "/sep", {}),
    ("other", "/sep/x", {}),
    ("other", "/sepx", {}),
    ("other", "/h", {"x-env": "prod"}),
    ("other", "/h", {"x-env": "dev", "x-canary": "YES-please"}),
    ("other", "/h", {"x-env": "dev"}),
    ("other", "/h", {}),
    ("other", "/range", {"x-n": "15"}),
    ("other", "/range", {"x-n": "20"}),
    ("other", "/range", {"x-n": "abc"}),
    ("other", "/q?v=2", {}),
    ("other", "/q?v=3&debug", {}),
    ("other", "/q?v=3", {}),
    ("other", "/frac", {}),
    ("other", "/w", {}),
    ("other", "/direct", {}),
    ("other", "/fallback/x", {}),
    ("other", "/nothing", {}),
]


def library_answer(
    config: RouteConfiguration, authority: str, path: str, headers: dict[str, str]
) -> str:
    choice = select_route(config, authority, path, headers=headers)
    if choice is None:
        return "404"
    if choice.action == "direct_response":
        assert choice.route is not None
        return choice.route.direct_response.body.inline_string
    [cluster] = choice.clusters
    return cluster


def envoy_answer(proxy_port: int, authority: str, path: str, headers: dict[str, str]) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{proxy_port}{path}", headers={**headers, "Host": authority}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return str(reply.read().decode())
    except urllib.error.HTTPError as exc:
        return str(exc.code)


def cluster_names(config: RouteConfiguration) -> set[str]:
    names: set[str] = set()
    for vhost in config.virtual_hosts:
        for route in vhost.routes:
            if route.route.cluster:
                names.add(route.route.cluster)
            names.update(c.name for c in route.route.weighted_clusters.clusters)
    return names


def test_route_selection_agrees_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    config = differential_routes()
    with contextlib.ExitStack() as stack:
        ports = {
            name: stack.enter_context(http_backend(name.encode()))
            for name in sorted(cluster_names(config))
        }
        cp = stack.enter_context(ControlPlane())
        proxy_port = free_port()
        cp.set_snapshot(
            {
                CLUSTER: [static_cluster(name, port) for name, port in ports.items()],
                LISTENER: [tcp_listener("ingress", proxy_port, "routes")],
                ROUTE: [config],
            },
            version="1",
        )
        envoy_factory(cp, "GRPC")
        for type_url in (CLUSTER, LISTENER, ROUTE):
            cp.wait_for_ack(type_url, "1", timeout=20)
        poll_until(
            lambda: (
                True if envoy_answer(proxy_port, "api.example.com", "/", {}) == "exact" else None
            ),
            20,
            "Envoy to route",
        )
        table = [
            (row, envoy_answer(proxy_port, *row), library_answer(config, *row))
            for row in ROUTE_ROWS
        ]
    disagreements = [(row, envoy, ours) for row, envoy, ours in table if envoy != ours]
    assert disagreements == []
    # The table exercises every route and virtual host, and the 404 of no match.
    assert {ours for _, _, ours in table} >= {
        *cluster_names(config) - {"wb", "never"},
        "direct",
        "404",
    }


DIRECT_RESPONSE_URL = (
    "type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config"
)


def answering_chain(name: str, match: FilterChainMatch | None = None) -> FilterChain:
    """A filter chain that writes its own name and closes the connection."""
    config = DirectResponseConfig(response=DataSource(inline_string=name))
    return FilterChain(
        name=name,
        filter_chain_match=match,
        filters=[
            Filter(
                name="envoy.filters.network.direct_response",
                typed_config=AnyProto(
                    type_url=DIRECT_RESPONSE_URL, value=config.SerializeToString()
                ),
            )
        ],
    )


def cidr(address: str, length: int) -> CidrRange:
    return CidrRange(address_prefix=address, prefix_len=UInt32Value(value=length))


def source_match(address: str, length: int) -> FilterChainMatch:
    return FilterChainMatch(source_prefix_ranges=[cidr(address, length)])


def socket_address(ip: str, port: int) -> Address:
    return Address(socket_address=SocketAddress(address=ip, port_value=port))


def chains_listener(port1: int, port2: int, source_port: int) -> Listener:
    return Listener(
        name="chains",
        address=socket_address("127.0.0.1", port1),
        additional_addresses=[
            AdditionalAddress(address=socket_address("127.0.0.1", port2)),
            AdditionalAddress(address=socket_address("127.0.0.2", port1)),
        ],
        filter_chains=[
            answering_chain(
                "port2",
                FilterChainMatch(
                    destination_port=UInt32Value(value=port2),
                    source_prefix_ranges=[cidr("127.0.0.5", 32)],
                ),
            ),
            answering_chain("dst2", FilterChainMatch(prefix_ranges=[cidr("127.0.0.2", 32)])),
            answering_chain(
                "dst2-src3",
                FilterChainMatch(
                    prefix_ranges=[cidr("127.0.0.2", 32)],
                    source_prefix_ranges=[cidr("127.0.0.3", 32)],
                ),
            ),
            # Host bits set on purpose: both sides must normalise to 127.0.0.0/24.
            answering_chain("src-net", source_match("127.0.0.9", 24)),
            answering_chain("src-other-net", source_match("127.0.2.0", 24)),
            answering_chain("src-port", FilterChainMatch(source_ports=[source_port])),
            answering_chain("catch-all"),
        ],
        default_filter_chain=answering_chain("default"),
    )


def envoy_chain(destination: tuple[str, int], source: tuple[str, int]) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.settimeout(5)
        sock.bind(source)
        sock.connect(destination)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(4096):
                received += chunk
        return received.decode() or "(closed)"


def test_filter_chain_selection_agrees_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    port1, port2, source_port = free_port(), free_port(), free_port()
    listener = chains_listener(port1, port2, source_port)
    validate_filter_chains(listener)  # Envoy accepts it; so must the validator
    rows = [
        (("127.0.0.1", port1), ("127.0.0.1", 0)),
        (("127.0.0.1", port1), ("127.0.0.200", 0)),
        (("127.0.0.1", port1), ("127.0.1.5", 0)),
        (("127.0.0.1", port1), ("127.0.1.5", source_port)),
        (("127.0.0.1", port1), ("127.0.2.9", 0)),
        (("127.0.0.1", port2), ("127.0.0.5", 0)),
        (("127.0.0.1", port2), ("127.0.0.6", 0)),  # no backtracking: the default chain
        (("127.0.0.2", port1), ("127.0.0.3", 0)),
        (("127.0.0.2", port1), ("127.0.0.4", 0)),
        (("127.0.0.2", port1), ("127.0.2.7", 0)),
    ]
    with ControlPlane() as cp:
        # Envoy holds LDS back until its first CDS answer: give it one cluster.
        cp.set_snapshot({CLUSTER: [static_cluster("unused", 9)], LISTENER: [listener]}, version="1")
        envoy_factory(cp, "GRPC")
        cp.wait_for_ack(LISTENER, "1", timeout=20)

        def first_answer() -> str | None:
            with contextlib.suppress(OSError):
                return envoy_chain(("127.0.0.1", port1), ("127.0.0.1", 0))
            return None

        poll_until(first_answer, 20, "Envoy's listener to accept connections")
        table = []
        for destination, source in rows:
            connection = Connection(
                destination_address=destination[0],
                destination_port=destination[1],
                source_address=source[0],
                source_port=source[1],
            )
            choice = select_filter_chain(listener, connection)
            ours = "(closed)" if choice is None else choice.name
            table.append(((destination, source), envoy_chain(destination, source), ours))
    disagreements = [(row, envoy, ours) for row, envoy, ours in table if envoy != ours]
    assert disagreements == []
    assert {ours for _, _, ours in table} == {c.name for c in listener.filter_chains} | {"default"}


def test_duplicate_filter_chains_are_nacked_like_envoy(envoy_factory: Any) -> None:  # noqa: F811
    """Two chains equal after CIDR normalisation: Envoy NACKs, and so does our validator."""
    port = free_port()
    listener = Listener(
        name="dup",
        address=socket_address("127.0.0.1", port),
        filter_chains=[
            answering_chain("one", source_match("127.0.0.9", 24)),
            answering_chain("two", source_match("127.0.0.0", 24)),
        ],
    )
    with ControlPlane() as cp:
        cp.set_snapshot({CLUSTER: [static_cluster("unused", 9)]}, version="1")
        envoy_factory(cp, "GRPC")
        cp.wait_for_ack(CLUSTER, "1", timeout=20)
        cp.set_resources(LISTENER, [listener], version="2")
        nack = cp.wait_for_nack(LISTENER, "2", timeout=20)
        assert nack.error_detail is not None
    with pytest.raises(ResourceValidationError, match=r"filter_chains\[1\] \('two'\)"):
        validate_filter_chains(listener)


def test_scoped_route_selection_agrees_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    """Inline scoped routes: the scope key comes from one element of the ``addr`` header."""
    from tests.graph._graph_resources import routes, scoped_hcm

    manager = scoped_hcm({"foo": routes("RF", "cf"), "bar": routes("RB", "cb")})
    proxy_port = free_port()
    listener = Listener(
        name="scoped",
        address=socket_address("127.0.0.1", proxy_port),
        filter_chains=[
            FilterChain(
                filters=[
                    Filter(
                        name="envoy.filters.network.http_connection_manager",
                        typed_config=AnyProto(
                            type_url="type.googleapis.com/envoy.extensions.filters.network."
                            "http_connection_manager.v3.HttpConnectionManager",
                            value=manager.SerializeToString(),
                        ),
                    )
                ]
            )
        ],
    )
    rows = [
        ("/cf", {"addr": "x-foo-key=foo"}),
        ("/cb", {"addr": "a=1;x-foo-key=bar;b=2"}),
        ("/cb", {"addr": "x-foo-key=foo"}),
        ("/cf", {"addr": "x-foo-key=baz"}),
        ("/cf", {"addr": "x-foo-key"}),
        ("/cf", {}),
    ]
    with contextlib.ExitStack() as stack:
        ports = {name: stack.enter_context(http_backend(name.encode())) for name in ("cf", "cb")}
        cp = stack.enter_context(ControlPlane())
        cp.set_snapshot(
            {
                CLUSTER: [static_cluster(name, port) for name, port in ports.items()],
                LISTENER: [listener],
            },
            version="1",
        )
        envoy_factory(cp, "GRPC")
        for type_url in (CLUSTER, LISTENER):
            cp.wait_for_ack(type_url, "1", timeout=20)
        poll_until(
            lambda: True if envoy_answer(proxy_port, "h", *rows[0]) == "cf" else None,
            20,
            "Envoy to route by scope",
        )
        envoy_rows = [envoy_answer(proxy_port, "h", path, headers) for path, headers in rows]
    tracker = ConfigTracker("scoped")
    tracker.start()
    feed = [
        (ResourceKey("lds", "scoped"), listener),
        (ResourceKey("cds", "cf"), static_cluster("cf", 1)),
        (ResourceKey("cds", "cb"), static_cluster("cb", 1)),
    ]
    snapshot = None
    for key, message in feed:
        snapshot = tracker.receive(key, ResourceUpdated("T", key.name, "1", message)).snapshot
    assert snapshot is not None
    ours = []
    for path, headers in rows:
        choice = snapshot.route("h", path, headers=headers)
        ours.append("404" if choice is None or choice.cluster is None else choice.cluster)
    assert list(zip(rows, envoy_rows, strict=True)) == list(zip(rows, ours, strict=True))
    assert set(ours) == {"cf", "cb", "404"}


TLS_INSPECTOR_URL = (
    "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
)


def client_hello(server_name: str | None, alpn: list[str]) -> bytes:
    """The bytes of a TLS ClientHello with this SNI and ALPN (no handshake follows)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def envoy_chain_for_hello(port: int, hello: bytes) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(hello)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(4096):
                received += chunk
        return received.decode(errors="replace") or "(closed)"


def test_sni_alpn_and_transport_selection_agrees_with_envoy(envoy_factory: Any) -> None:  # noqa: F811
    """Server names (exact, then the longest wildcard), ALPN and transport protocol, read
    by Envoy's tls_inspector from a real ClientHello."""
    port = free_port()
    listener = Listener(
        name="sni",
        address=socket_address("127.0.0.1", port),
        listener_filters=[
            ListenerFilter(
                name="envoy.filters.listener.tls_inspector",
                typed_config=AnyProto(type_url=TLS_INSPECTOR_URL),
            )
        ],
        filter_chains=[
            answering_chain("exact", FilterChainMatch(server_names=["api.example.com"])),
            answering_chain("wild", FilterChainMatch(server_names=["*.example.com"])),
            answering_chain(
                "wild-h2",
                FilterChainMatch(server_names=["*.example.com"], application_protocols=["h2"]),
            ),
            answering_chain("longer-wild", FilterChainMatch(server_names=["*.b.example.com"])),
            answering_chain("tls-any", FilterChainMatch(transport_protocol="tls")),
            answering_chain("plain"),
        ],
    )
    rows: list[tuple[str | None, list[str]]] = [
        ("api.example.com", []),
        ("a.example.com", ["h2"]),
        ("a.example.com", ["http/1.1"]),
        ("x.b.example.com", ["h2"]),
        ("deep.x.b.example.com", []),
        ("other.org", []),
        (None, ["h2"]),
    ]
    validate_filter_chains(listener)
    with ControlPlane() as cp:
        cp.set_snapshot({CLUSTER: [static_cluster("unused", 9)], LISTENER: [listener]}, version="1")
        envoy_factory(cp, "GRPC")
        cp.wait_for_ack(LISTENER, "1", timeout=20)
        hello = client_hello("api.example.com", [])

        def answer() -> str | None:
            with contextlib.suppress(OSError):
                return envoy_chain_for_hello(port, hello)
            return None

        poll_until(answer, 20, "Envoy's TLS listener")
        table = []
        for name, alpn in rows:
            theirs = envoy_chain_for_hello(port, client_hello(name, alpn))
            connection = Connection(
                "127.0.0.1", port, "127.0.0.1", server_name=name or "",
                transport_protocol="tls", application_protocols=tuple(alpn),
            )  # fmt: skip
            choice = select_filter_chain(listener, connection)
            table.append(((name, alpn), theirs, "(closed)" if choice is None else choice.name))
    assert [(row, ours) for row, _, ours in table] == [(row, theirs) for row, theirs, _ in table]
    assert {ours for _, _, ours in table} == {c.name for c in listener.filter_chains} - {"plain"}
