"""Incremental (delta) xDS: the client sends subscription diffs, the server sends changes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryRequest

from xds_client.errors import ResourceError
from xds_client.resources import ResourceType

from ._base import ProtocolCore, TypeState, control_plane_id
from ._events import Event
from ._subscriptions import WILDCARD
from ._validation import RESPONSE_KEY, resource_check, twin_type_url

if TYPE_CHECKING:
    from envoy.service.discovery.v3.discovery_pb2 import (
        DeltaDiscoveryResponse,
        Resource,
    )
    from google.protobuf.message import Message

__all__ = ["DeltaProtocol"]


class _Stream:
    """What this stream has told the server about one type."""

    __slots__ = ("add", "remove", "server_names")

    def __init__(self) -> None:
        self.server_names: set[str] = set()  # as the server sees it ("*" included)
        self.add: dict[str, None] = {}  # to subscribe on the next request
        self.remove: dict[str, None] = {}  # to unsubscribe on the next request


class DeltaProtocol(ProtocolCore[_Stream]):
    """Sans-I/O state of one delta (incremental) xDS stream.

    Same shape as :class:`SotwProtocol`: subscription changes, stream events,
    responses and ``now`` in; requests and events out. Subscription changes
    between two sends are coalesced into one diff per type.
    """

    # ----------------------------------------------------------------- framing

    def _new_stream(self) -> _Stream:
        return _Stream()

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
        if not self._connected:
            return []
        out = self.replies_to_send()
        for st in self._types.values():
            ss = self._stream(st)
            if not st.initial_sent:
                if not st.subs.active:
                    continue
                request = DeltaDiscoveryRequest(type_url=st.type_url)
                names = [WILDCARD, *st.subs.names] if st.subs.wildcard else list(st.subs.names)
                request.resource_names_subscribe.extend(names)
                if (self._streams > 1 or st.type_url in self._restored) and not st.foreign_versions:
                    # Reconnected (or restored from disk) to the server that gave these
                    # versions: tell it what we hold so it sends only changes.
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

    def replies_to_send(self) -> list[DeltaDiscoveryRequest]:
        """Drain only the ACKs and NACKs owed (the head of :meth:`requests_to_send`).

        A delta ACK carries a nonce and nothing else, so the reader of a stream may
        send it at once, whatever subscription diffs are still to go. Empty while
        disconnected.
        """
        if not self._connected or not self._replies:
            return []
        new = DeltaDiscoveryRequest
        out: list[DeltaDiscoveryRequest] = []
        replies, self._replies = self._replies, []
        for reply in replies:
            request = new(type_url=reply.type_url, response_nonce=reply.nonce)
            if reply.error is not None:
                request.error_detail.CopyFrom(reply.error)
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
        if not self._connected:
            self._require_connected("receive")
        st = self._types.get(response.type_url)
        if st is None or not st.subs.active:
            return []
        resources = response.resources
        if (
            len(resources) == 1
            and not len(response.removed_resources)
            and not len(response.removed_resource_names)
            and not len(response.resource_errors)
        ):  # fmt: skip
            events = self._receive_one(st, response, resources[0], now)
            if events is not None:
                return events
        return self._receive_any(st, response, now)

    def _receive_one(
        self, st: TypeState, response: DeltaDiscoveryResponse, resource: Resource, now: float
    ) -> list[Event] | None:
        """The common response, one resource with a body and nothing removed, applied
        with the same outcome as :meth:`_receive_any` at a fraction of its upb reads.

        Returns None, having changed nothing, for anything else (a resource with no
        name or no body, a TTL, a body of another type, an unknown type): the general
        path decides those.
        """
        rtype = st.rtype
        name = resource.name
        if rtype is None or not name or not resource.HasField("resource"):
            return None
        body = resource.resource
        type_url = st.type_url
        if body.type_url != type_url and body.type_url != twin_type_url(type_url):
            return None
        if resource.HasField("ttl"):
            return None
        aliases = tuple(resource.aliases) if len(resource.aliases) else ()
        events: list[Event] = []
        errors: dict[str, str] = {}
        failed: tuple[str, ...] = ()
        plane = response.control_plane.identifier if response.HasField("control_plane") else ""
        wanted = st.subs.wants(name, aliases)
        if wanted:  # else: sent before our unsubscribe reached it
            entry = st.cache.get(name)
            rversion = resource.version
            raw = body.value
            if entry is not None and entry.raw == raw:
                self._refresh(st, entry, ttl=None, version=rversion, resource_version=rversion,
                              now=now, events=events, announced=rversion,
                              control_plane=plane)  # fmt: skip
            else:
                reason: str | None
                try:
                    message = rtype.decode(raw)
                except ResourceError as exc:
                    reason = str(exc)
                else:
                    check = resource_check(self.config, type_url, now)
                    plain = type(rtype).decode is ResourceType.decode
                    reason = None if check is None else check(message, raw if plain else None)
                    if check is not None and check.fresh:
                        message = rtype.decode(raw)  # the check grew its arena: keep a new one
                if reason is not None:
                    errors[name] = reason
                    failed = (name,)
                else:
                    metadata = resource.metadata if resource.HasField("metadata") else None
                    self._store(
                        st, name, rversion, message, raw, None, aliases, rversion, metadata,
                        plane, now, events,
                    )  # fmt: skip
        self._finish(
            st, nonce=response.nonce, version=response.system_version_info, errors=errors,
            failed=failed, now=now, events=events, control_plane=plane,
            valid=int(wanted and not errors),
        )  # fmt: skip
        return events

    def _receive_any(
        self, st: TypeState, response: DeltaDiscoveryResponse, now: float
    ) -> list[Event]:
        events: list[Event] = []
        version = response.system_version_info
        nonce = response.nonce
        errors: dict[str, str] = {}
        removed: Iterable[str] = response.removed_resources
        if len(response.removed_resource_names):  # TP2's form of the same list
            removed = [*removed, *(r.name for r in response.removed_resource_names)]
        whole, parsed = self._check(st, response.resources, removed)
        if whole is not None:
            self._finish(
                st, nonce=nonce, version=version,
                errors={RESPONSE_KEY: whole}, now=now, events=events,
                control_plane=control_plane_id(response), invalid=len(response.resources),
            )  # fmt: skip
            return events
        plane = control_plane_id(response)
        failed, valid = self._apply(st, parsed, removed, errors, now, events, plane)
        if len(response.resource_errors) and not (errors and self.config.reject_whole_response):
            self._resource_errors(st, response.resource_errors, version, now, events)
        self._finish(
            st, nonce=nonce, version=version, errors=errors, failed=failed,
            now=now, events=events, control_plane=plane, valid=valid,
        )  # fmt: skip
        return events

    @staticmethod
    def _check(
        st: TypeState, resources: Iterable[Resource], removed: Iterable[str]
    ) -> tuple[str | None, list[tuple[str, Resource, Any | None]]]:
        """A problem of the whole response (or None), and each resource with its
        name and body (None when absent), read once for :meth:`_apply`."""
        if st.rtype is None:
            return f"type URL {st.type_url} is not registered with this client", []
        type_url = st.type_url
        twin = twin_type_url(type_url)  # A30: the other API version's URL is accepted
        parsed: list[tuple[str, Resource, Any | None]] = []
        seen: set[str] = set()
        for index, resource in enumerate(resources):
            name = resource.name
            if not name and resource.HasField("resource_name"):
                name = resource.resource_name.name  # TP2 servers name it here
            if not name:
                return f"resources[{index}] has no name", []
            if name in seen:
                return f"resource name {name!r} appears more than once", []
            seen.add(name)
            body = resource.resource if resource.HasField("resource") else None
            if body is not None and body.type_url not in (type_url, twin):
                return (
                    f"resource {name!r} has type {body.type_url}, "
                    f"but the response is for {type_url}"
                ), []
            parsed.append((name, resource, body))
        gone: set[str] = set()
        for name in removed:
            if name in seen:
                return f"resource name {name!r} is both updated and removed", []
            if name in gone:
                return f"resource name {name!r} is removed more than once", []
            gone.add(name)
        return None, parsed

    def _apply(  # noqa: PLR0917 - internal, one call per response
        self,
        st: TypeState,
        parsed: list[tuple[str, Resource, Any | None]],
        removed: Iterable[str],
        errors: dict[str, str],
        now: float,
        events: list[Event],
        control_plane: str = "",
    ) -> tuple[list[str], int]:
        """Apply the resources and removals; returns the names that failed and how many
        wanted resources were valid, unchanged ones included (gRFC A78 counts them)."""
        rtype = st.rtype
        assert rtype is not None
        check = resource_check(self.config, st.type_url, now)
        plain = type(rtype).decode is ResourceType.decode  # bytes parsed by the class itself
        subs = st.subs
        cache = st.cache
        # (name, version, message, raw, ttl, aliases, metadata) per changed resource.
        staged: list[
            tuple[str, str, Message, bytes, float | None, tuple[str, ...], Message | None]
        ] = []
        refreshes: list[tuple[str, str, float | None]] = []
        missing: list[str] = []
        failed: list[str] = []
        for name, resource, body in parsed:
            aliases = tuple(resource.aliases) if len(resource.aliases) else ()
            if not subs.wants(name, aliases):
                continue  # e.g. sent before our unsubscribe reached the server
            ttl = None
            if resource.HasField("ttl"):
                ttl = resource.ttl.seconds + resource.ttl.nanos / 1e9
                if ttl < 0:
                    errors[name] = f"ttl {ttl:g}s is negative"
                    failed.append(name)
                    continue
            entry = cache.get(name)
            rversion = resource.version
            if body is None:
                if entry is None:
                    # Not a heartbeat of anything held: the server says it has no
                    # such resource (this is how VHDS answers an unknown alias).
                    missing.append(name)
                elif rversion != entry.resource_version:
                    errors[name] = (
                        f"resource has no body and version {rversion!r} differs "
                        f"from held version {entry.resource_version!r}"
                    )
                    failed.append(name)
                else:
                    refreshes.append((name, rversion, ttl))  # no TTL: the timer is removed
                continue
            raw = body.value
            if entry is not None and entry.raw == raw:
                refreshes.append((name, rversion, ttl))
                continue
            try:
                message = rtype.decode(raw)
            except ResourceError as exc:
                errors[name] = str(exc)
                failed.append(name)
                continue
            if check is not None:
                reason = check(message, raw if plain else None)
                if reason is not None:
                    errors[name] = reason
                    failed.append(name)
                    continue
                if check.fresh:
                    message = rtype.decode(raw)  # the check grew its arena: keep a new one
            metadata: Message | None = resource.metadata if resource.HasField("metadata") else None
            staged.append((name, rversion, message, raw, ttl, aliases, metadata))
        valid = len(staged) + len(refreshes)
        if errors and self.config.reject_whole_response:
            return failed, valid
        for name, rversion, ttl in refreshes:
            entry = cache.get(name)
            assert entry is not None
            self._refresh(
                st, entry, ttl=ttl, version=rversion, resource_version=rversion, now=now,
                events=events, announced=rversion, control_plane=control_plane,
            )  # fmt: skip
        for name, rversion, message, raw, ttl, aliases, metadata in staged:
            self._store(
                st, name, rversion, message, raw, ttl, aliases, rversion, metadata,
                control_plane, now, events,
            )  # fmt: skip
        for name in missing:
            self._absent(st, name, now, events)
        for name in removed:
            if name in cache:
                self._delete(st, name, now, events)
            else:
                # Subscribed, never received, and the server says it has none: it
                # does not exist now, not after the timer (or never, with no timer).
                self._absent(st, name, now, events)
        return failed, valid
