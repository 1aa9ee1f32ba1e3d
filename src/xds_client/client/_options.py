"""Options shared by :class:`XdsClient` and :class:`AsyncXdsClient`, validated once."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict

import grpc
from envoy.config.core.v3.base_pb2 import Node as NodeProto
from google.protobuf.message import Message
from typing_extensions import Unpack

from xds_client._backoff import Backoff, BackoffState
from xds_client._prebuilt_dataclasses import dataclass
from xds_client.errors import UnknownResourceTypeError, UsageError
from xds_client.node import Node, as_node_proto
from xds_client.protocol._config import DOES_NOT_EXIST_TIMEOUT, check_does_not_exist_timeout
from xds_client.protocol._subscriptions import WILDCARD
from xds_client.resources import ApiVersion, ResourceType, resource_type
from xds_client.transport import (
    TRANSPORT_KINDS,
    AsyncTransport,
    ChannelCredentialsConfig,
    Keepalive,
    ServerTarget,
    Transport,
)
from xds_client.transport._base import DEFAULT_MAX_RECEIVE_MESSAGE_SIZE

from ._authorities import Authority

if TYPE_CHECKING:
    from ._metrics import Metrics

__all__ = [
    "Backoff",
    "BackoffState",
    "ClientOptions",
    "ProtocolName",
    "ResourceSpec",
    "ServerSpec",
    "ClientArgs",
    "build_options",
    "check_callback",
    "check_option_names",
    "normalize_names",
    "resolve_type",
]

ProtocolName: TypeAlias = Literal["sotw", "delta"]
ResourceSpec: TypeAlias = "type[Message] | ResourceType[Any] | str"
ServerSpec: TypeAlias = "str | ServerTarget"


Validator: TypeAlias = Callable[[Any], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """Every option of :class:`XdsClient` and :class:`AsyncXdsClient`, checked: the one
    declaration of each option's default and meaning.

    :func:`build_options` makes it from the keyword arguments (:data:`ClientArgs`): it
    turns the connection options (``credentials``, ``bearer_token``, ``metadata``,
    ``call_credentials``, ``keepalive``, ``max_receive_message_size``,
    ``server_features``) into the :class:`ServerTarget` of each server and passes the
    rest through. The values are checked here, once.
    """

    servers: tuple[ServerTarget, ...]
    """The xDS servers in priority order; later ones are fallbacks (gRFC A71)."""
    node: NodeProto
    """The ``Node`` sent to the servers."""
    protocol: ProtocolName = "sotw"
    """``"sotw"`` or ``"delta"`` (incremental xDS)."""
    ads: bool = True
    """One ADS stream for every type; False: one stream per type (``StreamClusters`` ...)."""
    api_version: ApiVersion = "v3"
    """``"v2"``: the v2 method paths and type URLs."""
    transport: str = "grpc"
    """``"grpc"``, or ``"grpc-fetch"``/``"rest"``, which poll every ``poll_interval``."""
    poll_interval: float = 5.0
    """Seconds between polls of one type (polling transports)."""
    backoff: Backoff = field(default_factory=Backoff)
    """How long to wait before reconnecting (gRPC's policy by default)."""
    does_not_exist_timeout: float | None = DOES_NOT_EXIST_TIMEOUT
    """Seconds before a requested name is reported as not existing; None disables it."""
    ignore_resource_deletion: bool = False
    """Keep resources the server deletes (gRFC A53): as asked, or by the primary's features."""
    ignore_resource_deletion_asked: bool = False
    """``ignore_resource_deletion`` as the caller gave it (before any server's features)."""
    node_in_every_request: bool = False
    """Send ``node`` in every request, not only in a stream's first."""
    reject_whole_response: bool = False
    """Envoy's behaviour: one bad resource rejects the whole response (else gRFC A46)."""
    validate_rules: bool = True
    """NACK resources that break their proto's ``(validate.rules)``, as Envoy does."""
    fail_on_data_errors: bool = False
    """A88 server feature, from the primary's ``server_features``."""
    resource_timer_is_transient_error: bool = False
    """A88 server feature, from the primary's ``server_features``."""
    validators: Mapping[str, Validator] = field(default_factory=dict)
    """type URL -> a check that raises to NACK a resource (runs after the rules)."""
    queue_size: int = 1000
    """Events per watch before coalescing."""
    flow_control: bool = False
    """ADS flow control: a stream reads its next response (and ACKs the last one) only
    once the watchers it fed have taken their events."""
    metrics: Metrics | None = None
    """An object with the :class:`Metrics` methods, told of ACKs, NACKs, reconnects ..."""
    fallback_probe_interval: float = 1.0
    """Seconds between probes of a better server while on a fallback (gRFC A71)."""
    lazy_decode: bool = False
    """Cache only the bytes of each resource and decode on access: less memory."""
    authorities: Mapping[str, Authority] = field(default_factory=dict)
    """gRFC A47: the servers of each ``xdstp://`` authority (empty: top-level servers)."""
    cache_dir: str | None = None
    """Directory of the last good config (None: nothing is persisted)."""
    persist_secrets: bool = False
    """Also write Secret (SDS) resources to ``cache_dir``, in clear."""
    transport_object: Transport | AsyncTransport | None = None
    """A transport given as an object (``transport=``); it then serves every server and
    ``transport`` is ``"grpc"``: the object gets the gRPC stream specs."""

    def __post_init__(self) -> None:
        if self.protocol not in ("sotw", "delta"):
            raise UsageError(f"protocol must be 'sotw' or 'delta', not {self.protocol!r}")
        if self.api_version not in ("v2", "v3"):
            raise UsageError(f"api_version must be 'v3' or 'v2', not {self.api_version!r}")
        if self.transport not in TRANSPORT_KINDS:
            raise UsageError(
                f"transport must be one of {', '.join(TRANSPORT_KINDS)}, not {self.transport!r}"
            )
        if self.transport != "grpc" and self.protocol == "delta":
            raise UsageError(
                f"transport {self.transport!r} polls, which works with protocol='sotw' only"
            )
        if self.poll_interval <= 0:
            raise UsageError("poll_interval must be positive")
        check_does_not_exist_timeout(self.does_not_exist_timeout)
        if self.queue_size < 1:
            raise UsageError("queue_size must be at least 1")
        if self.metrics is not None:
            _check_metrics(self.metrics)
        if not self.servers:
            raise UsageError("give at least one xDS server")
        for authority in self.authorities.values():
            for target in authority.servers:
                _check_uri_fits(target.uri, self.transport)
        for target in self.servers:
            _check_uri_fits(target.uri, self.transport)

    @property
    def per_type(self) -> bool:
        """One stream per type: ``ads=False``, or a polling transport (always per type)."""
        return not self.ads or self.transport != "grpc"


def _target(
    server: ServerSpec,
    *,
    credentials: ChannelCredentialsConfig | None,
    metadata: Sequence[tuple[str, str]],
    call_credentials: grpc.CallCredentials | None,
    keepalive: Keepalive | None,
    max_receive_message_size: int,
    server_features: Iterable[str],
) -> ServerTarget:
    if isinstance(server, ServerTarget):
        return server
    if not isinstance(server, str) or not server:
        raise UsageError(f"a server is a 'host:port' string or a ServerTarget, not {server!r}")
    return ServerTarget(
        server,
        credentials=credentials,
        call_metadata=tuple(metadata),
        call_credentials=call_credentials,
        server_features=frozenset(server_features),
        keepalive=keepalive,
        max_receive_message_size=max_receive_message_size,
    )


# The options that build each server's ServerTarget rather than ClientOptions fields.
_CONNECTION = frozenset(
    {
        "credentials",
        "bearer_token",
        "metadata",
        "call_credentials",
        "keepalive",
        "max_receive_message_size",
        "server_features",
    }
)


def build_options(
    servers: ServerSpec | Sequence[ServerSpec], **args: Unpack[ClientArgs]
) -> ClientOptions:
    """Turn a client's arguments into :class:`ClientOptions` (which checks them).

    Raises :class:`~xds_client.errors.UsageError` naming the bad argument.
    """
    given: dict[str, Any] = dict(args)
    unknown = sorted(given.keys() - ClientArgs.__optional_keys__)
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    connection = {name: given.pop(name) for name in _CONNECTION & given.keys()}
    transport = given.pop("transport", "grpc")
    if not isinstance(transport, str):
        if not isinstance(transport, (Transport, AsyncTransport)):
            raise UsageError(
                f"transport must be one of {', '.join(TRANSPORT_KINDS)} or an object with "
                f"open(spec), probe(timeout) and close(), not {transport!r}"
            )
        given["transport_object"], transport = transport, "grpc"
    max_receive_message_size = connection.get(
        "max_receive_message_size", DEFAULT_MAX_RECEIVE_MESSAGE_SIZE
    )
    if max_receive_message_size <= 0:
        raise UsageError("max_receive_message_size must be positive")
    metadata = connection.get("metadata", ())
    pairs = list(metadata.items()) if isinstance(metadata, Mapping) else list(metadata)
    if connection.get("bearer_token") is not None:
        pairs.append(("authorization", f"Bearer {connection['bearer_token']}"))

    def make_target(spec: ServerSpec) -> ServerTarget:
        return _target(
            spec,
            credentials=connection.get("credentials"),
            metadata=pairs,
            call_credentials=connection.get("call_credentials"),
            keepalive=connection.get("keepalive"),
            max_receive_message_size=max_receive_message_size,
            server_features=connection.get("server_features", ()),
        )

    server_list: Sequence[ServerSpec] = (
        [servers] if isinstance(servers, (str, ServerTarget)) else list(servers)
    )
    targets = tuple(make_target(s) for s in server_list)
    authorities: dict[str, Authority] = {}
    for name, value in (given.pop("authorities", None) or {}).items():
        if not isinstance(name, str):
            raise UsageError(f"authority names are strings, got {name!r}")
        if isinstance(value, Authority):
            authorities[name] = value
            continue
        listed: Sequence[ServerSpec] = (
            [value] if isinstance(value, (str, ServerTarget)) else list(value)
        )
        authorities[name] = Authority(tuple(make_target(s) for s in listed))
    version: ApiVersion = "v2" if given.get("api_version") == "v2" else "v3"
    validators: dict[str, Validator] = {}
    for spec, check in (given.pop("validators", None) or {}).items():
        if not callable(check):
            raise UsageError(f"validator for {spec!r} is not callable")
        validators[resolve_type(spec, version).type_url] = check
    if given.get("backoff") is None:
        given.pop("backoff", None)
    cache_dir = given.pop("cache_dir", None)
    asked = given.pop("ignore_resource_deletion", False)
    # A53 and A88: the primary server's feature list decides (as in gRPC; per server: not yet).
    features = targets[0].server_features if targets else frozenset()
    return ClientOptions(
        servers=targets,
        node=as_node_proto(given.pop("node", None)),
        transport=transport,
        ignore_resource_deletion=asked or "ignore_resource_deletion" in features,
        ignore_resource_deletion_asked=asked,
        fail_on_data_errors="fail_on_data_errors" in features,
        resource_timer_is_transient_error="resource_timer_is_transient_error" in features,
        validators=validators,
        authorities=authorities,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        **given,
    )


def _check_metrics(metrics: object) -> None:
    """A ``metrics=`` object has the four :class:`Metrics` hooks (its optional ones are
    found by the session, with ``metrics_hooks``)."""
    from ._metrics import metrics_hooks  # loaded for a client given metrics only

    problem = "metrics must have the methods ack, nack, reconnect, resources (see Metrics)"
    try:
        hooks = metrics_hooks(metrics)  # type: ignore[arg-type]
    except AttributeError:
        raise UsageError(problem) from None
    if not all(map(callable, (hooks.ack, hooks.nack, hooks.reconnect, hooks.resources))):
        raise UsageError(problem)


def _check_uri_fits(uri: str, transport: str) -> None:
    """A URL is for REST and only REST: caught here, not as a failing I/O thread later."""
    is_url = uri.startswith(("http://", "https://"))
    if transport == "rest" and not is_url:
        raise UsageError(
            f"server {uri!r} is not a URL; transport 'rest' needs http://HOST:PORT or https://..."
        )
    if transport != "rest" and is_url:
        raise UsageError(
            f"server {uri!r} is a URL, for transport='rest'; transport {transport!r} needs "
            "a gRPC target such as HOST:PORT"
        )


def resolve_type(spec: ResourceSpec, api_version: ApiVersion) -> ResourceType[Any]:
    """The registered type for a class, type URL or alias, checked against the API version."""
    try:
        rtype = resource_type(spec, api_version)
    except (TypeError, AttributeError) as exc:  # not a class, URL or alias at all
        raise UnknownResourceTypeError(spec) from exc
    if rtype.api_version != api_version:
        hint = f" (alias {rtype.alias!r})" if rtype.alias else ""
        raise UsageError(
            f"{rtype.type_url} is an API {rtype.api_version} type but the client speaks "
            f"{api_version}; use the {api_version} type{hint}"
        )
    return rtype


# The keyword arguments of XdsClient and AsyncXdsClient, typed (their defaults and
# meanings are ClientOptions'). The functional form, with the types as objects: see
# docs/performance.md ("Lazy imports and import costs") for why.
ClientArgs = TypedDict(  # noqa: UP013
    "ClientArgs",
    {
        "node": Node | NodeProto | str | None,
        "protocol": Literal["sotw", "delta"],
        "ads": bool,
        "api_version": Literal["v3", "v2"],
        "transport": Literal["grpc", "grpc-fetch", "rest"] | Transport | AsyncTransport,
        "poll_interval": float,
        "credentials": ChannelCredentialsConfig | None,
        "bearer_token": str | None,
        "metadata": Mapping[str, str] | Sequence[tuple[str, str]],
        "call_credentials": grpc.CallCredentials | None,
        "keepalive": Keepalive | None,
        "max_receive_message_size": int,
        "server_features": Iterable[str],
        "backoff": Backoff | None,
        "does_not_exist_timeout": float | None,
        "ignore_resource_deletion": bool,
        "node_in_every_request": bool,
        "reject_whole_response": bool,
        "validate_rules": bool,
        "validators": Mapping[ResourceSpec, Validator] | None,
        "queue_size": int,
        "flow_control": bool,
        "metrics": "Metrics | None",
        "fallback_probe_interval": float,
        "lazy_decode": bool,
        "authorities": (
            Mapping[str, Authority | str | ServerTarget | Sequence[str | ServerTarget]] | None
        ),
        "cache_dir": str | os.PathLike[str] | None,
        "persist_secrets": bool,
    },
    total=False,
)


def check_option_names(options: Mapping[str, object]) -> None:
    """Unknown keyword options of a client: a UsageError naming them (and a near miss)."""
    known = ClientArgs.__annotations__.keys()
    unknown = sorted(set(options) - known)
    if unknown:
        import difflib  # for a misspelt option only (~1.2 ms on the client's import line)

        hints = [difflib.get_close_matches(name, known, n=1) for name in unknown]
        near = [f"{name!r} (did you mean {hint[0]!r}?)" if hint else repr(name)
                for name, hint in zip(unknown, hints, strict=True)]  # fmt: skip
        raise UsageError(
            f"unknown client option {', '.join(near)}; the options are {', '.join(sorted(known))}"
        )


def check_callback(on_event: object) -> None:
    """``on_event`` is called with each event: refuse what cannot be, before any event."""
    if on_event is not None and not callable(on_event):
        raise UsageError(f"on_event must be a callable taking one event, not {on_event!r}")


def normalize_names(names: str | Iterable[str] | None) -> frozenset[str] | None:
    """One name, several, or None for a wildcard watch; ``"*"`` also means wildcard."""
    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    try:
        out = frozenset(names)
    except TypeError:  # 42, or a list of lists: say which argument, not frozenset's words
        raise UsageError(
            f"names must be a str, an iterable of str, or None for every resource; got {names!r}"
        ) from None
    for name in out:
        if not isinstance(name, str) or not name:
            raise UsageError(f"resource names are non-empty strings, got {name!r}")
    if WILDCARD in out:
        if len(out) > 1:
            raise UsageError("'*' (wildcard) cannot be mixed with names in one watch")
        return None
    if not out:
        raise UsageError("give at least one resource name, or None for every resource")
    return out
