"""Sans-I/O pieces shared by both clients: request building, response checks, the pager."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from xds_client.errors import UsageError
from xds_client.store import _dialect
from xds_client.store._dialect import Dialect, ListSource
from xds_client.store._errors import InvalidResponseError, check_result, message_too_large
from xds_client.store._keys import ResourceKey, StoredObject, Value, encode_value, labels_of
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._selector import Requirement, fields_match, matches
from xds_client.transport._base import ChannelCredentialsConfig, ServerTarget

__all__ = ["ListPage", "ListPager"]

DEFAULT_PAGE_SIZE = 500

WirePage = tuple[list[StoredObject] | None, Sequence[Any] | None]
"""A checked page for an iterator: filtered objects, or the wire items to build them from."""


def _error(resp: Any) -> pb.ErrorResult | None:
    return resp.error if resp.HasField("error") else None


# ------------------------------------------------------------------ unary calls


def create_request(key: ResourceKey, value: Value) -> pb.CreateRequest:
    return pb.CreateRequest(key=key.to_proto(), value=encode_value(key, value))


def create_result(resp: pb.CreateResponse, trailing: Sequence[Any] | None) -> int:
    check_result(_error(resp), trailing)
    if resp.resource_version <= 0:
        raise InvalidResponseError("create succeeded without a resource version")
    return resp.resource_version


def update_request(key: ResourceKey, value: Value, resource_version: int) -> pb.UpdateRequest:
    return pb.UpdateRequest(
        key=key.to_proto(), value=encode_value(key, value), resource_version=resource_version
    )


def update_result(resp: pb.UpdateResponse, trailing: Sequence[Any] | None) -> int:
    check_result(_error(resp), trailing)
    if resp.resource_version <= 0:
        # Grafana reports some failed updates as an empty success.
        raise InvalidResponseError("update succeeded with resource version 0; nothing was saved")
    return resp.resource_version


def delete_request(key: ResourceKey, resource_version: int, uid: str) -> pb.DeleteRequest:
    return pb.DeleteRequest(key=key.to_proto(), resource_version=resource_version, uid=uid)


def delete_result(resp: pb.DeleteResponse, trailing: Sequence[Any] | None) -> int:
    check_result(_error(resp), trailing)
    return resp.resource_version


def read_request(
    key: ResourceKey, resource_version: int, dialect: Dialect = Dialect.GRAFANA
) -> pb.ReadRequest:
    return _dialect.read_request(key.to_proto(), resource_version, dialect)


def read_result(
    key: ResourceKey, resp: pb.ReadResponse, trailing: Sequence[Any] | None
) -> StoredObject:
    check_result(_error(resp), trailing)
    if resp.resource_version <= 0:
        raise InvalidResponseError(f"read of {key} returned no resource version")
    return StoredObject(resp.resource_version, resp.value, key=key)


def health_request() -> pb.HealthCheckRequest:
    return pb.HealthCheckRequest(service="resource.ResourceStore")


def health_status(resp: pb.HealthCheckResponse) -> str:
    """The reported status by name: ``SERVING``, ``NOT_SERVING``, ``UNKNOWN`` ..."""
    return str(pb.HealthCheckResponse.ServingStatus.Name(resp.status))


def modify(current: StoredObject, fn: Any) -> Value:
    """Apply a read-modify-write function to a fresh copy of the decoded object."""
    result = fn(json.loads(current.value))
    if not isinstance(result, bytes | dict):
        raise TypeError("read_modify_write's function must return a dict or bytes")
    return result


# ------------------------------------------------------------------ list


@dataclasses.dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list: items, the token of the next page, the list's version."""

    items: list[StoredObject]
    """The objects on this page (already filtered by the label selector)."""
    next_page_token: str
    """Opaque token of the next page; empty on the last page."""
    resource_version: int
    """The resource version the whole list is pinned to."""
    remaining_item_count: int
    """The server's estimate of items after this page (0 when unknown)."""

    def __repr__(self) -> str:
        return (
            f"ListPage({len(self.items)} items, resource_version={self.resource_version}, "
            f"next_page_token={self.next_page_token!r})"
        )


class ListPager:
    """The state of a paged list.

    Every page repeats the first request with only ``next_page_token`` changed,
    follows the token until it is empty (a short or even empty page may still
    carry one) and applies the label selector again on the client.
    """

    __slots__ = (
        "_base",
        "_fields",
        "_prefix",
        "_reqs",
        "done",
        "pages",
        "resource_version",
        "token",
    )

    def __init__(
        self,
        prefix: ResourceKey,
        requirements: tuple[Requirement, ...],
        *,
        limit: int = DEFAULT_PAGE_SIZE,
        resource_version: int = 0,
        exact: bool = False,
        token: str = "",
        dialect: Dialect = Dialect.GRAFANA,
        source: ListSource | str = ListSource.STORE,
        fields: tuple[Requirement, ...] = (),
    ) -> None:
        self._prefix = prefix
        self._reqs = requirements
        self._fields = fields
        # A history list names its object; every other list takes a prefix.
        wire_key = prefix if source in (ListSource.HISTORY, "history") else prefix.prefix()
        self._base = pb.ListRequest(
            limit=limit,
            resource_version=resource_version,
            options=pb.ListOptions(
                key=wire_key.to_proto(),
                labels=[r.to_proto() for r in requirements],
                fields=[r.to_proto() for r in fields],
            ),
        )
        _dialect.set_version_match(self._base, resource_version, exact=exact, dialect=dialect)
        _dialect.set_source(self._base, source, dialect)
        self.token = token
        """The token the next request will carry."""
        self.resource_version = 0
        """The list's resource version, known after the first page."""
        self.done = False
        """True once a page without a next token arrived."""
        self.pages = 0
        """How many pages have been received."""

    def request(self) -> pb.ListRequest:
        """The request of the next page."""
        if not self.token:
            return self._base
        req = pb.ListRequest()
        req.CopyFrom(self._base)
        req.next_page_token = self.token
        if req.resource_version and self.resource_version:
            # The version the token continues (a "not older than" list is pinned to a
            # newer one): Grafana refuses a token with any other version.
            req.resource_version = self.resource_version
        return req

    def halve_limit(self) -> bool:
        """Ask for half as many items per page from now on; False when already at one.

        For a page over the message limit: Grafana ends a page once its values
        reach 2 MiB, checked before it adds the next item, so one page of large
        objects can exceed 4 MiB.
        """
        limit = self._base.limit or DEFAULT_PAGE_SIZE
        if limit <= 1:
            return False
        self._base.limit = limit // 2
        return True

    def on_page(self, resp: pb.ListResponse, trailing: Sequence[Any] | None) -> ListPage:
        """Check a page, advance the token and return the (filtered) items."""
        check_result(_error(resp), trailing)
        self.pages += 1
        if self.resource_version == 0:
            self.resource_version = resp.resource_version
        prefix, reqs = self._prefix, self._reqs
        # Positional arguments: this runs once per listed item.
        items = [StoredObject(w.resource_version, w.value, None, prefix) for w in resp.items]
        if reqs:
            items = [o for o in items if matches(reqs, labels_of(o.json()))]
        if self._fields:
            items = [o for o in items if fields_match(self._fields, o.json())]
        self.token = resp.next_page_token
        self.done = not self.token
        return ListPage(items, self.token, resp.resource_version, resp.remaining_item_count)

    def on_page_wire(self, resp: pb.ListResponse, trailing: Sequence[Any] | None) -> WirePage:
        """Like :meth:`on_page`, for a list iterator that builds the objects itself.

        ``(objects, None)`` with a client-side filter; ``(None, resp.items)`` without
        one: the iterator then makes each :class:`StoredObject` in its own loop as
        it hands it out (one generator frame per item instead of two), so one that
        is dropped at once never outlives a garbage collection.
        """
        if self._reqs or self._fields:
            return self.on_page(resp, trailing).items, None
        check_result(_error(resp), trailing)
        self.pages += 1
        if self.resource_version == 0:
            self.resource_version = resp.resource_version
        self.token = resp.next_page_token
        self.done = not self.token
        return None, resp.items

    @property
    def prefix(self) -> ResourceKey:
        """The listed prefix (listed objects take their group and resource from it)."""
        return self._prefix


# ------------------------------------------------------------------ message sizes

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""gRPC's default limit of a received message, which Grafana also keeps."""

_SIZE_OPTIONS = ("grpc.max_receive_message_length", "grpc.max_send_message_length")


def channel_options(
    options: Sequence[tuple[str, Any]], max_message_size: int
) -> list[tuple[str, Any]]:
    """The caller's channel options plus the size limits (the caller's own win)."""
    if max_message_size <= 0:
        raise UsageError(f"max_message_size must be positive, got {max_message_size}")
    out = list(options)
    given = {name for name, _ in out}
    out.extend((name, max_message_size) for name in _SIZE_OPTIONS if name not in given)
    return out


def store_target(
    target: str | ServerTarget,
    credentials: object,
    options: Sequence[tuple[str, Any]],
    max_message_size: int,
) -> ServerTarget:
    """The :class:`ServerTarget` a store client opens its channel to.

    The same vocabulary as the xDS clients: a ``"host:port"`` string becomes a
    target; ``credentials`` of type :class:`ChannelCredentialsConfig` become its
    TLS settings (ready-made ``grpc.ChannelCredentials`` are passed to
    ``open_channel`` as they are). ``options`` come after the target's own, then the
    size limits unless given; the receive limit is the target's
    ``max_receive_message_size``.
    """
    if isinstance(target, str):
        target = ServerTarget(target)
    merged = channel_options([*target.channel_options, *options], max_message_size)
    receive = max_message_size  # replaced below: channel_options always sets it
    rest: list[tuple[str, Any]] = []
    for name, value in merged:
        if name == "grpc.max_receive_message_length":
            receive = int(value)
        else:
            rest.append((name, value))
    if not any(name == "grpc.enable_retries" for name, _ in rest):
        # open_channel turns gRPC's own retries off (the xDS streams reconnect by
        # themselves); a store call keeps gRPC's transparent retry of a request that
        # never left, as before. The last of two equal channel arguments wins.
        rest.append(("grpc.enable_retries", 1))
    config = target.credentials
    if isinstance(credentials, ChannelCredentialsConfig):
        config = credentials
    return dataclasses.replace(
        target, credentials=config, max_receive_message_size=receive, channel_options=tuple(rest)
    )


def check_request_size(request: Any, limit: int) -> None:
    """Refuse a write that gRPC would refuse, with the limit and the key in the message."""
    size = request.ByteSize()
    if size > limit:
        key = ResourceKey.from_proto(request.key) if request.HasField("key") else None
        raise message_too_large(
            f"the request for {key} is {size} bytes, over the limit of {limit} bytes",
            limit=limit,
        )
