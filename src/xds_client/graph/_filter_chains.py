"""Filter-chain selection for one connection, as Envoy (v3 and the v2 seed) and gRFC A36 do it.

v3 (``listener_components.proto``): the criteria are applied one after the other, in
this order: destination port, destination IP, direct source IP, server name (SNI),
transport protocol, application protocols (ALPN), source type, source IP, source port.
At each step the chains with a value that matches, the most specific one (longest
CIDR prefix, exact name before wildcard), go on; chains that leave the field empty
go on only when no chain with a value matched. There is no backtracking: when the
survivors of a step all fail a later one, the ``default_filter_chain`` is used.

gRFC A36 (``mode="grpc"``): the same walk, except that chains setting
``destination_port``, ``server_names`` or ``application_protocols`` never match and
``transport_protocol`` matches only when empty or ``raw_buffer``. Two chains with
the same criteria (after CIDR normalisation, so ``10.1.2.3/8`` is ``10.0.0.0/8``)
make the listener invalid: :func:`check_filter_chains` says so, to NACK it.

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

    Raises ValueError for an address that is not an IP or a length too long for it.
    """
    return ipaddress.ip_network(f"{address_prefix}/{prefix_len}", strict=False)


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


def _server_name_score(names: Sequence[str], sni: str) -> Any:
    if not names:
        return None
    sni = sni.lower()
    lowered = [n.lower() for n in names]
    if sni and sni in lowered:
        return (2, len(sni))
    wildcard = [len(n) for n in lowered if n.startswith("*.") and sni.endswith(n[1:])]
    if sni and wildcard:
        return (1, max(wildcard))
    return False


def _source_type_score(source_type: int, connection: Connection) -> Any:
    if source_type == 0:
        return None
    source = ipaddress.ip_address(connection.source_address)
    local = source.is_loopback or connection.source_address == connection.destination_address
    wanted = source_type == _SAME_IP_OR_LOOPBACK
    return local == wanted


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
        cidr_score("direct_source_prefix_ranges", direct),
        lambda m: _server_name_score(m.server_names, connection.server_name),
        lambda m: (
            None
            if not m.transport_protocol
            else m.transport_protocol == connection.transport_protocol
        ),
        lambda m: (
            None
            if not m.application_protocols
            else any(p in connection.application_protocols for p in m.application_protocols)
        ),
        lambda m: _source_type_score(m.source_type, connection),
        cidr_score("source_prefix_ranges", source),
        lambda m: None if not m.source_ports else connection.source_port in m.source_ports,
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


def _criteria(match: Any) -> Iterable[tuple[Any, ...]]:
    """Every elementary combination a chain matches (its cartesian product)."""

    def cidrs(field: str) -> list[Any]:
        ranges = getattr(match, field, None)
        return [str(n) for n in _networks(ranges)] if ranges else [None]

    return itertools.product(
        [match.destination_port.value if match.HasField("destination_port") else None],
        cidrs("prefix_ranges"),
        cidrs("direct_source_prefix_ranges"),
        [n.lower() for n in match.server_names] or [None],
        [match.transport_protocol or None],
        list(match.application_protocols) or [None],
        [match.source_type],
        cidrs("source_prefix_ranges"),
        list(match.source_ports) or [None],
    )


def check_filter_chains(listener: Message) -> list[str]:
    """Reasons the listener's filter chains are invalid (empty when they are fine).

    Flags addresses that are not IPs and two chains matching the same connections
    with the same specificity (after CIDR normalisation): the most specific match
    would not be unique, so the listener must be NACKed (gRFC A36; Envoy rejects
    it too).
    """
    problems: list[str] = []
    owners: dict[tuple[Any, ...], int] = {}
    for index, chain in enumerate(listener.filter_chains):  # type: ignore[attr-defined]
        label = f"filter_chains[{index}]" + (f" ({chain.name!r})" if chain.name else "")
        try:
            combos = list(_criteria(chain.filter_chain_match))
        except ValueError as exc:
            problems.append(f"{label}.filter_chain_match: {exc}")
            continue
        for combo in combos:
            first = owners.setdefault(combo, index)
            if first != index:
                problems.append(
                    f"{label}.filter_chain_match: the same criteria as filter_chains[{first}], "
                    "so the most specific match is not unique"
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
