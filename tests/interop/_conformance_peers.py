"""Drivers that let the conformance checker push changes through real control planes."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from google.protobuf.message import Message

from tests.peers.go_control_plane import GoControlPlane, WithTtl
from xds_client.conformance import DriverError
from xds_client.resources import resource_type

__all__ = ["GoPeerDriver", "touched"]


def _name(message: Message) -> str:
    for field_name in ("name", "cluster_name"):
        if field_name in message.DESCRIPTOR.fields_by_name:
            return str(getattr(message, field_name))
    raise ValueError(f"{message.DESCRIPTOR.full_name} has no name")


def touched(message: Message, count: int) -> Message:
    """A copy of ``message`` that differs in a field no client acts on (a new hash)."""
    copy = type(message).FromString(message.SerializeToString())
    if "metadata" in copy.DESCRIPTOR.fields_by_name:
        copy.metadata.filter_metadata["xds-conformance"].fields["touch"].number_value = count  # type: ignore[attr-defined]
    elif copy.DESCRIPTOR.full_name == "envoy.config.endpoint.v3.ClusterLoadAssignment":
        copy.policy.overprovisioning_factor.value = 140 + count  # type: ignore[attr-defined]
    else:
        raise ValueError(f"cannot touch a {copy.DESCRIPTOR.full_name}")
    return copy


class GoPeerDriver:
    """Changes what the go-control-plane peer serves to one node.

    The snapshot cache gets a whole new snapshot (a new version) per change; the
    type served by the peer's LinearCache is changed one resource at a time.
    """

    def __init__(
        self,
        peer: GoControlPlane,
        node_id: str,
        resources: Mapping[str, Sequence[Message | WithTtl]],
    ) -> None:
        self._peer = peer
        self._node_id = node_id
        self._lock = threading.Lock()
        self._model: dict[str, dict[str, Message | WithTtl]] = {
            type_url: {_name(r.resource if isinstance(r, WithTtl) else r): r for r in items}
            for type_url, items in resources.items()
        }
        self._deleted: dict[tuple[str, str], Message | WithTtl] = {}
        self._count = 1
        self._publish()

    def _publish(self) -> None:
        snapshot = {
            t: list(items.values())
            for t, items in self._model.items()
            if t != self._peer.linear_type
        }
        self._peer.set_snapshot(self._node_id, snapshot, str(self._count))
        for item in self._model.get(self._peer.linear_type or "", {}).values():
            assert not isinstance(item, WithTtl)
            self._peer.upsert(item)

    def update(self, type_url: str, name: str) -> None:
        with self._lock:
            current = self._deleted.pop((type_url, name), None) or self._model[type_url].get(name)
            if current is None:
                raise DriverError(f"the peer serves no {type_url} named {name!r}")
            self._count += 1
            body = current.resource if isinstance(current, WithTtl) else current
            changed = touched(body, self._count)
            self._model[type_url][name] = (
                WithTtl(changed, current.ttl) if isinstance(current, WithTtl) else changed
            )
            if type_url == self._peer.linear_type:
                self._peer.upsert(changed)
            else:
                self._publish()

    def delete(self, type_url: str, name: str) -> None:
        with self._lock:
            gone = self._model[type_url].pop(name, None)
            if gone is not None:
                self._deleted[(type_url, name)] = gone
            self._count += 1
            if type_url == self._peer.linear_type:
                self._peer.remove(name)
            else:
                self._publish()


def type_urls(*aliases: str) -> list[str]:
    return [resource_type(a).type_url for a in aliases]
