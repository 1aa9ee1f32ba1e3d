"""The hot-path builders of events and cache entries give what the constructors give.

``new_resource_updated``, ``new_response_accepted`` and ``new_cached_resource`` build
a mutable twin of the frozen record and then set its class; where the interpreter
refuses that, they fall back to the slot setters or the constructor.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster

from xds_client.protocol import _cache, _events
from xds_client.protocol._cache import CachedResource, new_cached_resource
from xds_client.protocol._events import (
    ResourceUpdated,
    ResponseAccepted,
    new_resource_updated,
    new_response_accepted,
)

_MESSAGE = Cluster(name="c")


def _built() -> list[tuple[Any, Any]]:
    return [
        (
            new_resource_updated("t", "n", "v", _MESSAGE, ("a",), None, "cp"),
            ResourceUpdated("t", "n", "v", _MESSAGE, ("a",), None, "cp"),
        ),
        (new_response_accepted("t", "v", "n", "cp", 3), ResponseAccepted("t", "v", "n", "cp", 3)),
        (
            new_cached_resource("n", "v", _MESSAGE, b"raw", 5.0, 6.0, 1.0, ("a",), "rv"),
            CachedResource("n", "v", _MESSAGE, b"raw", 5.0, 6.0, 1.0, ("a",), "rv"),
        ),
    ]


def _check(pairs: list[tuple[Any, Any]]) -> None:
    for built, made in pairs:
        assert type(built) is type(made)
        assert built == made
        if type(made) is ResponseAccepted:  # the others hold a (mutable) message
            assert hash(built) == hash(made)
        assert repr(built) == repr(made)
        assert dataclasses.astuple(built) == dataclasses.astuple(made)
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.version = "other"


def test_the_builders_match_the_constructors() -> None:
    assert _events._Draft is not None  # CPython: the twins are in use
    assert _events._AcceptedDraft is not None
    assert _cache._CachedDraft is not None
    _check(_built())


def test_the_fallbacks_match_the_constructors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_events, "_Draft", None)
    monkeypatch.setattr(_events, "_AcceptedDraft", None)
    monkeypatch.setattr(_cache, "_CachedDraft", None)
    _check(_built())
