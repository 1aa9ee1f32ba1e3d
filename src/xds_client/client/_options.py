"""Options shared by :class:`XdsClient` and :class:`AsyncXdsClient`, validated once."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict

import grpc
from envoy.config.core.v3.base_pb2 import Node as NodeProto
from google.protobuf.message import Message

from xds_client._backoff import Backoff, BackoffState
from xds_client.errors import UnknownResourceTypeError, UsageError
from xds_client.node import Node, as_node_proto
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
    "normalize_names",
    "resolve_type",
]

ProtocolName: TypeAlias = Literal["sotw", "delta"]
ResourceSpec: TypeAlias = "type[Message] | ResourceType[Any] | str"
ServerSpec: TypeAlias = "str | ServerTarget"


Validator: TypeAlias = Callable[[Any], None]


class ClientOptions:
    """Everything a client needs, validated; shared by the sync and async drivers.

    Internal, made only by :func:`build_options`: a plain class with ``__slots__``
    (read-only by convention), since a 30-field frozen dataclass costs over 3 ms of
    every client's import.
    """

    __slots__ = (
        "ads",
        "api_version",
        "authorities",
        "backoff",
        "cache_dir",
        "does_not_exist_timeout",
        "fail_on_data_errors",
        "fallback_probe_interval",
        "flow_control",
        "ignore_resource_deletion",
        "ignore_resource_deletion_asked",
        "lazy_decode",
        "metrics",
        "node",
        "node_in_every_request",
        "persist_secrets",
        "poll_interval",
        "protocol",
        "queue_size",
        "reject_whole_response",
        "resource_timer_is_transient_error",
        "servers",
        "transport",
        "transport_object",
        "validate_rules",
        "validators",
    )

    def __init__(
        self,
        *,
        servers: tuple[ServerTarget, ...],
        node: NodeProto,
        protocol: ProtocolName = "sotw",
        ads: bool = True,
        api_version: ApiVersion = "v3",
        transport: str = "grpc",
        poll_interval: float = 5.0,
        backoff: Backoff | None = None,
        does_not_exist_timeout: float | None = 15.0,
        ignore_resource_deletion: bool = False,
        node_in_every_request: bool = False,
        reject_whole_response: bool = False,
        validate_rules: bool = True,
        ignore_resource_deletion_asked: bool = False,
        fail_on_data_errors: bool = False,
        resource_timer_is_transient_error: bool = False,
        validators: Mapping[str, Validator] | None = None,
        queue_size: int = 1000,
        flow_control: bool = False,
        metrics: Metrics | None = None,
        fallback_probe_interval: float = 1.0,
        lazy_decode: bool = False,
        authorities: Mapping[str, Authority] | None = None,
        cache_dir: str | None = None,
        persist_secrets: bool = False,
        transport_object: Transport | AsyncTransport | None = None,
    ) -> None:
        self.servers = servers
        self.node = node
        self.protocol: ProtocolName = protocol
        self.ads = ads
        self.api_version: ApiVersion = api_version
        self.transport = transport
        self.poll_interval = poll_interval
        self.backoff = Backoff() if backoff is None else backoff
        self.does_not_exist_timeout = does_not_exist_timeout
        self.ignore_resource_deletion = ignore_resource_deletion
        self.node_in_every_request = node_in_every_request
        self.reject_whole_response = reject_whole_response
        self.validate_rules = validate_rules
        self.ignore_resource_deletion_asked = ignore_resource_deletion_asked
        """``ignore_resource_deletion`` as the caller gave it (before any server's features)."""
        self.fail_on_data_errors = fail_on_data_errors
        """A88 server feature, from the primary's ``server_features``."""
        self.resource_timer_is_transient_error = resource_timer_is_transient_error
        """A88 server feature, from the primary's ``server_features``."""
        self.validators: Mapping[str, Validator] = {} if validators is None else validators
        self.queue_size = queue_size
        self.flow_control = flow_control
        """ADS flow control: a stream reads its next response (and ACKs the last one) only
        once the watchers it fed have taken their events."""
        self.metrics = metrics
        self.fallback_probe_interval = fallback_probe_interval
        self.lazy_decode = lazy_decode
        self.authorities: Mapping[str, Authority] = {} if authorities is None else authorities
        """gRFC A47: the servers of each ``xdstp://`` authority (empty: top-level servers)."""
        self.cache_dir = cache_dir
        """Directory of the last good config (None: nothing is persisted)."""
        self.persist_secrets = persist_secrets
        """Also write Secret (SDS) resources to ``cache_dir``, in clear."""
        self.transport_object = transport_object
        """A transport given as an object (``transport=``); it then serves every server and
        ``transport`` is ``"grpc"``: the object gets the gRPC stream specs."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"ClientOptions({fields})"

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


def build_options(
    servers: ServerSpec | Sequence[ServerSpec],
    *,
    node: Node | NodeProto | None = None,
    protocol: str = "sotw",
    ads: bool = True,
    api_version: str = "v3",
    transport: str | Transport | AsyncTransport = "grpc",
    poll_interval: float = 5.0,
    credentials: ChannelCredentialsConfig | None = None,
    bearer_token: str | None = None,
    metadata: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    call_credentials: grpc.CallCredentials | None = None,
    keepalive: Keepalive | None = None,
    max_receive_message_size: int = DEFAULT_MAX_RECEIVE_MESSAGE_SIZE,
    server_features: Iterable[str] = (),
    backoff: Backoff | None = None,
    does_not_exist_timeout: float | None = 15.0,
    ignore_resource_deletion: bool = False,
    node_in_every_request: bool = False,
    reject_whole_response: bool = False,
    validate_rules: bool = True,
    validators: Mapping[ResourceSpec, Validator] | None = None,
    queue_size: int = 1000,
    flow_control: bool = False,
    metrics: Metrics | None = None,
    fallback_probe_interval: float = 1.0,
    lazy_decode: bool = False,
    authorities: Mapping[str, Authority | ServerSpec | Sequence[ServerSpec]] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    persist_secrets: bool = False,
) -> ClientOptions:
    """Check the client arguments and turn them into :class:`ClientOptions`.

    Raises :class:`~xds_client.errors.UsageError` naming the bad argument.
    """
    if protocol not in ("sotw", "delta"):
        raise UsageError(f"protocol must be 'sotw' or 'delta', not {protocol!r}")
    if api_version not in ("v2", "v3"):
        raise UsageError(f"api_version must be 'v3' or 'v2', not {api_version!r}")
    transport_object: Transport | AsyncTransport | None = None
    if not isinstance(transport, str):
        if not isinstance(transport, (Transport, AsyncTransport)):
            raise UsageError(
                f"transport must be one of {', '.join(TRANSPORT_KINDS)} or an object with "
                f"open(spec), probe(timeout) and close(), not {transport!r}"
            )
        transport_object, transport = transport, "grpc"
    if transport not in TRANSPORT_KINDS:
        raise UsageError(
            f"transport must be one of {', '.join(TRANSPORT_KINDS)}, not {transport!r}"
        )
    if transport != "grpc" and protocol == "delta":
        raise UsageError(f"transport {transport!r} polls, which works with protocol='sotw' only")
    if poll_interval <= 0:
        raise UsageError("poll_interval must be positive")
    if does_not_exist_timeout is not None and does_not_exist_timeout <= 0:
        raise UsageError("does_not_exist_timeout must be positive or None")
    if queue_size < 1:
        raise UsageError("queue_size must be at least 1")
    hooks = ("ack", "nack", "reconnect", "resources")
    if metrics is not None and not all(callable(getattr(metrics, h, None)) for h in hooks):
        raise UsageError(f"metrics must have the methods {', '.join(hooks)} (see Metrics)")
    if max_receive_message_size <= 0:
        raise UsageError("max_receive_message_size must be positive")
    pairs = list(metadata.items()) if isinstance(metadata, Mapping) else list(metadata)
    if bearer_token is not None:
        pairs.append(("authorization", f"Bearer {bearer_token}"))
    server_list: Sequence[ServerSpec] = (
        [servers] if isinstance(servers, (str, ServerTarget)) else list(servers)
    )
    if not server_list:
        raise UsageError("give at least one xDS server")

    def make_target(spec: ServerSpec) -> ServerTarget:
        return _target(
            spec,
            credentials=credentials,
            metadata=pairs,
            call_credentials=call_credentials,
            keepalive=keepalive,
            max_receive_message_size=max_receive_message_size,
            server_features=server_features,
        )

    targets = tuple(make_target(s) for s in server_list)
    checked_authorities: dict[str, Authority] = {}
    for name, value in (authorities or {}).items():
        if not isinstance(name, str):
            raise UsageError(f"authority names are strings, got {name!r}")
        if isinstance(value, Authority):
            checked_authorities[name] = value
            continue
        listed: Sequence[ServerSpec] = (
            [value] if isinstance(value, (str, ServerTarget)) else list(value)
        )
        checked_authorities[name] = Authority(tuple(make_target(s) for s in listed))
    for target in (*targets, *(t for a in checked_authorities.values() for t in a.servers)):
        _check_uri_fits(target.uri, transport)
    version: ApiVersion = "v2" if api_version == "v2" else "v3"
    checked: dict[str, Validator] = {}
    for spec, check in (validators or {}).items():
        if not callable(check):
            raise UsageError(f"validator for {spec!r} is not callable")
        checked[resolve_type(spec, version).type_url] = check
    # A53: the primary server's feature list decides (as in gRPC).
    ignore = ignore_resource_deletion or "ignore_resource_deletion" in targets[0].server_features
    return ClientOptions(
        servers=targets,
        node=as_node_proto(node),
        protocol="delta" if protocol == "delta" else "sotw",
        ads=ads,
        api_version=version,
        transport=transport,
        poll_interval=poll_interval,
        backoff=backoff or Backoff(),
        does_not_exist_timeout=does_not_exist_timeout,
        ignore_resource_deletion=ignore,
        ignore_resource_deletion_asked=ignore_resource_deletion,
        node_in_every_request=node_in_every_request,
        reject_whole_response=reject_whole_response,
        validate_rules=validate_rules,
        # A88: as A53 above, the primary's features decide (per server: not yet).
        fail_on_data_errors="fail_on_data_errors" in targets[0].server_features,
        resource_timer_is_transient_error=(
            "resource_timer_is_transient_error" in targets[0].server_features
        ),
        validators=checked,
        queue_size=queue_size,
        flow_control=flow_control,
        metrics=metrics,
        fallback_probe_interval=fallback_probe_interval,
        lazy_decode=lazy_decode,
        authorities=checked_authorities,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        persist_secrets=persist_secrets,
        transport_object=transport_object,
    )


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


# Keyword arguments of XdsClient and AsyncXdsClient (one definition). The functional
# form with the types as objects: TypedDict compiles each string into a ForwardRef at
# import (about 0.2 M instructions each); only Metrics, a module the client line does not
# load, is a string (grpc and the Node message are loaded by the line anyway).
ClientArgs = TypedDict(  # noqa: UP013
    "ClientArgs",
    {
        "node": Node | NodeProto | None,
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


def normalize_names(names: str | Iterable[str] | None) -> frozenset[str] | None:
    """One name, several, or None for a wildcard watch; ``"*"`` also means wildcard."""
    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    out = frozenset(names)
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
