"""The sans-I/O watch state, the pager and the error mapping, without sockets."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xds_client.errors import UsageError
from xds_client.store import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ExpiredError,
    ForbiddenError,
    InternalError,
    InvalidError,
    InvalidResponseError,
    NotFoundError,
    ResourceKey,
    RetryPolicy,
    ServerTimeoutError,
    StoreNotImplementedError,
    StoreWatchEvent,
    TooManyRequestsError,
    UnauthorizedError,
    UnavailableError,
    _calls,
)
from xds_client.store._errors import (
    error_result_from_metadata,
    from_error_result,
    from_rpc_error,
    from_status_json,
    pack_status_details,
)
from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._retry import surely_not_sent
from xds_client.store._selector import parse_selector
from xds_client.store._watch import Step, WatchState

PREFIX = ResourceKey("g", "r", "ns")
NO_JITTER = RetryPolicy(initial_backoff=1.0, max_backoff=8.0, jitter=0.0)


def obj(name: str, rv: int, **labels: str) -> bytes:
    return json.dumps(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "labels": labels,
                "resourceVersion": str(rv),
            }
        }
    ).encode()


def ev(
    etype: pb.WatchEvent.Type.ValueType, rv: int, value: bytes = b"", prev: bytes | None = None
) -> pb.WatchEvent:
    e = pb.WatchEvent(type=etype, resource=pb.WatchEvent.Resource(version=rv, value=value))
    if prev is not None:
        e.previous.version = rv - 1
        e.previous.value = prev
    return e


A, M, D, B = (
    pb.WatchEvent.ADDED,
    pb.WatchEvent.MODIFIED,
    pb.WatchEvent.DELETED,
    pb.WatchEvent.BOOKMARK,
)


def kinds(events: list[StoreWatchEvent | None]) -> list[tuple[str, str, int]]:
    return [
        (e.type, e.key.name if e.key else "", e.resource_version) for e in events if e is not None
    ]


# ---------------------------------------------------------------- watch state


def step_of(state: WatchState) -> Step:
    return state.step  # read through a call so mypy does not keep a narrowed type


def test_resume_request_uses_last_version_and_drops_repeats() -> None:
    state = WatchState(PREFIX, (), since=10, policy=NO_JITTER)
    assert state.step is Step.WATCH
    req = state.watch_request()
    assert req.since == 10
    assert req.allow_watch_bookmarks
    assert req.options.key.namespace == "ns"
    state.stream_opened()
    out = [state.on_event(ev(A, 11, obj("a", 11))), state.on_event(ev(M, 12, obj("a", 12)))]
    assert kinds(out) == [("added", "a", 11), ("modified", "a", 12)]
    assert state.stream_ended(None) == 1.0  # progress resets the backoff
    assert state.watch_request().since == 12
    state.stream_opened()
    assert state.on_event(ev(M, 12, obj("a", 12))) is None  # a repeat
    assert state.on_event(ev(B, 12)) is None  # a bookmark that does not advance
    bookmark = state.on_event(ev(B, 20))
    assert bookmark is not None
    assert bookmark.type == "bookmark"
    assert bookmark.key is None
    assert state.watch_request().since == 20
    deleted = state.on_event(ev(D, 21, obj("a", 21), prev=obj("a", 12)))
    assert deleted is not None
    assert (deleted.type, deleted.value, deleted.previous) == ("deleted", None, obj("a", 12))
    assert deleted.json()["metadata"]["name"] == "a"


def test_backoff_grows_without_progress_and_resets_after() -> None:
    state = WatchState(PREFIX, (), since=1, policy=NO_JITTER)
    delays = []
    for _ in range(5):
        state.stream_opened()
        delays.append(state.stream_ended(UnavailableError("down")))
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]
    state.stream_opened()
    state.on_event(ev(A, 2, obj("a", 2)))
    assert state.stream_ended(UnavailableError("down")) == 1.0
    tmr = TooManyRequestsError("slow down", details=pb.ErrorDetails(retryAfterSeconds=30))
    state.stream_opened()
    assert state.stream_ended(tmr) == 30.0


def test_non_retryable_stream_errors_are_raised() -> None:
    state = WatchState(PREFIX, (), since=1, policy=NO_JITTER)
    state.stream_opened()
    with pytest.raises(BadRequestError):
        state.stream_ended(BadRequestError("no"))
    with pytest.raises(NotFoundError):
        state.on_event(
            pb.WatchEvent(
                type=pb.WatchEvent.ERROR,
                resource=pb.WatchEvent.Resource(value=b'{"code": 404, "message": "gone"}'),
            )
        )


def test_from_now_anchors_first() -> None:
    state = WatchState(PREFIX, (), policy=NO_JITTER)
    assert state.step is Step.ANCHOR
    state.anchored(42)
    assert step_of(state) is Step.WATCH
    assert state.watch_request().since == 42


def test_expired_relists_and_reconciles() -> None:
    state = WatchState(PREFIX, (), since=0, initial="server", policy=NO_JITTER)
    req = state.watch_request()
    assert req.send_initial_events
    state.stream_opened()
    for i, name in enumerate("abc", start=1):
        assert state.on_event(ev(A, i, obj(name, i))) is not None
    assert state.on_event(ev(B, 3)) is None
    end = state.pending.popleft()
    assert end.initial_events_end
    assert not state.watch_request().send_initial_events
    assert state.stream_ended(ExpiredError("too old")) == 0.0
    assert state.step is Step.LIST
    state.list_started()
    out = [state.list_item(1, obj("a", 1)), state.list_item(9, obj("b", 9))]
    out.append(state.list_item(10, obj("d", 10)))
    state.list_done(10)
    out.extend(state.pending)
    assert step_of(state) is Step.WATCH
    assert kinds(out) == [
        ("modified", "b", 9),
        ("added", "d", 10),
        ("deleted", "c", 10),
        ("resynced", "", 10),
    ]
    assert state.watch_request().since == 10
    assert state.resyncs == 1


def test_restart_during_initial_events_reconciles_instead_of_repeating() -> None:
    state = WatchState(PREFIX, (), initial="server", policy=NO_JITTER)
    state.stream_opened()
    first = [state.on_event(ev(A, 5, obj("a", 5))), state.on_event(ev(A, 3, obj("b", 3)))]
    assert kinds(first) == [("added", "a", 5), ("added", "b", 3)]
    state.stream_ended(UnavailableError("dropped"))
    assert state.watch_request().send_initial_events
    state.stream_opened()
    again = [state.on_event(ev(A, 5, obj("a", 5))), state.on_event(ev(A, 7, obj("c", 7)))]
    assert kinds(again) == [("added", "c", 7)]
    state.on_event(ev(B, 8))
    assert kinds(list(state.pending)) == [("deleted", "b", 8), ("bookmark", "", 8)]


def test_label_selector_turns_transitions_into_added_and_deleted() -> None:
    state = WatchState(PREFIX, parse_selector("app=web"), since=1, policy=NO_JITTER)
    state.stream_opened()
    out = [
        state.on_event(ev(M, 2, obj("a", 2, app="web"), prev=obj("a", 1, app="db"))),
        state.on_event(ev(M, 3, obj("a", 3, app="web"), prev=obj("a", 2, app="web"))),
        state.on_event(ev(M, 4, obj("a", 4, app="db"), prev=obj("a", 3, app="web"))),
        state.on_event(ev(A, 5, obj("b", 5, app="db"))),
        state.on_event(ev(D, 6, obj("b", 5, app="db"))),
        state.on_event(ev(A, 7, obj("c", 7, app="web"))),
        # Without a previous object, the state falls back to what it knows.
        state.on_event(ev(M, 8, obj("c", 8, app="db"))),
    ]
    assert kinds(out) == [
        ("added", "a", 2),
        ("modified", "a", 3),
        ("deleted", "a", 4),
        ("added", "c", 7),
        ("deleted", "c", 8),
    ]


@dataclass
class FakeServer:
    """A history of writes on a few keys, served the way a store would."""

    history: list[tuple[str, int, bytes | None, bytes | None]] = field(default_factory=list)
    state: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    compacted: int = 0

    def write(self, name: str, delete: bool) -> None:
        rv = len(self.history) + 1
        old = self.state.get(name)
        if delete:
            if old is None:
                self.history.append(("", rv, None, None))  # a write elsewhere
                return
            del self.state[name]
            self.history.append((name, rv, None, old[1]))
        else:
            value = obj(name, rv)
            self.state[name] = (rv, value)
            self.history.append((name, rv, value, old[1] if old else None))

    def events_after(self, since: int) -> list[pb.WatchEvent]:
        out = []
        for name, rv, value, prev in self.history[since:]:
            if not name:
                continue
            if value is None:
                assert prev is not None
                out.append(ev(D, rv, prev, prev=prev))
            else:
                out.append(ev(M if prev else A, rv, value, prev=prev))
        return out


@given(
    writes=st.lists(st.tuples(st.sampled_from("abcd"), st.booleans()), min_size=1, max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=10),
    replay=st.integers(min_value=0, max_value=3),
    expire_at=st.one_of(st.none(), st.integers(min_value=0, max_value=5)),
)
def test_interrupted_watch_converges_without_repeats(
    writes: list[tuple[str, bool]], cuts: list[int], replay: int, expire_at: int | None
) -> None:
    """Streams cut short, servers that replay a few old events, 410s: the view converges,
    and between relists the consumer sees strictly increasing versions."""
    server = FakeServer()
    state = WatchState(PREFIX, (), since=0, initial="list", policy=NO_JITTER)
    view: dict[str, bytes] = {}
    live: list[int] = []

    def apply(event: StoreWatchEvent | None, *, synthetic: bool = False) -> None:
        if event is None or event.type in ("bookmark", "resynced"):
            return
        assert event.key is not None
        if event.type == "deleted":
            del view[event.key.name]
        else:
            assert event.value is not None
            view[event.key.name] = event.value
        if not synthetic:
            assert not live or event.resource_version > live[-1]
            live.append(event.resource_version)

    pending_writes = list(writes)
    streams = 0
    for _ in range(200):
        if state.step is Step.LIST:
            state.list_started()
            for rv, value in sorted(server.state.values(), key=lambda item: item[1]):
                apply(state.list_item(rv, value), synthetic=True)
            state.list_done(len(server.history))
            while state.pending:
                apply(state.pending.popleft(), synthetic=True)
            live.clear()  # a new segment starts at the list's version
            continue
        # Some writes happen while no stream is open.
        for _ in range(2):
            if pending_writes:
                server.write(*pending_writes.pop(0))
        req = state.watch_request()
        state.stream_opened()
        streams += 1
        if expire_at is not None and streams == expire_at and req.since < len(server.history):
            state.stream_ended(ExpiredError("compacted"))
            continue
        events = server.events_after(max(0, req.since - replay))
        cut = cuts[streams % len(cuts)]
        for e in events[: cut or None]:
            apply(state.on_event(e))
        state.stream_ended(None if streams % 2 else UnavailableError("dropped"))
        if not pending_writes and state.last_rv == len(server.history) and cut == 0:
            break
    for e in server.events_after(state.last_rv):
        apply(state.on_event(e))
    assert view == {name: value for name, (_rv, value) in server.state.items()}


# ---------------------------------------------------------------- pager


def test_pager_repeats_the_request_and_follows_tokens() -> None:
    pager = _calls.ListPager(PREFIX, parse_selector("app=web"), limit=2, resource_version=0)
    first = pager.request()
    assert first.limit == 2
    assert first.options.labels[0].key == "app"
    page = pager.on_page(
        pb.ListResponse(
            items=[
                pb.ResourceWrapper(resource_version=3, value=obj("a", 3, app="web")),
                pb.ResourceWrapper(resource_version=4, value=obj("b", 4, app="db")),
            ],
            next_page_token="t1",
            resource_version=9,
        ),
        None,
    )
    assert [o.key.name for o in page.items] == ["a"]  # filtered again on the client
    assert pager.resource_version == 9
    second = pager.request()
    assert second.next_page_token == "t1"
    second.ClearField("next_page_token")
    assert second == first
    pager.on_page(pb.ListResponse(next_page_token="t2", resource_version=9), None)
    assert not pager.done  # an empty page may still carry a token
    pager.on_page(pb.ListResponse(resource_version=9), None)
    assert pager.done
    assert pager.pages == 3


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", BadRequestError),
        (404, "NotFound", NotFoundError),
        (409, "AlreadyExists", AlreadyExistsError),
        (409, "Conflict", ConflictError),
        (410, "Expired", ExpiredError),
        (422, "Invalid", InvalidError),
        (429, "TooManyRequests", TooManyRequestsError),
        (503, "ServiceUnavailable", UnavailableError),
        (504, "Timeout", ServerTimeoutError),
        (500, "InternalError", InternalError),
        (0, "AlreadyExists", AlreadyExistsError),
        (418, "", InternalError),
    ],
)
def test_error_results_map_to_classes(code: int, reason: str, cls: type[Exception]) -> None:
    err = from_error_result(pb.ErrorResult(code=code, reason=reason, message="m"))
    assert type(err) is cls


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "", trailer: bytes = b"") -> None:
        self._code, self._details = code, details
        self._trailing = (("grpc-status-details-bin", trailer),) if trailer else ()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


@pytest.mark.parametrize(
    ("code", "cls", "http"),
    [
        (grpc.StatusCode.NOT_FOUND, NotFoundError, 404),
        (grpc.StatusCode.ABORTED, ConflictError, 409),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, TooManyRequestsError, 429),
        (grpc.StatusCode.UNAVAILABLE, UnavailableError, 503),
        (grpc.StatusCode.DEADLINE_EXCEEDED, ServerTimeoutError, 504),
        (grpc.StatusCode.PERMISSION_DENIED, ForbiddenError, 403),
        (grpc.StatusCode.UNAUTHENTICATED, UnauthorizedError, 401),
        (grpc.StatusCode.UNIMPLEMENTED, StoreNotImplementedError, 501),
        (grpc.StatusCode.INTERNAL, InternalError, 500),
    ],
)
def test_grpc_codes_map_to_http(code: grpc.StatusCode, cls: type[Exception], http: int) -> None:
    err = from_rpc_error(FakeRpcError(code, "boom"), ())
    assert type(err) is cls
    assert err.code == http
    assert err.grpc_code == code


def test_details_in_the_status_win() -> None:
    result = pb.ErrorResult(code=410, reason="Expired", message="too old")
    trailer = pack_status_details(result, grpc.StatusCode.OUT_OF_RANGE)
    fake = FakeRpcError(grpc.StatusCode.OUT_OF_RANGE, "x", trailer)
    err = from_rpc_error(fake, fake.trailing_metadata())
    assert isinstance(err, ExpiredError)
    # An OK call: the details in the trailer win over the response's error field.
    with pytest.raises(ExpiredError):
        _calls.read_result(
            PREFIX.with_name("a"),
            pb.ReadResponse(error=pb.ErrorResult(code=404)),
            (("grpc-status-details-bin", trailer),),
        )
    assert error_result_from_metadata((("grpc-status-details-bin", b"\xff garbage"),)) is None


def test_zero_resource_version_success_is_an_error() -> None:
    with pytest.raises(InvalidResponseError):
        _calls.update_result(pb.UpdateResponse(), None)
    with pytest.raises(InvalidResponseError):
        _calls.create_result(pb.CreateResponse(), None)
    assert _calls.update_result(pb.UpdateResponse(resource_version=3), None) == 3


def test_status_json_and_write_retry_rules() -> None:
    err = from_status_json(
        b'{"code": 429, "reason": "TooManyRequests", "details": {"retryAfterSeconds": 7}}'
    )
    assert isinstance(err, TooManyRequestsError)
    assert err.retry_after == 7.0
    assert isinstance(from_status_json(b"not json"), InternalError)
    assert surely_not_sent(err)
    refused = from_rpc_error(
        FakeRpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"), ()
    )
    assert surely_not_sent(refused)
    assert not surely_not_sent(from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "x"), ()))


def test_events_and_objects_are_immutable() -> None:
    state = WatchState(PREFIX, (), since=1, policy=NO_JITTER)
    state.stream_opened()
    event = state.on_event(ev(A, 2, obj("a", 2)))
    assert event is not None
    with pytest.raises(AttributeError):
        event.type = "deleted"  # type: ignore[misc]
    stored = _calls.read_result(
        PREFIX.with_name("a"), pb.ReadResponse(resource_version=2, value=b"{}"), None
    )
    with pytest.raises(AttributeError):
        stored.value = b"x"  # type: ignore[misc]


def test_store_target_is_a_server_target_with_the_size_limits() -> None:
    from xds_client.transport import ChannelCredentialsConfig, ServerTarget

    target = _calls.store_target("h:1", None, [("grpc.primary_user_agent", "x")], 1024)
    assert (target.uri, target.credentials, target.max_receive_message_size) == ("h:1", None, 1024)
    assert target.channel_options == (
        ("grpc.primary_user_agent", "x"),
        ("grpc.max_send_message_length", 1024),
        ("grpc.enable_retries", 1),  # after open_channel's 0: gRPC's transparent retries stay
    )
    tls = ChannelCredentialsConfig(ca_certificate=b"pem")
    given = ServerTarget("h:2", call_metadata=(("x-org", "1"),), channel_options=(("a", 1),))
    target = _calls.store_target(given, tls, [("grpc.max_receive_message_length", 99)], 2048)
    assert target.credentials is tls
    assert target.call_metadata == (("x-org", "1"),)
    assert target.max_receive_message_size == 99
    assert target.channel_options[0] == ("a", 1)
    with pytest.raises(UsageError):
        _calls.store_target("h:1", None, [], 0)
