"""Route selection as Envoy does it: virtual host by domain, then the first matching route.

Pure functions over ``envoy.config.route.v3`` messages; nothing here does I/O.
Regular expressions are RE2's, as in Envoy (``google-re2``): full match, ASCII ``\\w``
and ``\\d``, ``\\z``, ``\\Q..\\E``, ``\\pL``, POSIX classes. Each pattern is compiled once;
:func:`check_routes` reports one RE2 refuses, and at request time such a pattern
simply does not match.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import re2
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
from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message

from xds_client.errors import ResourceValidationError
from xds_client.resources import message_descriptor

__all__ = [
    "GENERATED_REQUEST_ID",
    "ActionKind",
    "Headers",
    "RouteChoice",
    "TlsFacts",
    "WeightedTarget",
    "check_routes",
    "select_route",
    "select_virtual_host",
    "validate_routes",
]

Headers: TypeAlias = Mapping[str, str | Sequence[str]]
"""Request headers: name -> value, or several values (a header sent on several lines)."""

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


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_SPACE = " \t\n\v\f\r"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_RE2_MAX_PROGRAM_SIZE = 100
"""Envoy's default ``re2.max_program_size.error_level``: a bigger program is rejected."""


def _ascii_lower(text: str) -> str:
    """``absl::AsciiStrToLower``: only A-Z change (Python's ``lower()`` folds Unicode)."""
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2::Quiet, as Envoy compiles
    return options


@functools.lru_cache(maxsize=4096)
def _compile(pattern: str) -> re2._Regexp[str] | str:
    """The compiled pattern, or RE2's reason for refusing it (compiled once per pattern)."""
    try:
        return re2.compile(pattern, _re2_options())
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return str(reason)


def _regex_matches(pattern: str, value: str) -> bool:
    """RE2 full match; a pattern RE2 refuses matches nothing (it never raises)."""
    compiled = _compile(pattern)
    return not isinstance(compiled, str) and compiled.fullmatch(value) is not None


def regex_problem(pattern: str) -> str | None:
    """Why Envoy 1.40 refuses ``pattern`` as a ``safe_regex`` (None when it takes it).

    RE2 must compile it, and its program must not exceed Envoy's default
    ``re2.max_program_size.error_level`` (100). The size is checked only on patterns
    without a Unicode class (``\\p``, ``\\P``): Envoy's RE2 build counts those far
    smaller than this binding does (it takes ``/\\pL+``, 1,202 instructions here).
    """
    compiled = _compile(pattern)
    if isinstance(compiled, str):
        return f"RE2 rejects {pattern!r}: {compiled}"
    unicode_class = "\\p" in pattern or "\\P" in pattern
    if compiled.programsize > _RE2_MAX_PROGRAM_SIZE and not unicode_class:
        return (
            f"the RE2 program of {pattern!r} has size {compiled.programsize}, over Envoy's "
            f"default re2.max_program_size.error_level of {_RE2_MAX_PROGRAM_SIZE}"
        )
    return None


def _strip_port(host: str) -> str:
    """What Envoy's route table matches under ``ignore_port_in_host_matching``.

    ``HeaderUtility::getPortStart``: the port starts at the last ``:`` unless a ``]``
    follows it (a bare IPv6 literal); everything from there on is dropped, whatever it
    is (``a.com:8080:80`` -> ``a.com:8080``, ``[::1]:80:`` -> ``[::1]:80``).
    """
    colon = host.rfind(":")
    if colon == -1:
        return host
    bracket = host.rfind("]")
    return host[:colon] if bracket == -1 or bracket < colon else host


def select_virtual_host(
    config: RouteConfiguration, authority: str, *, strip_port: bool = False
) -> VirtualHost | None:
    """The virtual host Envoy picks for ``authority`` (the Host header), or None.

    Order: an exact domain, then the longest suffix wildcard (``*.example.com``), then
    the longest prefix wildcard (``example.*``), then ``*``. Comparison ignores ASCII
    case. A wildcard matches at least one character (``*.a.com`` does not match
    ``.a.com``). The port stays part of the host, as in Envoy, unless ``strip_port`` is
    set (or the route configuration says ``ignore_port_in_host_matching``): then what
    follows the last ``:`` goes, as Envoy strips it.
    """
    host = authority
    # v2 RouteConfigurations have no ignore_port_in_host_matching.
    if strip_port or getattr(config, "ignore_port_in_host_matching", False):
        host = _strip_port(host)
    host = _ascii_lower(host)
    best_suffix: tuple[int, VirtualHost] | None = None
    best_prefix: tuple[int, VirtualHost] | None = None
    default: VirtualHost | None = None
    for vhost in config.virtual_hosts:
        for domain in (_ascii_lower(d) for d in vhost.domains):
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
    if kind == "safe_regex":  # ignore_case does not apply to a regex
        return _regex_matches(matcher.safe_regex.regex, value)

    def norm(text: str) -> str:
        return _ascii_lower(text) if matcher.ignore_case else text

    subject = norm(value)
    if kind == "exact":
        return subject == norm(matcher.exact)
    if kind == "prefix":
        return subject.startswith(norm(matcher.prefix))
    if kind == "suffix":
        return subject.endswith(norm(matcher.suffix))
    if kind == "contains":
        return norm(matcher.contains) in subject
    return False  # ``custom`` extensions are not evaluated


_INLINE_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "access-control-request-headers",
        "access-control-request-method",
        "access-control-request-private-network",
        "authentication",
        "authorization",
        "cache-control",
        "cdn-loop",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "expect",
        "grpc-accept-encoding",
        "grpc-timeout",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "keep-alive",
        "origin",
        "pragma",
        "proxy-connection",
        "proxy-status",
        "referer",
        "te",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "via",
        "x-client-trace-id",
        "x-envoy-attempt-count",
        "x-envoy-decorator-operation",
        "x-envoy-downstream-service-cluster",
        "x-envoy-downstream-service-node",
        "x-envoy-expected-rq-timeout-ms",
        "x-envoy-external-address",
        "x-envoy-force-trace",
        "x-envoy-hedge-on-per-try-timeout",
        "x-envoy-internal",
        "x-envoy-ip-tags",
        "x-envoy-is-timeout-retry",
        "x-envoy-max-retries",
        "x-envoy-original-host",
        "x-envoy-original-path",
        "x-envoy-original-url",
        "x-envoy-retriable-header-names",
        "x-envoy-retriable-status-codes",
        "x-envoy-retry-grpc-on",
        "x-envoy-retry-on",
        "x-envoy-upstream-alt-stat-name",
        "x-envoy-upstream-rq-per-try-timeout-ms",
        "x-envoy-upstream-rq-timeout-alt-response",
        "x-envoy-upstream-rq-timeout-ms",
        "x-envoy-upstream-stream-duration-ms",
        "x-forwarded-client-cert",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-port",
        "x-forwarded-proto",
        "x-request-id",
    }
)
"""Request headers Envoy 1.40 keeps "inline" (one entry): further lines are appended to it.

Envoy prints the list at start-up ("HTTP header map info: request header map"); these
are its names without the pseudo-headers. Extensions register some of them (the
cache filter ``authorization``, ``if-none-match``...), so the list is the binary's,
not only the codec's."""

_EXTERNAL_CONTROL_HEADERS = frozenset(
    {
        "x-envoy-expected-rq-timeout-ms",
        "x-envoy-force-trace",
        "x-envoy-hedge-on-per-try-timeout",
        "x-envoy-internal",
        "x-envoy-ip-tags",
        "x-envoy-max-retries",
        "x-envoy-original-url",
        "x-envoy-retriable-header-names",
        "x-envoy-retriable-status-codes",
        "x-envoy-retry-grpc-on",
        "x-envoy-retry-on",
        "x-envoy-upstream-alt-stat-name",
        "x-envoy-upstream-rq-per-try-timeout-ms",
        "x-envoy-upstream-rq-timeout-alt-response",
        "x-envoy-upstream-rq-timeout-ms",
        "x-envoy-upstream-stream-duration-ms",
    }
)
"""The ``x-envoy-*`` control headers Envoy 1.40's HttpConnectionManager removes from a
request it does not take as internal, before routing (probed one by one; the others,
such as ``x-envoy-attempt-count`` or ``x-envoy-decorator-operation``, stay)."""

GENERATED_REQUEST_ID = "00000000-0000-4000-8000-000000000000"
"""The ``x-request-id`` :func:`select_route` gives a request that has none (Envoy
generates a random UUID there, so only presence and pattern matchers can tell)."""


@dataclass(frozen=True, slots=True)
class TlsFacts:
    """What a TLS connection tells Envoy about the client's certificate
    (``RouteMatch.tls_context`` matches on it)."""

    peer_certificate_presented: bool = False
    """The client presented a certificate."""
    peer_certificate_validated: bool = False
    """Envoy validated the client's certificate (against its ``validation_context``)."""


def _envoy_append(values: Sequence[str]) -> str:
    """``HeaderMapImpl::appendToHeader``: an empty line adds nothing, ``,`` only between
    non-empty parts (``["application/grpc", ""]`` stays ``application/grpc``)."""
    joined = values[0]
    for value in values[1:]:
        if value:
            joined = f"{joined},{value}" if joined else value
    return joined


def _header_lines(headers: Mapping[str, Sequence[str]], name: str) -> Sequence[str] | None:
    """The header's lines as Envoy's header map holds them (None when absent): one entry
    per line, except an inline header, whose lines the codec appends into one."""
    key = name.lower()
    values = headers.get(key)
    if not values:
        return None
    return (_envoy_append(values),) if key in _INLINE_HEADERS else values


def _header_value(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    """The header as Envoy's ``getAllOfHeaderAsString`` gives it: lines joined with ``,``."""
    values = _header_lines(headers, name)
    return None if values is None else ",".join(values)


def _envoy_int64(text: str) -> int | None:
    """``absl::SimpleAtoi`` into an int64: ASCII space around, one optional sign, ASCII
    digits (no ``_``, no other digits, no base prefix), within the int64 range."""
    text = text.strip(_ASCII_SPACE)
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _value_matches(matcher: HeaderMatcher, kind: str, value: str) -> bool:
    if kind == "exact_match":
        return not matcher.exact_match or value == matcher.exact_match  # "" is any value
    if kind == "safe_regex_match":
        return _regex_matches(matcher.safe_regex_match.regex, value)
    if kind == "regex_match":  # v2's deprecated unsafe regex: the same full match
        pattern: str = getattr(matcher, kind)
        return _regex_matches(pattern, value)
    if kind == "range_match":
        number = _envoy_int64(value)
        return number is not None and (
            matcher.range_match.start <= number < matcher.range_match.end
        )
    if kind == "prefix_match":
        return value.startswith(matcher.prefix_match)
    if kind == "suffix_match":
        return value.endswith(matcher.suffix_match)
    if kind == "contains_match":
        return matcher.contains_match in value
    return _string_matches(matcher.string_match, value)


def _header_matches(matcher: HeaderMatcher, headers: Mapping[str, Sequence[str]]) -> bool:
    values = _header_lines(headers, matcher.name)
    kind: str | None = matcher.WhichOneof("header_match_specifier")  # v2 has more kinds
    if values is None and getattr(matcher, "treat_missing_header_as_empty", False):
        values = ("",)
    if kind == "present_match":
        # invert_match flips presence too; present_match=false means "absent".
        return ((values is not None) == matcher.present_match) != matcher.invert_match
    if values is None:
        # Absent: a value matcher fails, inverted or not; a bare name is a presence test
        # (Envoy's HeaderMatchType::Present), which invert_match turns into "absent".
        return kind is None and matcher.invert_match
    if kind is None:
        return not matcher.invert_match  # only a name: the header must be present
    # A header on several lines: a match when any one line matches.
    return any(_value_matches(matcher, kind, v) for v in values) != matcher.invert_match


def _query_matches(matcher: QueryParameterMatcher, query: Mapping[str, str]) -> bool:
    value = query.get(matcher.name)
    if matcher.HasField("present_match") and not matcher.present_match:
        return value is None  # present_match: false means the parameter is absent
    if value is None:
        return False
    if matcher.HasField("string_match"):
        return _string_matches(matcher.string_match, value)
    return True  # present_match, or only a name


def parse_query(path: str) -> dict[str, str]:
    """The query parameters of ``path`` as Envoy's route matching reads them.

    ``QueryParamsMulti::parseQueryString``: the query string split on ``&``, each
    element on its first ``=``, names and values as sent (no ``%XX`` decoding, ``+``
    stays ``+``); a repeated name keeps its FIRST value; a name without ``=`` has the
    value ``""``.
    """
    if "?" not in path:
        return {}
    params: dict[str, str] = {}
    for param in path.split("?", 1)[1].split("#", 1)[0].split("&"):
        name, _, value = param.partition("=")
        params.setdefault(name, value)
    return params


def _path_matches(match: RouteMatch, path: str) -> bool:
    kind: str | None = match.WhichOneof("path_specifier")  # v2 has more kinds
    sensitive = not match.HasField("case_sensitive") or match.case_sensitive.value
    bare = path.split("?", 1)[0].split("#", 1)[0]

    def same_case(text: str) -> str:
        return text if sensitive else _ascii_lower(text)

    if kind == "prefix":
        return same_case(path).startswith(same_case(match.prefix))
    if kind == "path":
        return same_case(bare) == same_case(match.path)
    if kind == "safe_regex":
        return _regex_matches(match.safe_regex.regex, bare)
    if kind == "regex":  # v2's deprecated unsafe regex
        pattern: str = getattr(match, kind)
        return _regex_matches(pattern, bare)
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


def _tls_matches(match: RouteMatch, tls: TlsFacts | None) -> bool:
    """``RouteMatch.tls_context``: each flag that is set must equal the connection's; a
    plaintext connection (``tls`` None) has neither a presented nor a validated
    certificate, as Envoy treats a connection without SSL."""
    if not match.HasField("tls_context"):
        return True
    wanted = match.tls_context
    presented = tls is not None and tls.peer_certificate_presented
    validated = tls is not None and tls.peer_certificate_validated
    if wanted.HasField("presented") and wanted.presented.value != presented:
        return False
    return not wanted.HasField("validated") or wanted.validated.value == validated


def route_matches(  # noqa: PLR0917 - positional, as before tls was added
    match: RouteMatch,
    path: str,
    headers: Mapping[str, Sequence[str]],
    query: Mapping[str, str],
    random_value: int | None,
    tls: TlsFacts | None = None,
) -> bool:
    """Whether one route's match conditions all hold for the request."""
    if not _path_matches(match, path):
        return False
    if not _tls_matches(match, tls):
        return False
    if match.HasField("grpc"):
        # Grpc::Common::hasGrpcContentType: exactly application/grpc or application/grpc+...
        # (content-type is inline: its lines are appended as Envoy's codec does).
        content_type = _header_value(headers, "content-type") or ""
        if content_type != "application/grpc" and not content_type.startswith("application/grpc+"):
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


def _as_routed(
    headers: dict[str, list[str]], *, internal: bool, tls: TlsFacts | None
) -> dict[str, list[str]]:
    """The request headers as a default HttpConnectionManager hands them to routing
    (``ConnectionManagerUtility::mutateRequestHeaders``, ``use_remote_address`` false).

    An external request loses the ``x-envoy-*`` control headers it sent; an internal
    one keeps them and gets ``x-envoy-internal: true``. Either way the client's
    ``x-forwarded-client-cert`` goes (``forward_client_cert_details`` SANITIZE), and
    a request without ``x-request-id`` or ``x-forwarded-proto`` gets one.
    """
    routed = {
        name: values
        for name, values in headers.items()
        if name != "x-forwarded-client-cert" and (internal or name not in _EXTERNAL_CONTROL_HEADERS)
    }
    if internal:
        routed["x-envoy-internal"] = ["true"]
    if not routed.get("x-request-id"):
        routed["x-request-id"] = [GENERATED_REQUEST_ID]
    if not routed.get("x-forwarded-proto"):
        routed["x-forwarded-proto"] = ["http" if tls is None else "https"]
    return routed


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


def _without_path_parameters(path: str) -> str:
    """``path`` with each segment's ``;`` parameters removed (``/a;x/b;y?q=1`` is
    ``/a/b?q=1``), as Envoy matches it under ``ignore_path_parameters_in_path_matching``."""
    bare, mark, query = path.partition("?")
    segments = [segment.partition(";")[0] for segment in bare.split("/")]
    return "/".join(segments) + mark + query


def select_route(
    config: RouteConfiguration,
    authority: str,
    path: str,
    *,
    headers: Headers | None = None,
    random_value: int | None = None,
    strip_port: bool = False,
    internal: bool = False,
    tls: TlsFacts | None = None,
) -> RouteChoice | None:
    """The route Envoy takes for a request, or None (Envoy answers 404).

    ``authority`` is the Host (or ``:authority``) header and ``path`` the ``:path``
    with its query string. ``headers`` are matched case-insensitively by name;
    ``content-type`` is what a ``grpc`` route match looks at. A route with a
    ``runtime_fraction`` matches when ``random_value % denominator < numerator``
    (Envoy's rule with the default value, there being no runtime here);
    ``random_value`` defaults to a fresh random number, so pass one for a
    deterministic answer.

    As Envoy does, a configuration's ``vhost_header`` picks the virtual host by the
    first line of that header (a request without it has no route),
    and ``ignore_path_parameters_in_path_matching`` matches paths without the ``;``
    parameters of their segments (``/a;x/b`` is ``/a/b``).

    The headers are matched as Envoy's default HttpConnectionManager passes them to
    routing. A header sent on several lines is one value joined with ``,`` when Envoy
    keeps it inline (``accept``, ``authorization``, ``if-none-match``, ``origin``...),
    else each line is matched on its own. Unless ``internal`` (Envoy takes the request
    as internal, by its ``internal_address_config``; not by default), the client's
    ``x-envoy-*`` control headers (``x-envoy-retry-on``, ``x-envoy-internal``...) are
    dropped; the client's ``x-forwarded-client-cert`` always is; a request without
    ``x-request-id`` or ``x-forwarded-proto`` gets one (:data:`GENERATED_REQUEST_ID`,
    ``http`` or ``https``); one whose ``x-forwarded-proto`` is empty has no route.

    ``tls`` is what the connection's TLS says about the client's certificate, for
    ``RouteMatch.tls_context``; None is a plaintext connection (a route asking for a
    presented or validated certificate does not match it).
    """
    normalized = _as_routed(_normalize_headers(headers), internal=internal, tls=tls)
    if _header_value(normalized, "x-forwarded-proto") == "":
        return None  # Envoy routes no request whose x-forwarded-proto is empty (404)
    # v2 RouteConfigurations have neither field.
    vhost_header = getattr(config, "vhost_header", "")
    if vhost_header:
        # The first line of the named header picks the virtual host; without it, none
        # is picked (Envoy does not fall back to the authority).
        lines = normalized.get(vhost_header.lower())
        if not lines:
            return None
        authority = lines[0]
    vhost = select_virtual_host(config, authority, strip_port=strip_port)
    if vhost is None:
        return None
    query = parse_query(path)
    matched = path
    if getattr(config, "ignore_path_parameters_in_path_matching", False) and ";" in path:
        matched = _without_path_parameters(path)
    for index, route in enumerate(vhost.routes):
        if route_matches(route.match, matched, normalized, query, random_value, tls):
            return _choice(vhost, index, route, normalized)
    return None


def _regex_fields(message: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every ``RegexMatcher`` under ``message``: (field path, pattern), also inside an
    ``Any`` of a type the installed protos know (``typed_per_filter_config``'s CORS
    policy...)."""
    full_name = message.DESCRIPTOR.full_name
    if full_name.endswith(".RegexMatcher"):
        yield where, message.regex
        return
    if full_name == "google.protobuf.Any":
        inner = _unpacked(message)
        if inner is not None:
            yield from _regex_fields(inner, where)
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        path = f"{where}.{field.name}" if where else field.name
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    yield from _regex_fields(item, f"{path}[{key!r}]")
        elif not hasattr(value, "DESCRIPTOR"):  # a repeated field
            for index, item in enumerate(value):
                label = f"{path}[{index}]"
                if field.name in ("virtual_hosts", "routes") and item.name:
                    label += f" ({item.name!r})"
                yield from _regex_fields(item, label)
        else:
            yield from _regex_fields(value, path)


def _unpacked(packed: Any) -> Message | None:
    """The message an ``Any`` holds; None when its type is unknown or it does not decode
    (Envoy's own checks report that, not the regex walk)."""
    descriptor = message_descriptor(packed.type_url.rsplit("/", 1)[-1])
    if descriptor is None:
        return None
    message = message_factory.GetMessageClass(descriptor)()
    try:
        message.ParseFromString(packed.value)
    except DecodeError:
        return None
    return message


def check_routes(config: RouteConfiguration) -> list[str]:
    """Reasons Envoy 1.40 would reject the route configuration's regexes (empty when none).

    Every ``safe_regex`` (route paths, header, query parameter and string matchers,
    rewrites, CORS origins...) must compile under RE2, within Envoy's default program
    size (100), including those inside ``typed_per_filter_config`` (a per-route or
    per-virtual-host ``CorsPolicy``, or any other filter config whose type the
    installed protos know). Each reason names the route configuration and the field
    (``virtual_hosts[0] ('vh').routes[2].match.headers[0].safe_regex_match``).
    :func:`select_route` never raises on such a pattern: it simply does not match.
    """
    name = getattr(config, "name", "")
    prefix = f"route configuration {name!r}: " if name else ""
    problems: list[str] = []
    for where, pattern in _regex_fields(config, ""):
        problem = regex_problem(pattern)
        if problem is not None:
            problems.append(f"{prefix}{where}: {problem}")
    return problems


def validate_routes(config: RouteConfiguration) -> None:
    """A validator for ``validators={ROUTE: validate_routes}``: NACKs a route configuration
    whose regexes :func:`check_routes` finds invalid, naming each problem.

    Raises :class:`~xds_client.errors.ResourceValidationError`.
    """
    problems = check_routes(config)
    if problems:
        raise ResourceValidationError("; ".join(problems))
