"""Incremental (delta) xDS: the client sends subscription diffs, the server sends changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xds_client.errors import ResourceError

from ._base import ProtocolCore, TypeState
from ._config import ProtocolConfig
from ._events import Event, ResourceDoesNotExist
from ._subscriptions import WILDCARD
from ._validation import RESPONSE_KEY, validate

if TYPE_CHECKING:
    from envoy.service.discovery.v3.discovery_pb2 import (
        DeltaDiscoveryRequest,
        DeltaDiscoveryResponse,
        Resource,
    )
    from google.protobuf.message import Message

__all__ = ["DeltaProtocol"]


@dataclass(slots=True)
class _Stream:
    """What this stream has told the server about one type."""

    server_names: set[str] = field(default_factory=set)  # as the server sees it ("*" included)
    add: dict[str, None] = field(default_factory=dict)  # to subscribe on the next request
    remove: dict[str, None] = field(default_factory=dict)  # to unsubscribe on the next request


class DeltaProtocol(ProtocolCore):
    """Sans-I/O state of one delta (incremental) xDS stream.

    Same shape as :class:`SotwProtocol`: subscription changes, stream events,
    responses and ``now`` in; requests and events out. Subscription changes
    between two sends are coalesced into one diff per type.
    """

    def __init__(self, config: ProtocolConfig) -> None:
        super().__init__(config)
        self._streams_state: dict[str, _Stream] = {}

    # ----------------------------------------------------------------- framing

    def _stream(self, st: TypeState) -> _Stream:
        ss = self._streams_state.get(st.type_url)
        if ss is None:
            ss = self._streams_state[st.type_url] = _Stream()
        return ss

    def _reset_stream(self, st: TypeState) -> None:
        self._streams_state[st.type_url] = _Stream()

    def _on_subscribed(self, st: TypeState, added: list[str], wildcard: bool) -> None:
        if not st.initial_sent:
            return  # the first request of the stream sends the whole set
        ss = self._stream(st)
        for name in (WILDCARD, *added) if wildcard else added:
            # Remove-then-add must re-subscribe: the server forgets the name on
            # unsubscribe and has to send it again (Envoy's RemoveThenAdd).
            was_removed = name in ss.remove
            ss.remove.pop(name, None)
            if was_removed or name not in ss.server_names:
                ss.add[name] = None

    def _on_unsubscribed(self, st: TypeState, removed: list[str], wildcard: bool) -> None:
        if not st.initial_sent:
            return
        ss = self._stream(st)
        for name in (WILDCARD, *removed) if wildcard else removed:
            ss.add.pop(name, None)
            if name in ss.server_names:
                ss.remove[name] = None

    def requests_to_send(self) -> list[DeltaDiscoveryRequest]:
        """Drain the requests owed to the server, in order.

        First one ACK or NACK per response received (``response_nonce``, plus
        ``error_detail`` for a NACK, nothing else), then per type either the
        stream's first request (the whole subscription, and on a reconnected
        stream ``initial_resource_versions``) or the coalesced diff, which
        carries no nonce. Empty while disconnected.
        """
        from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryRequest

        if not self._connected:
            return []
        out: list[DeltaDiscoveryRequest] = []
        replies, self._replies = self._replies, []
        for reply in replies:
            request = DeltaDiscoveryRequest(type_url=reply.type_url, response_nonce=reply.nonce)
            if reply.error is not None:
                request.error_detail.CopyFrom(reply.error)
            self._with_node(request)
            out.append(request)
        for st in self._types.values():
            ss = self._stream(st)
            if not st.initial_sent:
                if not st.subs.active:
                    continue
                request = DeltaDiscoveryRequest(type_url=st.type_url)
                names = [WILDCARD, *st.subs.names] if st.subs.wildcard else list(st.subs.names)
                request.resource_names_subscribe.extend(names)
                if self._streams > 1:
                    # Reconnected: tell the server what we hold so it sends only changes.
                    versions = request.initial_resource_versions
                    for name, entry in st.cache.entries.items():
                        versions[name] = entry.resource_version
                ss.server_names = set(names)
                ss.add.clear()
                ss.remove.clear()
                st.initial_sent = True
            else:
                if not ss.add and not ss.remove:
                    continue
                request = DeltaDiscoveryRequest(type_url=st.type_url)
                request.resource_names_subscribe.extend(ss.add)
                request.resource_names_unsubscribe.extend(ss.remove)
                ss.server_names.update(ss.add)
                ss.server_names.difference_update(ss.remove)
                ss.add.clear()
                ss.remove.clear()
            self._with_node(request)
            out.append(request)
        return out

    def request_sent(self, request: DeltaDiscoveryRequest, now: float) -> None:
        """The driver put ``request`` on the wire: start does-not-exist timers for it."""
        st = self._types.get(request.type_url)
        if st is not None:
            self._start_dne_timers(st, request.resource_names_subscribe, now)

    # ----------------------------------------------------------------- responses

    def receive(self, response: DeltaDiscoveryResponse, now: float) -> list[Event]:
        """Apply a response; queues exactly one ACK or NACK and returns the events.

        A response of a type with nothing subscribed is ignored (no ACK/NACK).
        """
        self._require_connected("receive")
        st = self._types.get(response.type_url)
        if st is None or not st.subs.active:
            return []
        events: list[Event] = []
        version = response.system_version_info
        errors: dict[str, str] = {}
        whole = self._check(st, response)
        if whole is not None:
            self._finish(
                st, nonce=response.nonce, version=version,
                errors={RESPONSE_KEY: whole}, now=now, events=events,
            )  # fmt: skip
            return events
        failed = self._apply(st, response, errors, now, events)
        self._finish(
            st, nonce=response.nonce, version=version, errors=errors, failed=failed,
            now=now, events=events,
        )  # fmt: skip
        return events

    @staticmethod
    def _check(st: TypeState, response: DeltaDiscoveryResponse) -> str | None:
        """A problem of the whole response, or None."""
        if st.rtype is None:
            return f"type URL {st.type_url} is not registered with this client"
        seen: set[str] = set()
        for index, resource in enumerate(response.resources):
            name = resource.name
            if not name:
                return f"resources[{index}] has no name"
            if name in seen:
                return f"resource name {name!r} appears more than once"
            seen.add(name)
            if resource.HasField("resource") and resource.resource.type_url != st.type_url:
                return (
                    f"resource {name!r} has type {resource.resource.type_url}, "
                    f"but the response is for {st.type_url}"
                )
        for name in response.removed_resources:
            if name in seen:
                return f"resource name {name!r} is both updated and removed"
        return None

    def _apply(
        self,
        st: TypeState,
        response: DeltaDiscoveryResponse,
        errors: dict[str, str],
        now: float,
        events: list[Event],
    ) -> list[str]:
        rtype = st.rtype
        assert rtype is not None
        validator = self.config.validators.get(st.type_url)
        subs = st.subs
        cache = st.cache
        staged: list[tuple[Resource, Message, float | None]] = []
        refreshes: list[tuple[Resource, float | None]] = []
        missing: list[str] = []
        failed: list[str] = []
        for resource in response.resources:
            name = resource.name
            aliases = tuple(resource.aliases)
            if not subs.wants(name, aliases):
                continue  # e.g. sent before our unsubscribe reached the server
            ttl = None
            if resource.HasField("ttl"):
                ttl = resource.ttl.seconds + resource.ttl.nanos / 1e9
            entry = cache.get(name)
            if not resource.HasField("resource"):
                if entry is None:
                    # Not a heartbeat of anything held: the server says it has no
                    # such resource (this is how VHDS answers an unknown alias).
                    missing.append(name)
                elif resource.version != entry.resource_version:
                    errors[name] = (
                        f"resource has no body and version {resource.version!r} differs "
                        f"from held version {entry.resource_version!r}"
                    )
                    failed.append(name)
                else:
                    refreshes.append((resource, entry.ttl if ttl is None else ttl))
                continue
            raw = resource.resource.value
            if entry is not None and entry.raw == raw:
                refreshes.append((resource, ttl))
                continue
            try:
                message = rtype.decode(raw)
            except ResourceError as exc:
                errors[name] = str(exc)
                failed.append(name)
                continue
            reason = validate(validator, message)
            if reason is not None:
                errors[name] = reason
                failed.append(name)
                continue
            staged.append((resource, message, ttl))
        if errors and self.config.reject_whole_response:
            return failed
        for resource, ttl in refreshes:
            entry = cache.get(resource.name)
            assert entry is not None
            self._refresh(
                st, entry, ttl=ttl, version=resource.version,
                resource_version=resource.version, now=now,
            )  # fmt: skip
        for resource, message, ttl in staged:
            self._store(
                st, resource.name, version=resource.version, message=message,
                raw=resource.resource.value, ttl=ttl, aliases=tuple(resource.aliases),
                resource_version=resource.version, now=now, events=events,
            )  # fmt: skip
        for name in missing:
            if name in subs.names and name not in st.dne:
                st.dne[name] = now
                self._cancel_dne(st, name)
                events.append(ResourceDoesNotExist(st.type_url, name))
        for name in response.removed_resources:
            if name in cache:
                self._delete(st, name, now, events)
            elif name in subs.ambiguous:
                subs.ambiguous.discard(name)
        return failed

    def _cancel_dne(self, st: TypeState, name: str) -> None:
        self._timers.cancel(("dne", st.type_url, name))
