"""Seeded random listeners and connections for the Envoy filter-chain differential test.

A :class:`World` fixes what can be driven into Envoy from this host: a listener on
127.0.0.1 and 127.0.0.2 (port ``port1``), 127.0.0.1 (``port2``) and ::1 (``port1``);
sources bound anywhere in 127.0.0.0/8 (or ::1), on an ephemeral port or one of three
``special`` source ports; a TLS ClientHello (SNI, ALPN; read by ``tls_inspector``)
or a few plain bytes (``raw_buffer``). Listeners draw every match field from small
pools around those values, so random chains match real connections often.
"""

from __future__ import annotations

import contextlib
import importlib
import random
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from envoy.config.core.v3.address_pb2 import Address, CidrRange, SocketAddress
from envoy.config.core.v3.base_pb2 import DataSource
from envoy.config.listener.v3.listener_components_pb2 import (
    Filter,
    FilterChain,
    FilterChainMatch,
    ListenerFilter,
)
from envoy.config.listener.v3.listener_pb2 import AdditionalAddress, Listener
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.wrappers_pb2 import UInt32Value

from xds_client.graph import Connection, check_filter_chains

# No typing stubs are generated for this extension; it is only built here.
DirectResponseConfig: Any = importlib.import_module(
    "envoy.extensions.filters.network.direct_response.v3.config_pb2"
).Config
DIRECT_RESPONSE_URL = (
    "type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config"
)
TLS_INSPECTOR_URL = (
    "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
)

SOURCE_IPS = [
    "127.0.0.1",
    "127.0.0.2",
    "127.0.0.3",
    "127.0.0.9",
    "127.0.1.5",
    "127.0.2.7",
    "127.1.0.1",
]
SERVER_NAMES = [
    "a.example.com",
    "*.example.com",
    "*.b.example.com",
    "x.b.example.com",
    "other.org",
    "*.org",
    "*.com",
    "A.Example.COM",
]
PARTIAL_WILDCARDS = ["*", "*x.example.com", "a.*", "a.*.com"]
SNIS: list[str | None] = [
    None,
    "a.example.com",
    "x.example.com",
    "x.b.example.com",
    "y.x.b.example.com",
    "b.example.com",
    "other.org",
    "a.org",
    "example.com",
    "A.EXAMPLE.COM",
]
ALPNS = ["h2", "http/1.1", "h3"]


def cidr(address: str, length: int) -> CidrRange:
    return CidrRange(address_prefix=address, prefix_len=UInt32Value(value=length))


def socket_address(ip: str, port: int) -> Address:
    return Address(socket_address=SocketAddress(address=ip, port_value=port))


def answering_chain(name: str, match: FilterChainMatch | None = None) -> FilterChain:
    """A filter chain that writes its own name and closes the connection."""
    config = DirectResponseConfig(response=DataSource(inline_string=name))
    packed = AnyProto(type_url=DIRECT_RESPONSE_URL, value=config.SerializeToString())
    return FilterChain(
        name=name,
        filter_chain_match=match,
        filters=[Filter(name="envoy.filters.network.direct_response", typed_config=packed)],
    )


@dataclass
class World:
    """The ports one listener is reachable on, and the special source ports."""

    port1: int
    port2: int
    unused_port: int
    special: list[int] = field(default_factory=list)

    @property
    def destinations(self) -> list[tuple[str, int]]:
        return [
            ("127.0.0.1", self.port1),
            ("127.0.0.2", self.port1),
            ("127.0.0.1", self.port2),
            ("::1", self.port1),
        ]


def _some(rng: random.Random, pool: list[Any], empty: float, most: int = 2) -> list[Any]:
    """Nothing with probability ``empty``, else 1..most draws (with replacement, so a
    value may repeat: Envoy rejects that, which the validity half wants to see)."""
    if rng.random() < empty:
        return []
    return [rng.choice(pool) for _ in range(rng.randint(1, most))]


def _destination_cidrs(rng: random.Random, invalid: bool) -> list[CidrRange]:
    pool = [
        cidr("127.0.0.1", 32),
        cidr("127.0.0.2", 32),
        cidr("127.0.0.9", 24),  # host bits set: 127.0.0.0/24
        cidr("127.0.0.0", 8),
        cidr("10.0.0.0", 8),
        cidr("::1", 128),
        cidr("::", 64),
        cidr("127.0.0.2", 33),  # clamped to /32 by Envoy
    ]
    if invalid:
        pool += [cidr("127.0.0.1", 129), cidr("not-an-ip", 8)]
    return _some(rng, pool, 0.6)


def _source_cidrs(rng: random.Random, invalid: bool) -> list[CidrRange]:
    pool = [
        cidr("127.0.0.1", 32),
        cidr("127.0.0.3", 32),
        cidr("127.0.0.9", 24),
        cidr("127.0.1.5", 24),
        cidr("127.0.0.0", 16),
        cidr("127.0.0.0", 8),
        cidr("::1", 128),
        cidr("127.0.0.3", 40),  # clamped to /32 by Envoy
    ]
    if invalid:
        pool += [cidr("127.0.0.1", 200)]
    return _some(rng, pool, 0.65)


def random_match(rng: random.Random, world: World, invalid: bool) -> FilterChainMatch:
    """A random FilterChainMatch; ``invalid`` lets in what Envoy rejects on its own."""
    match = FilterChainMatch()
    if rng.random() < 0.3:
        ports = [world.port1, world.port2, world.unused_port]
        port = rng.choice([*ports, 0] if invalid else ports)
        match.destination_port.value = port
    match.prefix_ranges.extend(_destination_cidrs(rng, invalid))
    names = SERVER_NAMES + PARTIAL_WILDCARDS if invalid else SERVER_NAMES
    match.server_names.extend(_some(rng, names, 0.55))
    match.transport_protocol = rng.choice(["", "", "", "tls", "raw_buffer"])
    match.application_protocols.extend(_some(rng, ALPNS, 0.6))
    match.direct_source_prefix_ranges.extend(_source_cidrs(rng, invalid))
    match.source_type = rng.choice(
        [FilterChainMatch.ANY] * 3
        + [FilterChainMatch.SAME_IP_OR_LOOPBACK, FilterChainMatch.EXTERNAL]
    )
    match.source_prefix_ranges.extend(_source_cidrs(rng, invalid))
    match.source_ports.extend(_some(rng, [*world.special, 0], 0.75))
    if invalid and rng.random() < 0.1:
        if rng.random() < 0.5:
            match.address_suffix = "1"
        else:
            match.suffix_len.value = 0
    return match


def random_listener(rng: random.Random, world: World, name: str, *, clean: bool) -> Listener:
    """A listener with 1..6 random chains, each answering with its own name.

    ``clean``: chains are drawn without the invalid pools, and a chain is kept only if
    ``check_filter_chains`` still finds the listener valid (so Envoy should accept it
    and connections can be compared). Otherwise anything goes (the validity half).
    """
    listener = Listener(
        name=name,
        address=socket_address("127.0.0.1", world.port1),
        additional_addresses=[
            AdditionalAddress(address=socket_address("127.0.0.2", world.port1)),
            AdditionalAddress(address=socket_address("127.0.0.1", world.port2)),
            AdditionalAddress(address=socket_address("::1", world.port1)),
        ],
        listener_filters=[
            ListenerFilter(
                name="envoy.filters.listener.tls_inspector",
                typed_config=AnyProto(type_url=TLS_INSPECTOR_URL),
            )
        ],
    )
    wanted = rng.randint(1, 6)
    attempts = 0
    while len(listener.filter_chains) < wanted and attempts < 40:
        attempts += 1
        chain = answering_chain(
            f"c{len(listener.filter_chains)}", random_match(rng, world, invalid=not clean)
        )
        listener.filter_chains.append(chain)
        if clean and check_filter_chains(listener):
            del listener.filter_chains[-1]
    if rng.random() < 0.5:
        listener.default_filter_chain.CopyFrom(answering_chain("default"))
    return listener


@dataclass(frozen=True)
class Probe:
    """One connection to drive: where from, where to, and what the client sends first."""

    destination: tuple[str, int]
    source_ip: str
    source_port: int  # 0: ephemeral
    tls: bool
    server_name: str | None
    alpn: tuple[str, ...]


def random_probe(rng: random.Random, world: World) -> Probe:
    destination = rng.choice(world.destinations)
    source_ip = "::1" if destination[0] == "::1" else rng.choice(SOURCE_IPS)
    source_port = rng.choice(world.special) if rng.random() < 0.35 else 0
    tls = rng.random() < 0.6
    server_name = rng.choice(SNIS) if tls else None
    alpn: tuple[str, ...] = ()
    if tls and rng.random() < 0.6:
        alpn = tuple(rng.sample(ALPNS, rng.randint(1, 3)))
    return Probe(destination, source_ip, source_port, tls, server_name, alpn)


def client_hello(server_name: str | None, alpn: tuple[str, ...]) -> bytes:
    """The bytes of a TLS ClientHello with this SNI and ALPN (no handshake follows)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(list(alpn))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def drive(probe: Probe, timeout: float = 5.0) -> tuple[str, Connection]:
    """Connect as ``probe`` says; Envoy's answer (a chain name, or ``(closed)``) and the
    Connection the library is given for the same connection."""
    family = socket.AF_INET6 if ":" in probe.destination[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.settimeout(timeout)
        sock.bind((probe.source_ip, probe.source_port))
        sock.connect(probe.destination)
        source_port = sock.getsockname()[1]
        payload = client_hello(probe.server_name, probe.alpn) if probe.tls else b"plain\r\n"
        received = b""
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            sock.sendall(payload)
            while chunk := sock.recv(4096):
                received += chunk
    connection = Connection(
        destination_address=probe.destination[0],
        destination_port=probe.destination[1],
        source_address=probe.source_ip,
        source_port=source_port,
        server_name=(probe.server_name or "") if probe.tls else "",
        transport_protocol="tls" if probe.tls else "raw_buffer",
        application_protocols=probe.alpn,
    )
    return received.decode(errors="replace") or "(closed)", connection
