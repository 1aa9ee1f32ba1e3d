"""The resource type registry: lookups both ways, decoding, wrappers, custom types."""

from __future__ import annotations

import subprocess
import sys

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.service.discovery.v3.discovery_pb2 import Resource
from google.protobuf import duration_pb2
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Struct
from google.protobuf.wrappers_pb2 import StringValue

from xds_client import resources
from xds_client.errors import (
    DuplicateResourceTypeError,
    ResourceDecodeError,
    TypeUrlMismatchError,
    UnknownResourceTypeError,
)
from xds_client.resources import ResourceType, resource_type

STANDARD = [rt for rt in resources.resource_types() if rt.module.startswith("envoy.")]


def _sample(rtype: ResourceType[Message]) -> AnyProto:
    """A real message of the type with one field set, packed in an Any."""
    message = rtype.message_class()
    message.MergeFromString(b"\n\x06sample")  # field 1 is the name in every standard type
    packed = AnyProto()
    packed.Pack(message)
    return packed


def test_standard_types_cover_v3_and_v2() -> None:
    v3 = {rt.alias for rt in STANDARD if rt.api_version == "v3"}
    v2 = {rt.alias for rt in STANDARD if rt.api_version == "v2"}
    assert v3 == set(resources.ALIASES)
    assert v2 == set(resources.ALIASES) - {"ecds"}


@pytest.mark.parametrize("rtype", STANDARD, ids=lambda rt: rt.type_url.rsplit("/", 1)[1])
def test_every_type_round_trips_class_url_class(rtype: ResourceType[Message]) -> None:
    cls = rtype.message_class
    assert resource_type(cls) is rtype
    assert resources.type_url_of(cls) == rtype.type_url
    assert resources.message_class_of(rtype.type_url) is cls
    assert resource_type(rtype.message_name) is rtype
    assert resource_type(rtype.alias or "", rtype.api_version) is rtype


@pytest.mark.parametrize("rtype", STANDARD, ids=lambda rt: rt.type_url.rsplit("/", 1)[1])
def test_every_type_decodes_a_real_packed_message(rtype: ResourceType[Message]) -> None:
    packed = _sample(rtype)
    assert packed.type_url == rtype.type_url
    decoded = resources.decode(packed, rtype.message_class)
    assert isinstance(decoded, rtype.message_class)
    assert decoded.SerializeToString() == packed.value
    assert resources.decode(packed) == decoded


def test_aliases_resolve_per_api_version() -> None:
    assert resource_type("cds").type_url == resources.CLUSTER
    assert resource_type("CDS", "v2").type_url == resources.V2_CLUSTER
    assert resource_type("lds").full_state
    assert resource_type("cds").full_state
    assert not resource_type("eds").full_state
    assert not resource_type("rds").full_state


def test_full_state_types() -> None:
    full = {rt.type_url for rt in resources.resource_types() if rt.full_state}
    assert full == {
        resources.LISTENER,
        resources.CLUSTER,
        resources.V2_LISTENER,
        resources.V2_CLUSTER,
    }
    assert resources.is_full_state(resources.CLUSTER)
    assert not resources.is_full_state("type.googleapis.com/unknown.Thing")


def test_wrong_type_url_raises_the_specific_error_naming_both() -> None:
    packed = AnyProto()
    packed.Pack(Listener(name="l"))
    with pytest.raises(TypeUrlMismatchError) as info:
        resources.decode(packed, Cluster)
    assert info.value.expected == resources.CLUSTER
    assert info.value.actual == resources.LISTENER
    assert "Cluster" in str(info.value)
    assert "Listener" in str(info.value)


def test_unknown_type_is_a_clear_usage_error() -> None:
    with pytest.raises(UnknownResourceTypeError, match="nope"):
        resource_type("nope")
    with pytest.raises(UnknownResourceTypeError):
        resource_type(StringValue)


def test_undecodable_bytes_raise_resource_decode_error() -> None:
    packed = AnyProto(type_url=resources.CLUSTER, value=b"\xff\xff\xff")
    with pytest.raises(ResourceDecodeError, match=r"envoy\.config\.cluster\.v3\.Cluster"):
        resources.decode(packed, Cluster)


def test_unknown_type_url_in_any_cannot_be_decoded() -> None:
    packed = AnyProto(type_url="type.googleapis.com/not.Registered", value=b"")
    with pytest.raises(ResourceDecodeError, match="not registered"):
        resources.decode(packed)


def _wrap(body: AnyProto | None, *, ttl: float | None = None) -> AnyProto:
    wrapper = Resource(name="c1", version="7", aliases=["alias-a"])
    if body is not None:
        wrapper.resource.CopyFrom(body)
    if ttl is not None:
        wrapper.ttl.CopyFrom(duration_pb2.Duration(seconds=int(ttl), nanos=500_000_000))
    packed = AnyProto()
    packed.Pack(wrapper)
    return packed


def test_resource_wrapper_unwraps_name_version_ttl_and_body() -> None:
    body = AnyProto()
    body.Pack(Cluster(name="c1"))
    unwrapped = resources.unwrap(_wrap(body, ttl=2))
    assert unwrapped.name == "c1"
    assert unwrapped.version == "7"
    assert unwrapped.ttl == pytest.approx(2.5)
    assert unwrapped.aliases == ("alias-a",)
    assert unwrapped.body == body
    assert resources.decode(_wrap(body), Cluster) == Cluster(name="c1")


def test_heartbeat_wrapper_has_no_body_and_no_ttl_when_unset() -> None:
    unwrapped = resources.unwrap(_wrap(None))
    assert unwrapped.body is None
    assert unwrapped.ttl is None
    with pytest.raises(ResourceDecodeError, match="no body"):
        resources.decode(_wrap(None))


def test_bare_resource_unwraps_to_itself() -> None:
    body = AnyProto()
    body.Pack(Cluster(name="c1"))
    assert resources.unwrap(body) == resources.UnwrappedResource(None, "", None, body)


def test_method_and_rest_paths() -> None:
    cds = resource_type("cds")
    assert cds.stream_method == "/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters"
    assert cds.delta_method == "/envoy.service.cluster.v3.ClusterDiscoveryService/DeltaClusters"
    assert cds.fetch_method == "/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters"
    assert cds.rest_path == "/v3/discovery:clusters"
    assert resource_type("lds", "v2").rest_path == "/v2/discovery:listeners"
    assert resource_type("lds", "v2").fetch_method == (
        "/envoy.api.v2.ListenerDiscoveryService/FetchListeners"
    )
    vhds = resource_type("vhds")
    assert vhds.stream_method is None
    assert vhds.fetch_method is None
    assert vhds.rest_path is None
    assert vhds.delta_method == (
        "/envoy.service.route.v3.VirtualHostDiscoveryService/DeltaVirtualHosts"
    )


def test_methods_exist_in_the_real_service_descriptors() -> None:
    """Every path we build names a method that xds-protos' service descriptors define."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    for rtype in STANDARD:
        for path in (rtype.stream_method, rtype.delta_method, rtype.fetch_method):
            if path is None:
                continue
            service, method = path.strip("/").split("/")
            module = {
                "envoy.service.listener.v3": "envoy.service.listener.v3.lds_pb2",
                "envoy.service.route.v3": "envoy.service.route.v3.rds_pb2",
                "envoy.service.cluster.v3": "envoy.service.cluster.v3.cds_pb2",
                "envoy.service.endpoint.v3": "envoy.service.endpoint.v3.eds_pb2",
                "envoy.service.secret.v3": "envoy.service.secret.v3.sds_pb2",
                "envoy.service.runtime.v3": "envoy.service.runtime.v3.rtds_pb2",
                "envoy.service.extension.v3": "envoy.service.extension.v3.config_discovery_pb2",
                "envoy.api.v2": "envoy.api.v2.lds_pb2 envoy.api.v2.rds_pb2 envoy.api.v2.srds_pb2 "
                "envoy.api.v2.cds_pb2 envoy.api.v2.eds_pb2",
                "envoy.service.discovery.v2": "envoy.service.discovery.v2.sds_pb2 "
                "envoy.service.discovery.v2.rtds_pb2",
            }[service.rsplit(".", 1)[0]]
            for name in module.split():
                __import__(name)
            if service.endswith("ScopedRoutesDiscoveryService") and "v3" in service:
                __import__("envoy.service.route.v3.srds_pb2")
            assert pool.FindServiceByName(service).methods_by_name[method]


def test_register_custom_type() -> None:
    rtype = resources.register(Struct, alias="struct-test")
    assert rtype.type_url == "type.googleapis.com/google.protobuf.Struct"
    assert resource_type(Struct) is rtype
    assert resource_type("struct-test") is rtype
    assert resources.register(Struct) is rtype  # idempotent for the same class
    packed = AnyProto()
    packed.Pack(Struct())
    assert resources.decode(packed, "struct-test") == Struct()
    with pytest.raises(DuplicateResourceTypeError):
        resources.register(StringValue, alias="struct-test")


def test_import_is_lazy() -> None:
    """Importing xds_client loads no Envoy resource module; first use does."""
    code = (
        "import sys, xds_client\n"
        "assert not [m for m in sys.modules if m.startswith('envoy.config')], 'eager'\n"
        "from xds_client import resource_type\n"
        "rt = resource_type('cds')\n"
        "assert 'envoy.config.cluster.v3.cluster_pb2' not in sys.modules\n"
        "rt.message_class\n"
        "assert 'envoy.config.cluster.v3.cluster_pb2' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
