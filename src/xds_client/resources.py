"""The resource type registry: type URLs, message classes, aliases and services.

Every xDS resource travels as a ``google.protobuf.Any`` whose ``type_url``
names its message. This module knows the standard Envoy types for API v3 and
v2, maps them both ways to their generated message classes, and decodes
``Any`` values after checking their type.

Message modules are imported on first use only: importing all of xds-protos
takes seconds, and most programs need two or three types.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading
from collections.abc import Iterator
from dataclasses import field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from envoy.service.discovery.v3.discovery_pb2 import Resource
from google.protobuf import descriptor_pool
from google.protobuf.message import DecodeError, Message

from xds_client._prebuilt_dataclasses import dataclass

from .errors import (
    DuplicateResourceTypeError,
    ResourceDecodeError,
    TypeUrlMismatchError,
    UnknownResourceTypeError,
)

if TYPE_CHECKING:
    from google.protobuf.any_pb2 import Any as AnyProto
    from google.protobuf.descriptor import Descriptor

__all__ = [
    "ApiVersion",
    "ResourceType",
    "UnwrappedResource",
    "TYPE_URL_PREFIX",
    "RESOURCE_WRAPPER_TYPE_URL",
    "LISTENER",
    "ROUTE",
    "SCOPED_ROUTE",
    "VIRTUAL_HOST",
    "CLUSTER",
    "ENDPOINT",
    "SECRET",
    "RUNTIME",
    "EXTENSION_CONFIG",
    "V2_LISTENER",
    "V2_ROUTE",
    "V2_SCOPED_ROUTE",
    "V2_VIRTUAL_HOST",
    "V2_CLUSTER",
    "V2_ENDPOINT",
    "V2_SECRET",
    "V2_RUNTIME",
    "ALIASES",
    "resource_type",
    "resource_types",
    "type_url_of",
    "message_class_of",
    "message_descriptor",
    "is_full_state",
    "register",
    "decode",
    "unwrap",
]

M = TypeVar("M", bound=Message)
ApiVersion = Literal["v2", "v3"]

TYPE_URL_PREFIX = "type.googleapis.com/"
RESOURCE_WRAPPER_TYPE_URL = TYPE_URL_PREFIX + "envoy.service.discovery.v3.Resource"
_V2_RESOURCE_WRAPPER_TYPE_URL = TYPE_URL_PREFIX + "envoy.api.v2.Resource"

LISTENER = TYPE_URL_PREFIX + "envoy.config.listener.v3.Listener"
ROUTE = TYPE_URL_PREFIX + "envoy.config.route.v3.RouteConfiguration"
SCOPED_ROUTE = TYPE_URL_PREFIX + "envoy.config.route.v3.ScopedRouteConfiguration"
VIRTUAL_HOST = TYPE_URL_PREFIX + "envoy.config.route.v3.VirtualHost"
CLUSTER = TYPE_URL_PREFIX + "envoy.config.cluster.v3.Cluster"
ENDPOINT = TYPE_URL_PREFIX + "envoy.config.endpoint.v3.ClusterLoadAssignment"
SECRET = TYPE_URL_PREFIX + "envoy.extensions.transport_sockets.tls.v3.Secret"
RUNTIME = TYPE_URL_PREFIX + "envoy.service.runtime.v3.Runtime"
EXTENSION_CONFIG = TYPE_URL_PREFIX + "envoy.config.core.v3.TypedExtensionConfig"

V2_LISTENER = TYPE_URL_PREFIX + "envoy.api.v2.Listener"
V2_ROUTE = TYPE_URL_PREFIX + "envoy.api.v2.RouteConfiguration"
V2_SCOPED_ROUTE = TYPE_URL_PREFIX + "envoy.api.v2.ScopedRouteConfiguration"
V2_VIRTUAL_HOST = TYPE_URL_PREFIX + "envoy.api.v2.route.VirtualHost"
V2_CLUSTER = TYPE_URL_PREFIX + "envoy.api.v2.Cluster"
V2_ENDPOINT = TYPE_URL_PREFIX + "envoy.api.v2.ClusterLoadAssignment"
V2_SECRET = TYPE_URL_PREFIX + "envoy.api.v2.auth.Secret"
V2_RUNTIME = TYPE_URL_PREFIX + "envoy.service.discovery.v2.Runtime"


@dataclass(frozen=True, eq=False, slots=True)
class ResourceType(Generic[M]):
    """One kind of xDS resource and everything needed to fetch and decode it.

    Instances are unique per type URL, so identity comparison is fine.
    """

    type_url: str
    """``type.googleapis.com/`` followed by the full message name."""
    module: str
    """Python module that defines the message class (imported on first use)."""
    api_version: ApiVersion
    """Which xDS API generation the type belongs to."""
    alias: str | None = None
    """Short name such as ``"cds"``; aliases are unique within an API version."""
    full_state: bool = False
    """In SotW every response carries the whole set (LDS, CDS): absence means deletion."""
    service: str | None = None
    """Full name of the per-type discovery service, or None when only ADS serves it."""
    method_suffix: str | None = None
    """Suffix of the service's methods: ``Stream<suffix>``, ``Delta<suffix>``, ``Fetch<suffix>``."""
    sotw: bool = True
    """False for delta-only types (VHDS)."""
    rest_name: str | None = None
    """The ``<name>`` of the REST path ``/<api>/discovery:<name>``, when REST serves it."""
    _message_class: list[type[M]] = field(default_factory=list, repr=False)

    @property
    def message_name(self) -> str:
        """Full protobuf name of the message, e.g. ``envoy.config.cluster.v3.Cluster``."""
        return self.type_url[len(TYPE_URL_PREFIX) :]

    @property
    def message_class(self) -> type[M]:
        """The generated message class, importing its module on first use."""
        if not self._message_class:
            module = importlib.import_module(self.module)
            cls: type[M] = getattr(module, self.message_name.rsplit(".", 1)[1])
            self._message_class.append(cls)
        return self._message_class[0]

    def decode(self, data: bytes) -> M:
        """Parse serialized bytes of this type; raises :class:`ResourceDecodeError`."""
        try:
            return self.message_class.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise ResourceDecodeError(self.type_url, str(exc) or type(exc).__name__) from exc

    def _method(self, kind: str) -> str | None:
        if self.service is None or self.method_suffix is None:
            return None
        if kind != "Delta" and not self.sotw:
            return None
        return f"/{self.service}/{kind}{self.method_suffix}"

    @property
    def stream_method(self) -> str | None:
        """gRPC path of the per-type SotW stream, such as ``.../StreamClusters``."""
        return self._method("Stream")

    @property
    def delta_method(self) -> str | None:
        """gRPC path of the per-type delta stream."""
        return self._method("Delta")

    @property
    def fetch_method(self) -> str | None:
        """gRPC path of the unary ``Fetch*`` call."""
        return self._method("Fetch")

    @property
    def rest_path(self) -> str | None:
        """HTTP path of the REST-JSON endpoint, e.g. ``/v3/discovery:clusters``."""
        return f"/{self.api_version}/discovery:{self.rest_name}" if self.rest_name else None

    def __repr__(self) -> str:
        return f"ResourceType({self.type_url!r})"


@dataclass(frozen=True, slots=True)
class UnwrappedResource:
    """A resource as carried in a response, after removing any ``Resource`` wrapper."""

    name: str | None
    """Name given by the wrapper; None for a bare resource (its name is in the body)."""
    version: str
    """Per-resource version from the wrapper, or ``""``."""
    ttl: float | None
    """Time to live in seconds from the wrapper, or None when it has none."""
    body: AnyProto | None
    """The resource itself; None for a heartbeat (a wrapper with no body)."""
    aliases: tuple[str, ...] = ()
    """Alternative names (VHDS) from the wrapper."""
    metadata: Message | None = None
    """The wrapper's ``metadata`` (``envoy.config.core.v3.Metadata``), or None when it has none."""

    def __init__(  # noqa: PLR0917 - made per wrapped resource, not record's generic __init__
        self,
        name: str | None,
        version: str,
        ttl: float | None,
        body: AnyProto | None,
        aliases: tuple[str, ...] = (),
        metadata: Message | None = None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "name", name)
        setter(self, "version", version)
        setter(self, "ttl", ttl)
        setter(self, "body", body)
        setter(self, "aliases", aliases)
        setter(self, "metadata", metadata)


_lock = threading.Lock()
_by_url: dict[str, ResourceType[Any]] = {}
_by_alias: dict[tuple[ApiVersion, str], ResourceType[Any]] = {}

ALIASES = ("lds", "rds", "srds", "vhds", "cds", "eds", "sds", "rtds", "ecds")


def _add(rtype: ResourceType[Any]) -> None:
    _by_url[rtype.type_url] = rtype
    if rtype.alias is not None:
        _by_alias[(rtype.api_version, rtype.alias)] = rtype


def _standard_types() -> Iterator[ResourceType[Any]]:
    v3 = "envoy.service.{}.v3.{}"
    yield ResourceType(
        LISTENER, "envoy.config.listener.v3.listener_pb2", "v3", "lds", True,
        v3.format("listener", "ListenerDiscoveryService"), "Listeners", rest_name="listeners",
    )  # fmt: skip
    yield ResourceType(
        ROUTE, "envoy.config.route.v3.route_pb2", "v3", "rds", False,
        v3.format("route", "RouteDiscoveryService"), "Routes", rest_name="routes",
    )  # fmt: skip
    yield ResourceType(
        SCOPED_ROUTE, "envoy.config.route.v3.scoped_route_pb2", "v3", "srds", False,
        v3.format("route", "ScopedRoutesDiscoveryService"), "ScopedRoutes",
        rest_name="scoped-routes",
    )  # fmt: skip
    yield ResourceType(
        VIRTUAL_HOST, "envoy.config.route.v3.route_components_pb2", "v3", "vhds", False,
        v3.format("route", "VirtualHostDiscoveryService"), "VirtualHosts", sotw=False,
    )  # fmt: skip
    yield ResourceType(
        CLUSTER, "envoy.config.cluster.v3.cluster_pb2", "v3", "cds", True,
        v3.format("cluster", "ClusterDiscoveryService"), "Clusters", rest_name="clusters",
    )  # fmt: skip
    yield ResourceType(
        ENDPOINT, "envoy.config.endpoint.v3.endpoint_pb2", "v3", "eds", False,
        v3.format("endpoint", "EndpointDiscoveryService"), "Endpoints", rest_name="endpoints",
    )  # fmt: skip
    yield ResourceType(
        SECRET, "envoy.extensions.transport_sockets.tls.v3.secret_pb2", "v3", "sds", False,
        v3.format("secret", "SecretDiscoveryService"), "Secrets", rest_name="secrets",
    )  # fmt: skip
    yield ResourceType(
        RUNTIME, "envoy.service.runtime.v3.rtds_pb2", "v3", "rtds", False,
        v3.format("runtime", "RuntimeDiscoveryService"), "Runtime", rest_name="runtime",
    )  # fmt: skip
    yield ResourceType(
        EXTENSION_CONFIG, "envoy.config.core.v3.extension_pb2", "v3", "ecds", False,
        v3.format("extension", "ExtensionConfigDiscoveryService"), "ExtensionConfigs",
        rest_name="extension_configs",
    )  # fmt: skip
    v2 = "envoy.api.v2."
    yield ResourceType(
        V2_LISTENER, "envoy.api.v2.listener_pb2", "v2", "lds", True,
        v2 + "ListenerDiscoveryService", "Listeners", rest_name="listeners",
    )  # fmt: skip
    yield ResourceType(
        V2_ROUTE, "envoy.api.v2.route_pb2", "v2", "rds", False,
        v2 + "RouteDiscoveryService", "Routes", rest_name="routes",
    )  # fmt: skip
    yield ResourceType(
        V2_SCOPED_ROUTE, "envoy.api.v2.scoped_route_pb2", "v2", "srds", False,
        v2 + "ScopedRoutesDiscoveryService", "ScopedRoutes", rest_name="scoped-routes",
    )  # fmt: skip
    yield ResourceType(
        V2_VIRTUAL_HOST, "envoy.api.v2.route.route_components_pb2", "v2", "vhds", False,
        v2 + "VirtualHostDiscoveryService", "VirtualHosts", sotw=False,
    )  # fmt: skip
    yield ResourceType(
        V2_CLUSTER, "envoy.api.v2.cluster_pb2", "v2", "cds", True,
        v2 + "ClusterDiscoveryService", "Clusters", rest_name="clusters",
    )  # fmt: skip
    yield ResourceType(
        V2_ENDPOINT, "envoy.api.v2.endpoint_pb2", "v2", "eds", False,
        v2 + "EndpointDiscoveryService", "Endpoints", rest_name="endpoints",
    )  # fmt: skip
    yield ResourceType(
        V2_SECRET, "envoy.api.v2.auth.secret_pb2", "v2", "sds", False,
        "envoy.service.discovery.v2.SecretDiscoveryService", "Secrets", rest_name="secrets",
    )  # fmt: skip
    yield ResourceType(
        V2_RUNTIME, "envoy.service.discovery.v2.rtds_pb2", "v2", "rtds", False,
        "envoy.service.discovery.v2.RuntimeDiscoveryService", "Runtime", rest_name="runtime",
    )  # fmt: skip


for _rtype in _standard_types():
    _add(_rtype)


@overload
def resource_type(spec: type[M], api_version: ApiVersion = ...) -> ResourceType[M]: ...
@overload
def resource_type(spec: ResourceType[M], api_version: ApiVersion = ...) -> ResourceType[M]: ...
@overload
def resource_type(spec: str, api_version: ApiVersion = ...) -> ResourceType[Any]: ...
def resource_type(
    spec: type[Message] | ResourceType[Any] | str, api_version: ApiVersion = "v3"
) -> ResourceType[Any]:
    """Find a registered type by message class, type URL, full message name or alias.

    Aliases (``"cds"``) resolve within ``api_version``; everything else names
    its version itself. Raises :class:`UnknownResourceTypeError`.
    """
    if isinstance(spec, ResourceType):
        return spec
    if isinstance(spec, str):
        found = _by_url.get(spec) or _by_url.get(TYPE_URL_PREFIX + spec)
        if found is None:
            found = _by_alias.get((api_version, spec.lower()))
        if found is None:
            raise UnknownResourceTypeError(spec)
        return found
    descriptor = getattr(spec, "DESCRIPTOR", None)
    full_name = getattr(descriptor, "full_name", None)
    if not isinstance(full_name, str):
        raise UnknownResourceTypeError(spec)
    found = _by_url.get(TYPE_URL_PREFIX + full_name)
    if found is None:
        raise UnknownResourceTypeError(spec)
    return found


def resource_types() -> list[ResourceType[Any]]:
    """Every registered type, standard and custom."""
    return list(_by_url.values())


def type_url_of(spec: type[Message] | ResourceType[Any] | str) -> str:
    """The type URL of a registered class, alias or name."""
    return resource_type(spec).type_url


def message_class_of(type_url: str) -> type[Message]:
    """The message class registered for a type URL (imports its module if needed)."""
    cls: type[Message] = resource_type(type_url).message_class
    return cls


# Packages whose *_pb2 modules may be imported to resolve a name a server sent (an
# ``Any``'s type URL): the protos' own roots and the registered types' packages, never
# an arbitrary module a remote peer names.
_TRUSTED_ROOTS = frozenset({"envoy", "xds", "udpa", "validate", "google", "contrib"})
_imported_packages: set[str] = set()
_imports_lock = threading.Lock()
_log = logging.getLogger("xds_client.resources")


def message_descriptor(full_name: str) -> Descriptor | None:
    """The descriptor of message ``full_name``, importing its generated module if needed.

    xds-protos has hundreds of modules and none is imported eagerly: a name the default
    descriptor pool lacks is looked for in the ``*_pb2`` modules of the packages its
    prefixes name (``a.b.v3.Msg`` in ``a.b.v3``, then ``a.b``), under trusted roots only.
    None when no installed module defines it (asked again next time: a module the
    application imports later is found then).
    """
    pool = descriptor_pool.Default()
    try:
        return pool.FindMessageTypeByName(full_name)
    except KeyError:
        pass
    registered = _by_url.get(TYPE_URL_PREFIX + full_name)
    if registered is not None:
        return cast("Descriptor", registered.message_class.DESCRIPTOR)
    parts = full_name.split(".")
    roots = _TRUSTED_ROOTS | {r.module.split(".", 1)[0] for r in list(_by_url.values())}
    if parts[0] not in roots:
        return None
    for cut in range(len(parts) - 1, 0, -1):
        _import_package(".".join(parts[:cut]))
        try:
            return pool.FindMessageTypeByName(full_name)
        except KeyError:
            continue
    return None


def _import_package(package: str) -> None:
    with _imports_lock:
        if package in _imported_packages:
            return
        _imported_packages.add(package)
    try:
        module = importlib.import_module(package)
    except ImportError:
        return
    search = getattr(module, "__path__", None)
    if search is None:
        return
    for info in pkgutil.iter_modules(search):
        if info.name.endswith("_pb2"):
            try:
                importlib.import_module(f"{package}.{info.name}")
            except Exception as exc:  # a broken optional module must not stop the caller
                _log.debug("cannot import %s.%s: %s", package, info.name, exc)


def is_full_state(type_url: str) -> bool:
    """True when SotW responses of this type carry the whole set (LDS and CDS).

    Unknown type URLs are not full-state: absence then never deletes.
    """
    found = _by_url.get(type_url)
    return found is not None and found.full_state


def register(
    message_class: type[M],
    *,
    alias: str | None = None,
    full_state: bool = False,
    api_version: ApiVersion = "v3",
    service: str | None = None,
    method_suffix: str | None = None,
    rest_name: str | None = None,
) -> ResourceType[M]:
    """Register a custom resource type so clients can watch and decode it.

    Registering the same class twice returns the existing entry; a type URL
    or alias that is already taken by something else raises
    :class:`DuplicateResourceTypeError`.
    """
    type_url = TYPE_URL_PREFIX + message_class.DESCRIPTOR.full_name
    with _lock:
        existing = _by_url.get(type_url)
        if existing is not None:
            if existing.message_class is not message_class:
                raise DuplicateResourceTypeError(f"{type_url} is registered to another class")
            return existing
        if alias is not None and (api_version, alias) in _by_alias:
            raise DuplicateResourceTypeError(f"alias {alias!r} is taken for {api_version}")
        rtype: ResourceType[M] = ResourceType(
            type_url,
            message_class.__module__,
            api_version,
            alias,
            full_state,
            service,
            method_suffix,
            rest_name=rest_name,
            _message_class=[message_class],
        )
        _add(rtype)
        return rtype


def decode(
    any_message: AnyProto, expected: type[M] | ResourceType[M] | str | None = None
) -> Message:
    """Decode a resource carried in an ``Any``, unwrapping a ``Resource`` wrapper.

    With ``expected``, the carried type must match it, or
    :class:`TypeUrlMismatchError` names both. Raises
    :class:`ResourceDecodeError` for bytes that do not parse, including a
    heartbeat wrapper that has no body.
    """
    if any_message.type_url in (RESOURCE_WRAPPER_TYPE_URL, _V2_RESOURCE_WRAPPER_TYPE_URL):
        body = unwrap(any_message).body
        if body is None:
            raise ResourceDecodeError(any_message.type_url, "Resource wrapper has no body")
        any_message = body
    actual = any_message.type_url
    if expected is not None:
        want = resource_type(expected)
        if actual != want.type_url:
            raise TypeUrlMismatchError(want.type_url, actual)
        return want.decode(any_message.value)
    try:
        rtype = resource_type(actual)
    except UnknownResourceTypeError:
        raise ResourceDecodeError(actual, "type URL is not registered") from None
    decoded: Message = rtype.decode(any_message.value)
    return decoded


def unwrap(any_message: AnyProto) -> UnwrappedResource:
    """Split an ``Any`` into name, version, TTL and body.

    A bare resource comes back as itself with no name, version or TTL. A
    ``envoy.service.discovery.v3.Resource`` wrapper gives its name, version,
    aliases and TTL, and ``body=None`` when it is a heartbeat.
    """
    if any_message.type_url not in (RESOURCE_WRAPPER_TYPE_URL, _V2_RESOURCE_WRAPPER_TYPE_URL):
        return UnwrappedResource(None, "", None, any_message)

    try:
        wrapper = Resource.FromString(any_message.value)
    except DecodeError as exc:
        raise ResourceDecodeError(any_message.type_url, str(exc)) from exc
    ttl = None
    if wrapper.HasField("ttl"):
        ttl = wrapper.ttl.seconds + wrapper.ttl.nanos / 1e9
    body = wrapper.resource if wrapper.HasField("resource") else None
    metadata = wrapper.metadata if wrapper.HasField("metadata") else None
    return UnwrappedResource(
        wrapper.name, wrapper.version, ttl, body, tuple(wrapper.aliases), metadata
    )
