"""Route selection as Envoy does it: virtual host by domain, then the first matching route.

Pure functions over ``envoy.config.route.v3`` messages; nothing here does I/O.
Regular expressions are Envoy's RE2 in the data plane and Python's ``re`` here: the
two agree on the RE2 subset (no backreferences or lookaround), which is all Envoy takes.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias
from urllib.parse import parse_qsl

from envoy.config.route.v3.route_components_pb2 import (
    HeaderMatcher,
    QueryParameterMatcher,
    Route,
    RouteMatch,
    VirtualHost,
)
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.type.matcher.v3.string_pb2 import StringMatcher
from envoy.type.v3.percent_pb2 import FractionalPercent

__all__ = [
    "ActionKind",
    "Headers",
    "RouteChoice",
    "WeightedTarget",
    "select_route",
    "select_virtual_host",
]

Headers: TypeAlias = Mapping[str, str | Sequence[str]]
"""Request headers: name -> value, or several values (joined with ``,`` as Envoy does)."""

ActionKind = Literal[
    "cluster",
    "weighted_clusters",
    "cluster_header",
    "cluster_specifier_plugin",
    "redirect",
    "direct_response",
    "non_forwarding",
]

_DENOMINATORS = {
    FractionalPercent.HUNDRED: 100,
    FractionalPercent.TEN_THOUSAND: 10_000,
    FractionalPercent.MILLION: 1_000_000,
}


@dataclass(frozen=True, slots=True)
class WeightedTarget:
    """One cluster of a ``weighted_clusters`` action."""

    cluster: str
    """Cluster name (empty when the weight names a ``cluster_header`` instead)."""
    weight: int
    """Its weight; the share of traffic is ``weight / sum(weights)``."""


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """Where one request goes: the virtual host, the route and its target."""

    virtual_host: str
    """Name of the chosen virtual host."""
    route_index: int
    """Position of the route in the virtual host's ``routes``."""
    route_name: str
    """The route's ``name`` (often empty)."""
    action: ActionKind
    """What the route does with the request."""
    cluster: str | None
    """The target cluster for ``cluster`` and ``cluster_header`` actions (None when the
    header is absent, which Envoy answers with ``cluster_not_found_response_code``)."""
    weighted_clusters: tuple[WeightedTarget, ...] = ()
    """The targets of a ``weighted_clusters`` action, in order."""
    route: Route | None = None
    """The matched route message itself."""

    @property
    def clusters(self) -> tuple[str, ...]:
        """Every cluster this request may go to (one, or each weighted target)."""
        if self.weighted_clusters:
            return tuple(t.cluster for t in self.weighted_clusters if t.weight > 0)
        return (self.cluster,) if self.cluster else ()

    def __repr__(self) -> str:
        target = self.cluster if not self.weighted_clusters else list(self.weighted_clusters)
        return (
            f"RouteChoice(virtual_host={self.virtual_host!r}, route_index={self.route_index}, "
            f"action={self.action!r}, target={target!r})"
        )


def _strip_port(host: str) -> str:
    if host.startswith("["):  # [v6]:port
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def select_virtual_host(
    config: RouteConfiguration, authority: str, *, strip_port: bool = False
) -> VirtualHost | None:
    """The virtual host Envoy picks for ``authority`` (the Host header), or None.

    Order: an exact domain, then the longest suffix wildcard (``*.example.com``), then
    the longest prefix wildcard (``example.*``), then ``*``. Comparison ignores case.
    A wildcard matches at least one character (``*.a.com`` does not match ``.a.com``).
    The port stays part of the host, as in Envoy, unless ``strip_port`` is set (or the
    route configuration says ``ignore_port_in_host_matching``).
    """
    host = authority.lower()
    # v2 RouteConfigurations have no ignore_port_in_host_matching.
    if strip_port or getattr(config, "ignore_port_in_host_matching", False):
        host = _strip_port(host)
    best_suffix: tuple[int, VirtualHost] | None = None
    best_prefix: tuple[int, VirtualHost] | None = None
    default: VirtualHost | None = None
    for vhost in config.virtual_hosts:
        for domain in (d.lower() for d in vhost.domains):
            if domain == "*":
                default = default or vhost
            elif domain.startswith("*"):
                suffix = domain[1:]
                longer = best_suffix is None or len(suffix) > best_suffix[0]
                if longer and len(host) > len(suffix) and host.endswith(suffix):
                    best_suffix = (len(suffix), vhost)
            elif domain.endswith("*"):
                prefix = domain[:-1]
                longer = best_prefix is None or len(prefix) > best_prefix[0]
                if longer and len(host) > len(prefix) and host.startswith(prefix):
                    best_prefix = (len(prefix), vhost)
            elif domain == host:
                return vhost
    if best_suffix is not None:
        return best_suffix[1]
    if best_prefix is not None:
        return best_prefix[1]
    return default


def _string_matches(matcher: StringMatcher, value: str) -> bool:
    kind = matcher.WhichOneof("match_pattern")
    subject = value.lower() if matcher.ignore_case else value

    def norm(text: str) -> str:
        return text.lower() if matcher.ignore_case else text

    if kind == "exact":
        return subject == norm(matcher.exact)
    if kind == "prefix":
        return subject.startswith(norm(matcher.prefix))
    if kind == "suffix":
        return subject.endswith(norm(matcher.suffix))
    if kind == "contains":
        return norm(matcher.contains) in subject
    if kind == "safe_regex":
        return re.fullmatch(matcher.safe_regex.regex, value) is not None
    return False  # ``custom`` extensions are not evaluated


def _header_value(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = headers.get(name.lower())
    return None if values is None else ",".join(values)


def _header_matches(matcher: HeaderMatcher, headers: Mapping[str, Sequence[str]]) -> bool:
    value = _header_value(headers, matcher.name)
    kind: str | None = matcher.WhichOneof("header_match_specifier")  # v2 has more kinds
    if value is None and getattr(matcher, "treat_missing_header_as_empty", False):
        value = ""
    if kind == "present_match":
        # invert_match flips presence too; present_match=false means "absent".
        present = value is not None
        return (present == matcher.present_match) != matcher.invert_match
    if value is None:
        return False  # an absent header fails every value matcher, inverted or not
    if kind is None:
        matched = True  # only a name: the header must be present
    elif kind == "exact_match":
        matched = value == matcher.exact_match
    elif kind == "safe_regex_match":
        matched = re.fullmatch(matcher.safe_regex_match.regex, value) is not None
    elif kind == "regex_match":  # v2's deprecated unsafe regex: the same full match
        matched = re.fullmatch(getattr(matcher, kind), value) is not None
    elif kind == "range_match":
        try:
            number = int(value)
        except ValueError:
            matched = False
        else:
            matched = matcher.range_match.start <= number < matcher.range_match.end
    elif kind == "prefix_match":
        matched = value.startswith(matcher.prefix_match)
    elif kind == "suffix_match":
        matched = value.endswith(matcher.suffix_match)
    elif kind == "contains_match":
        matched = matcher.contains_match in value
    else:  # string_match
        matched = _string_matches(matcher.string_match, value)
    return matched != matcher.invert_match


def _query_matches(matcher: QueryParameterMatcher, query: Mapping[str, str]) -> bool:
    if matcher.name not in query:
        return False
    if matcher.HasField("string_match"):
        return _string_matches(matcher.string_match, query[matcher.name])
    return True  # present_match, or only a name


def _path_matches(match: RouteMatch, path: str) -> bool:
    kind: str | None = match.WhichOneof("path_specifier")  # v2 has more kinds
    sensitive = not match.HasField("case_sensitive") or match.case_sensitive.value
    bare = path.split("?", 1)[0].split("#", 1)[0]

    def same_case(text: str) -> str:
        return text if sensitive else text.lower()

    if kind == "prefix":
        return same_case(path).startswith(same_case(match.prefix))
    if kind == "path":
        return same_case(bare) == same_case(match.path)
    if kind == "safe_regex":
        return re.fullmatch(match.safe_regex.regex, bare) is not None
    if kind == "regex":  # v2's deprecated unsafe regex
        return re.fullmatch(getattr(match, kind), bare) is not None
    if kind == "path_separated_prefix":
        prefix = same_case(match.path_separated_prefix)
        subject = same_case(bare)
        return subject == prefix or subject.startswith(prefix + "/")
    return False  # connect_matcher and path_match_policy extensions are not evaluated


def _fraction_matches(match: RouteMatch, random_value: int | None) -> bool:
    if not match.HasField("runtime_fraction"):
        return True
    # No runtime layer here: the default value applies, as when Envoy has no override.
    fraction = match.runtime_fraction.default_value
    denominator = _DENOMINATORS.get(fraction.denominator, 100)
    if random_value is None:
        random_value = random.randrange(denominator)
    return random_value % denominator < fraction.numerator


def route_matches(
    match: RouteMatch,
    path: str,
    headers: Mapping[str, Sequence[str]],
    query: Mapping[str, str],
    random_value: int | None,
) -> bool:
    """Whether one route's match conditions all hold for the request."""
    if not _path_matches(match, path):
        return False
    if match.HasField("grpc"):
        content_type = _header_value(headers, "content-type") or ""
        if not content_type.startswith("application/grpc"):
            return False
    if not all(_header_matches(h, headers) for h in match.headers):
        return False
    if not all(_query_matches(q, query) for q in match.query_parameters):
        return False
    return _fraction_matches(match, random_value)


def _normalize_headers(headers: Headers | None) -> dict[str, list[str]]:
    normalized: dict[str, list[str]] = {}
    for name, value in (headers or {}).items():
        values = [value] if isinstance(value, str) else list(value)
        normalized.setdefault(name.lower(), []).extend(values)
    return normalized


def _choice(
    vhost: VirtualHost, index: int, route: Route, headers: Mapping[str, Sequence[str]]
) -> RouteChoice:
    def make(
        action: ActionKind, cluster: str | None = None, weighted: tuple[WeightedTarget, ...] = ()
    ) -> RouteChoice:
        return RouteChoice(vhost.name, index, route.name, action, cluster, weighted, route)

    action = route.WhichOneof("action")
    if action == "redirect":
        return make("redirect")
    if action == "direct_response":
        return make("direct_response")
    if action != "route":
        return make("non_forwarding")
    target = route.route.WhichOneof("cluster_specifier")
    if target == "cluster":
        return make("cluster", route.route.cluster)
    if target == "cluster_header":
        return make("cluster_header", _header_value(headers, route.route.cluster_header))
    if target == "weighted_clusters":
        clusters = route.route.weighted_clusters.clusters
        return make(
            "weighted_clusters",
            None,
            tuple(WeightedTarget(c.name, c.weight.value) for c in clusters),
        )
    return make("cluster_specifier_plugin")


def select_route(
    config: RouteConfiguration,
    authority: str,
    path: str,
    *,
    headers: Headers | None = None,
    random_value: int | None = None,
    strip_port: bool = False,
) -> RouteChoice | None:
    """The route Envoy takes for a request, or None (Envoy answers 404).

    ``authority`` is the Host (or ``:authority``) header and ``path`` the ``:path``
    with its query string. ``headers`` are matched case-insensitively by name;
    ``content-type`` is what a ``grpc`` route match looks at. A route with a
    ``runtime_fraction`` matches when ``random_value % denominator < numerator``
    (Envoy's rule with the default value, there being no runtime here);
    ``random_value`` defaults to a fresh random number, so pass one for a
    deterministic answer.
    """
    vhost = select_virtual_host(config, authority, strip_port=strip_port)
    if vhost is None:
        return None
    normalized = _normalize_headers(headers)
    query = dict(parse_qsl(path.split("?", 1)[1], keep_blank_values=True)) if "?" in path else {}
    for index, route in enumerate(vhost.routes):
        if route_matches(route.match, path, normalized, query, random_value):
            return _choice(vhost, index, route, normalized)
    return None
