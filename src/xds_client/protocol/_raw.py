"""A wire-compatible ``DiscoveryResponse`` whose resources stay serialized.

``RawDiscoveryResponse`` has the fields of ``envoy.service.discovery.v3.DiscoveryResponse``
with the same numbers, but field 2 (``resources``) is ``repeated bytes``: parsing a
response gives each resource as the serialized bytes of its ``Any``, with no ``Any``
object. :class:`~xds_client.protocol.SotwProtocol` compares those bytes with what it
cached (a dict lookup) and parses only the resources that changed. The class is built
once, in a private descriptor pool, so it never clashes with the Envoy descriptors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "RawDiscoveryResponse",
    "parse_raw_response",
    "raw_response",
    "raw_response_class",
    "to_raw_response",
]


class RawDiscoveryResponse(Protocol):
    """What the SotW core reads from a response whose resources are raw ``Any`` bytes."""

    @property
    def version_info(self) -> str: ...
    @property
    def type_url(self) -> str: ...
    @property
    def nonce(self) -> str: ...
    @property
    def resources(self) -> Sequence[bytes]: ...
    @property
    def control_plane(self) -> bytes: ...
    @property
    def resource_errors(self) -> Sequence[bytes]: ...


_class: type[Message] | None = None


def raw_response_class() -> type[Message]:
    """The message class (built on first use); ``FromString`` parses a response's bytes."""
    global _class  # noqa: PLW0603 - built once, on first use
    if _class is None:
        fdp = descriptor_pb2.FieldDescriptorProto
        file = descriptor_pb2.FileDescriptorProto(
            name="xds_client/internal/raw_discovery.proto",
            package="xds_client.internal.raw",
            syntax="proto3",
        )
        message = file.message_type.add(name="RawDiscoveryResponse")
        for number, name, kind, label in (
            (1, "version_info", fdp.TYPE_STRING, fdp.LABEL_OPTIONAL),
            (2, "resources", fdp.TYPE_BYTES, fdp.LABEL_REPEATED),
            (3, "canary", fdp.TYPE_BOOL, fdp.LABEL_OPTIONAL),
            (4, "type_url", fdp.TYPE_STRING, fdp.LABEL_OPTIONAL),
            (5, "nonce", fdp.TYPE_STRING, fdp.LABEL_OPTIONAL),
            (6, "control_plane", fdp.TYPE_BYTES, fdp.LABEL_OPTIONAL),  # kept serialized
            (7, "resource_errors", fdp.TYPE_BYTES, fdp.LABEL_REPEATED),  # TP3, kept serialized
        ):
            message.field.add(name=name, number=number, type=kind, label=label)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file)
        descriptor = pool.FindMessageTypeByName("xds_client.internal.raw.RawDiscoveryResponse")
        _class = message_factory.GetMessageClass(descriptor)
    return _class


def parse_raw_response(data: bytes) -> RawDiscoveryResponse:
    """A response's bytes parsed with its resources left serialized (the gRPC deserializer)."""
    return cast("RawDiscoveryResponse", raw_response_class().FromString(data))


def raw_response(
    *, type_url: str, version_info: str = "", nonce: str = "", resources: Iterable[bytes] = ()
) -> RawDiscoveryResponse:
    """A raw response built from its fields; ``resources`` are serialized ``Any`` messages,
    kept byte for byte (a test can hand the core a non-canonical encoding)."""
    # The class is built at run time, so its constructor's keywords are unknown to a type
    # checker (the protobuf stubs' Message takes none): the one cast is here.
    message: Any = cast("Any", raw_response_class())(
        type_url=type_url, version_info=version_info, nonce=nonce
    )
    message.resources.extend(resources)
    return cast("RawDiscoveryResponse", message)


def to_raw_response(response: Message) -> RawDiscoveryResponse:
    """A ``DiscoveryResponse`` re-parsed as a :class:`RawDiscoveryResponse` (for tests)."""
    return parse_raw_response(response.SerializeToString())
