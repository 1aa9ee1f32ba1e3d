"""Build the ``envoy.config.core.v3.Node`` that identifies this client to a server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from envoy.config.core.v3.base_pb2 import Node as NodeProto

from xds_client._prebuilt_dataclasses import dataclass
from xds_client._version import __version__
from xds_client.errors import UsageError

__all__ = ["CLIENT_FEATURES", "USER_AGENT_NAME", "Locality", "Node", "as_node_proto"]

USER_AGENT_NAME = "xds-client"
CLIENT_FEATURES: tuple[str, ...] = (
    # We accept envoy.service.discovery.v3.Resource wrappers in SotW responses.
    "xds.config.resource-in-sotw",
    # We honour per-resource TTLs and heartbeats.
    "xds.config.supports-resource-ttl",
)


@dataclass(frozen=True, slots=True)
class Locality:
    """Where the node runs; control planes use it for locality-aware routing."""

    region: str = ""
    zone: str = ""
    sub_zone: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """The identity a client announces in its requests.

    ``metadata`` is a JSON-like dict that becomes a ``google.protobuf.Struct``.
    ``user_agent_name``, our version and ``client_features`` are filled in for you.
    """

    id: str
    cluster: str = ""
    locality: Locality | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    client_features: Sequence[str] = CLIENT_FEATURES

    def to_proto(self) -> NodeProto:
        """The v3 ``Node`` message (v2 shares its wire format for these fields)."""

        node = NodeProto(
            id=self.id,
            cluster=self.cluster,
            user_agent_name=USER_AGENT_NAME,
            user_agent_version=__version__,
            client_features=list(self.client_features),
        )
        if self.locality is not None:
            node.locality.region = self.locality.region
            node.locality.zone = self.locality.zone
            node.locality.sub_zone = self.locality.sub_zone
        if self.metadata:
            node.metadata.update(dict(self.metadata))
        return node


_NODE_MESSAGES = ("envoy.config.core.v3.Node", "envoy.api.v2.core.Node")


def as_node_proto(node: Node | NodeProto | str | None) -> NodeProto:
    """Accept our :class:`Node`, a ready ``Node`` message, a node id, or None (anonymous).

    Anything else raises :class:`~xds_client.errors.UsageError` here, in the caller's
    thread, rather than failing later on the client's I/O thread.
    """
    if node is None:
        return Node(id="").to_proto()
    if isinstance(node, str):
        return Node(id=node).to_proto()
    if isinstance(node, Node):
        return node.to_proto()
    descriptor = getattr(node, "DESCRIPTOR", None)
    if getattr(descriptor, "full_name", None) not in _NODE_MESSAGES:
        raise UsageError(
            f"node must be a node id (str), an xds_client.Node or an Envoy Node message, "
            f"not {type(node).__name__}"
        )
    return node
