"""Filter-chain selection for one connection, as Envoy (v3 and the v2 seed) and gRFC A36 do it.

v3, as Envoy 1.40 does it (``filter_chain_manager_impl.cc``): the criteria are applied
one after the other, in this order: destination port, destination IP, server name
(SNI), transport protocol, application protocols (ALPN), direct source IP, source
type, source IP, source port. (``listener_components.proto`` lists the direct source
IP third; Envoy's lookup tree has it after ALPN, and Envoy is what runs.) At each step
the chains with a value that matches, the most specific one, go on: the longest CIDR
prefix; an exact server name, else the longest ``*.`` wildcard; the ALPN value the
client lists first; a source type of ``SAME_IP_OR_LOOPBACK`` when the source is
127.0.0.1, ::1 or the destination address itself, ``EXTERNAL`` otherwise. Chains that
leave the field empty go on only when no chain with a value matched. There is no
backtracking: when the survivors of a step all fail a later one, the
``default_filter_chain`` is used. An IPv4 ``prefix_len`` over 32 means 32 (and an
IPv6 one over 128 means 128), as Envoy's ``CidrRange`` clamps it.

gRFC A36 (``mode="grpc"``): the same walk (gRPC's loopback is 127.0.0.1 and ::1 too),
except that chains setting
``destination_port``, ``server_names`` or ``application_protocols`` never match and
``transport_protocol`` matches only when empty or ``raw_buffer``. Two chains with
the same criteria (after CIDR normalisation, so ``10.1.2.3/8`` is ``10.0.0.0/8``)
make the listener invalid.

:func:`check_filter_chains` gives the reasons Envoy 1.40 rejects a listener's filter
chains: a ``(validate.rules)`` breach in a ``filter_chain_match`` (``destination_port: 0``),
``address_suffix`` or ``suffix_len`` set, a malformed address, a partial wildcard in
``server_names``, two chains with equal matches, and any connection two chains (or one
chain twice, through a repeated value in one list) would match equally well.

v2 (the seed's ``Listener.filter_chains`` comment), three steps: the SNI first, then
the longest destination prefix, then the longest address suffix. The seed's
``sni_domains`` (field 1) is reserved in the final v2 and in v3; ``server_names``
(field 11) replaced it with the same meaning, so the first step reads
``server_names``; ``prefix_ranges`` and ``address_suffix``/``suffix_len`` kept
their fields.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from google.protobuf.message import Message

from xds_client.errors import ResourceValidationError

__all__ = [
    "Connection",
    "FilterChainChoice",
    "check_filter_chains",
    "validate_filter_chains",
    "normalize_cidr",
    "select_filter_chain",
    "select_filter_chain_v2",
]

IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Mode = Literal["envoy", "grpc"]

_SAME_IP_OR_LOOPBACK = 1
_EXTERNAL = 2
_IPV4_LOOPBACK = ipaddress.IPv4Address("127.0.0.1")
_IPV6_LOOPBACK = ipaddress.IPv6Address("::1")


@dataclass(frozen=True, slots=True)
class Connection:
    """What a listener knows about a new connection when it picks a filter chain."""

    destination_address: str
    """Local IP the connection arrived at."""
    destination_port: int
    """Local port the connection arrived at."""
    source_address: str
    """Peer IP (after any PROXY protocol header)."""
    source_port: int = 0
    """Peer port."""
    server_name: str = ""
    """SNI from the TLS ClientHello; empty without TLS (or without tls_inspector)."""
    transport_protocol: str = "raw_buffer"
    """``raw_buffer`` for plain TCP, ``tls`` when tls_inspector saw a ClientHello."""
    application_protocols: tuple[str, ...] = ()
    """ALPN values offered by the client."""
    direct_source_address: str | None = None
    """The socket's own peer IP (differs from ``source_address`` behind PROXY protocol)."""


@dataclass(frozen=True, slots=True)
class FilterChainChoice:
    """The chain a connection gets."""

    index: int | None
    """Position in ``filter_chains``; None for the ``default_filter_chain``."""
    name: str
    """The chain's ``name`` (``"default"`` names the default chain when it has none)."""
    chain: Any
    """The FilterChain message (v3 or v2)."""

    def __repr__(self) -> str:
        return f"FilterChainChoice(index={self.index}, name={self.name!r})"


def normalize_cidr(address_prefix: str, prefix_len: int) -> IPNetwork:
    """``address_prefix/prefix_len`` with the host bits cleared (``10.1.2.3/8`` -> ``10.0.0.0/8``).

    A length over the address's bits means all of them (``1.2.3.4/33`` is ``1.2.3.4/32``),
    as Envoy's ``CidrRange`` clamps it. Raises ValueError for an address that is not an IP.
    """
    address = ipaddress.ip_address(address_prefix)
    return ipaddress.ip_network((address, min(prefix_len, address.max_prefixlen)), strict=False)


def _networks(ranges: Iterable[Any]) -> list[IPNetwork]:
    # An unset prefix_len is 0, as the CidrRange proto documents.
    return [normalize_cidr(r.address_prefix, r.prefix_len.value) for r in ranges]


def _longest_containing(networks: Sequence[IPNetwork], address: IPAddress) -> int | None:
    lengths = [n.prefixlen for n in networks if n.version == address.version and address in n]
    return max(lengths) if lengths else None


Candidate: TypeAlias = tuple[int, Any]


def _narrow(candidates: list[Candidate], score: Any) -> list[Candidate]:
    """Keep the chains with the best score; None means "no value for this field"
    (kept only when no chain has a matching value), ``False`` means "does not match"."""
    specific: list[tuple[Any, Candidate]] = []
    unset: list[Candidate] = []
    for candidate in candidates:
        value = score(candidate[1].filter_chain_match)
        if value is None:
            unset.append(candidate)
        elif value is not False:
            specific.append((value, candidate))
    if specific:
        best = max(v for v, _ in specific)
        return [c for v, c in specific if v == best]
    return unset


def _server_name_key(name: str) -> str:
    """Envoy's index key for one ``server_names`` entry: ``*.a.com`` is ``.a.com``."""
    name = name.lower()
    return name[1:] if name.startswith("*.") else name


def _wildcard_suffixes(sni: str) -> list[str]:
    """The wildcard keys Envoy tries for ``sni``, longest first: ``.b.a.com``, ``.a.com``,
    ``.com`` for ``x.b.a.com`` (never the whole name, nor a bare trailing dot)."""
    found = []
    pos = sni.find(".", 1)
    while pos != -1 and pos < len(sni) - 1:
        found.append(sni[pos:])
        pos = sni.find(".", pos + 1)
    return found


def _server_name_score(names: Sequence[str], sni: str) -> Any:
    if not names:
        return None
    sni = sni.lower()
    keys = {_server_name_key(n) for n in names}
    if sni in keys:
        return (2, 0)
    for suffix in _wildcard_suffixes(sni):
        if suffix in keys:
            return (1, len(suffix))
    return False


def _application_protocols_score(protocols: Sequence[str], offered: Sequence[str]) -> Any:
    """The client's order decides: a chain naming the client's first choice beats one
    naming only its second (Envoy walks the ClientHello's list)."""
    if not protocols:
        return None
    positions = [i for i, p in enumerate(offered) if p in protocols]
    return -min(positions) if positions else False


def _is_local(connection: Connection) -> bool:
    """Envoy's ``isSameIpOrLoopback``: the source is 127.0.0.1 or ::1 (not the rest of
    127.0.0.0/8), or the same IP as the destination."""
    source = ipaddress.ip_address(connection.source_address)
    if source in (_IPV4_LOOPBACK, _IPV6_LOOPBACK):
        return True
    return source == ipaddress.ip_address(connection.destination_address)


def _source_type_score(source_type: int, connection: Connection) -> Any:
    if source_type == 0:
        return None
    wanted = source_type == _SAME_IP_OR_LOOPBACK
    return _is_local(connection) == wanted


def _source_port_score(ports: Sequence[int], port: int) -> Any:
    if not ports:
        return None
    if port in ports:
        return True
    # Envoy files a chain without source ports under port 0: a listed 0 is the same.
    return None if 0 in ports else False


def _usable_in_grpc(match: Any) -> bool:
    if match.HasField("destination_port") or match.server_names or match.application_protocols:
        return False
    return match.transport_protocol in ("", "raw_buffer")


def select_filter_chain(
    listener: Message, connection: Connection, *, mode: Mode = "envoy"
) -> FilterChainChoice | None:
    """The filter chain ``listener`` (a v3 or v2 Listener) gives ``connection``.

    Falls back to ``default_filter_chain``; None when there is none (the connection
    is closed). ``mode="grpc"`` applies gRFC A36's restrictions.
    """
    chains: Sequence[Any] = listener.filter_chains  # type: ignore[attr-defined]
    candidates: list[Candidate] = list(enumerate(chains))
    if mode == "grpc":
        candidates = [c for c in candidates if _usable_in_grpc(c[1].filter_chain_match)]
    destination = ipaddress.ip_address(connection.destination_address)
    source = ipaddress.ip_address(connection.source_address)
    direct = ipaddress.ip_address(connection.direct_source_address or connection.source_address)

    def cidr_score(field: str, address: IPAddress) -> Any:
        def score(match: Any) -> Any:
            ranges = getattr(match, field, None)
            if not ranges:
                return None
            found = _longest_containing(_networks(ranges), address)
            return False if found is None else found

        return score

    steps: list[Any] = [
        lambda m: (
            None
            if not m.HasField("destination_port")
            else m.destination_port.value == connection.destination_port
        ),
        cidr_score("prefix_ranges", destination),
        lambda m: _server_name_score(m.server_names, connection.server_name),
        lambda m: (
            None
            if not m.transport_protocol
            else m.transport_protocol == connection.transport_protocol
        ),
        lambda m: _application_protocols_score(
            m.application_protocols, connection.application_protocols
        ),
        cidr_score("direct_source_prefix_ranges", direct),
        lambda m: _source_type_score(m.source_type, connection),
        cidr_score("source_prefix_ranges", source),
        lambda m: _source_port_score(m.source_ports, connection.source_port),
    ]
    for step in steps:
        candidates = _narrow(candidates, step)
        if not candidates:
            break
    if candidates:
        index, chain = candidates[0]
        return FilterChainChoice(index, chain.name, chain)
    return _default(listener)


def _default(listener: Message) -> FilterChainChoice | None:
    # v2 listeners have no default_filter_chain field.
    if "default_filter_chain" not in listener.DESCRIPTOR.fields_by_name:
        return None
    if not listener.HasField("default_filter_chain"):
        return None
    chain: Any = listener.default_filter_chain  # type: ignore[attr-defined]
    return FilterChainChoice(None, chain.name or "default", chain)


def select_filter_chain_v2(listener: Message, connection: Connection) -> FilterChainChoice | None:
    """The seed's v2 three-step rule: SNI, then longest destination prefix, then suffix.

    1. With an SNI, only chains whose ``server_names`` match it (exactly or by a
       ``*.`` wildcard); without one, only chains with no server names.
    2. Of those, the longest ``prefix_ranges`` match on the destination address
       (a chain without ranges matches with length 0).
    3. Of those, the longest ``address_suffix`` the destination address ends with
       (no suffix matches with length 0). A remaining tie goes to the first listed.
    """
    destination = ipaddress.ip_address(connection.destination_address)
    candidates: list[Candidate] = []
    for index, chain in enumerate(listener.filter_chains):  # type: ignore[attr-defined]
        names = list(chain.filter_chain_match.server_names)
        if connection.server_name:
            if _server_name_score(names, connection.server_name) in (None, False):
                continue
        elif names:
            continue
        candidates.append((index, chain))

    def prefix_length(chain: Any) -> int | None:
        ranges = chain.filter_chain_match.prefix_ranges
        if not ranges:
            return 0
        return _longest_containing(_networks(ranges), destination)

    def suffix_length(chain: Any) -> int | None:
        suffix = chain.filter_chain_match.address_suffix
        if not suffix:
            return 0
        return len(suffix) if str(destination).endswith(suffix) else None

    for length in (prefix_length, suffix_length):
        scored = [(length(c), (i, c)) for i, c in candidates]
        kept = [(s, c) for s, c in scored if s is not None]
        if not kept:
            return None
        best = max(s for s, _ in kept)
        candidates = [c for s, c in kept if s == best]
    index, chain = candidates[0]
    return FilterChainChoice(index, chain.name, chain)


_REPEATED_FIELDS = (
    "prefix_ranges",
    "server_names",
    "application_protocols",
    "direct_source_prefix_ranges",
    "source_prefix_ranges",
    "source_ports",
)


def _keys(match: Any, field: str) -> list[Any]:
    """The values Envoy files one chain under for ``field``, normalised as Envoy does
    (CIDRs with host bits cleared and lengths clamped, lower-case server names with a
    wildcard's ``*`` dropped); an empty list is ``[""]`` (``[0]`` for ports), the key
    Envoy files a chain without the criterion under."""
    values = getattr(match, field)
    if field.endswith("prefix_ranges"):
        return [str(n) for n in _networks(values)] or [""]
    if field == "server_names":
        return [_server_name_key(n) for n in values] or [""]
    if field == "source_ports":
        return list(values) or [0]
    return list(values) or [""]


def _criteria(match: Any) -> Iterable[tuple[Any, ...]]:
    """Every elementary combination a chain matches (its cartesian product), in the
    order of Envoy's lookup tree."""
    return itertools.product(
        [match.destination_port.value if match.HasField("destination_port") else 0],
        _keys(match, "prefix_ranges"),
        _keys(match, "server_names"),
        [match.transport_protocol],
        _keys(match, "application_protocols"),
        _keys(match, "direct_source_prefix_ranges"),
        [match.source_type],
        _keys(match, "source_prefix_ranges"),
        _keys(match, "source_ports"),
    )


_CRITERIA_NAMES = (
    "destination_port",
    "prefix_ranges",
    "server_names",
    "transport_protocol",
    "application_protocols",
    "direct_source_prefix_ranges",
    "source_type",
    "source_prefix_ranges",
    "source_ports",
)


def _describe(combo: tuple[Any, ...]) -> str:
    unset = ("", 0)
    parts = [f"{n}={v!r}" for n, v in zip(_CRITERIA_NAMES, combo, strict=True) if v not in unset]
    return ", ".join(parts) or "every connection"


def _chain_problems(match: Any, label: str) -> list[str]:
    """What Envoy rejects in one chain's ``filter_chain_match`` on its own."""
    from xds_client.protocol._rules import rule_violation

    where = f"{label}.filter_chain_match"
    problems: list[str] = []
    broken = rule_violation(match)
    if broken is not None:
        path, reason = broken
        problems.append(f"{where}{'.' + path if path else ''}: {reason}")
    if match.address_suffix or match.HasField("suffix_len"):
        problems.append(
            f"{where}: address_suffix and suffix_len are not implemented (Envoy rejects "
            "a filter chain that sets them)"
        )
    for index, name in enumerate(match.server_names):
        if "*" in name and not name.startswith("*."):
            problems.append(
                f"{where}.server_names[{index}]: partial wildcards are not supported "
                f"({name!r}; only a leading '*.' is)"
            )
    for field in _REPEATED_FIELDS:
        try:
            keys = _keys(match, field)
        except ValueError as exc:
            problems.append(f"{where}.{field}: malformed IP address ({exc})")
            continue
        seen: dict[Any, int] = {}
        for index, key in enumerate(keys):
            first = seen.setdefault(key, index)
            if first != index:
                problems.append(
                    f"{where}.{field}[{index}]: {key!r} repeats {field}[{first}] (after "
                    "normalisation), so the chain overlaps itself"
                )
    return problems


def check_filter_chains(listener: Message) -> list[str]:
    """Reasons Envoy 1.40 would reject the listener's filter chains (empty when none).

    Each reason names the listener, the chain (``filter_chains[i] ('name')``) and the
    field. Flagged, as Envoy's ``FilterChainManagerImpl`` does: a ``(validate.rules)``
    breach in a ``filter_chain_match`` (``destination_port: 0``, a ``prefix_len`` over
    128), ``address_suffix``/``suffix_len`` set, a malformed address, a partial
    wildcard in ``server_names`` (``*``, ``*x.com``, ``a.*``), a value repeated in one
    list (after CIDR normalisation), two chains with equal matches, and two chains
    matching some connection equally well (the most specific match would not be
    unique; gRFC A36 NACKs that too). An IPv4 ``prefix_len`` over 32 is accepted, as
    Envoy clamps it to 32.
    """
    listener_name = getattr(listener, "name", "")
    prefix = f"listener {listener_name!r}: " if listener_name else ""
    problems: list[str] = []
    owners: dict[tuple[Any, ...], int] = {}
    equal: dict[bytes, int] = {}
    chains: Sequence[Any] = listener.filter_chains  # type: ignore[attr-defined]
    labels = [
        f"filter_chains[{i}]" + (f" ({c.name!r})" if c.name else "") for i, c in enumerate(chains)
    ]
    for index, chain in enumerate(chains):
        match = chain.filter_chain_match
        label = labels[index]
        own = _chain_problems(match, label)
        problems.extend(prefix + p for p in own)
        if own:
            continue
        same = equal.setdefault(match.SerializeToString(deterministic=True), index)
        if same != index:
            problems.append(
                f"{prefix}{label}.filter_chain_match: the same matching rules as {labels[same]}"
            )
            continue
        for combo in _criteria(match):
            first = owners.setdefault(combo, index)
            if first != index:
                problems.append(
                    f"{prefix}{label}.filter_chain_match: overlaps {labels[first]} "
                    f"({_describe(combo)}), so the most specific match is not unique"
                )
                break
    return problems


def validate_filter_chains(listener: Message) -> None:
    """A validator for ``validators={LISTENER: validate_filter_chains}``: NACKs a listener
    whose filter chains :func:`check_filter_chains` finds invalid, naming each problem.

    Raises :class:`~xds_client.errors.ResourceValidationError`.
    """
    problems = check_filter_chains(listener)
    if problems:
        raise ResourceValidationError("; ".join(problems))
