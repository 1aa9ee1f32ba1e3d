"""The thread and asyncio polling classes offer the same public surface."""

from __future__ import annotations

import inspect

import pytest

from xds_client.transport import (
    AsyncFetchTransport,
    AsyncRestTransport,
    AsyncStream,
    AsyncTransport,
    FetchTransport,
    RestTransport,
    Stream,
    Transport,
)
from xds_client.transport._async_polling_stream import AsyncPollingStream
from xds_client.transport._polling_stream import PollingStream


def public(cls: type) -> dict[str, bool]:
    """Public names -> whether they are coroutine functions."""
    return {
        name: inspect.iscoroutinefunction(member)
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_")
    }


@pytest.mark.parametrize(
    ("sync", "asynchronous"),
    [
        (PollingStream, AsyncPollingStream),
        (RestTransport, AsyncRestTransport),
        (FetchTransport, AsyncFetchTransport),
    ],
)
def test_twins_match(sync: type, asynchronous: type) -> None:
    sync_api, async_api = public(sync), public(asynchronous)
    assert set(sync_api) == set(async_api)
    assert not any(sync_api.values())
    io = {"send", "recv", "close", "open", "probe"}
    assert all(async_api[name] for name in io & set(async_api))


def test_protocols_are_satisfied() -> None:
    assert issubclass(PollingStream, Stream)
    assert issubclass(AsyncPollingStream, AsyncStream)
    for cls in (RestTransport, FetchTransport):
        assert issubclass(cls, Transport)
    for acls in (AsyncRestTransport, AsyncFetchTransport):
        assert issubclass(acls, AsyncTransport)
