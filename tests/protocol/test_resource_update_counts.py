"""Each response's ACK or NACK event says how many of its resources were valid and invalid.

gRFC A78 counts resources, not responses (``grpc.xds_client.resource_updates_valid`` and
``_invalid``), unchanged ones included, and only those the client asked for: the cores
count them where they judge them, and the client reports the counts.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.any_pb2 import Any as AnyProto

from xds_client.protocol import ResponseAccepted, ResponseRejected
from xds_client.protocol._raw import to_raw_response

from ._protocol_support import (
    Api,
    bad_any,
    delta,
    delta_resource,
    delta_response,
    make,
    sotw,
    sotw_response,
    wrap,
)


def reject_bad(message: Any) -> None:
    if message.alt_stat_name == "bad":
        raise ValueError("alt_stat_name 'bad' is refused")


def counts(events: list[Any]) -> tuple[str, int, int]:
    """(``ACK`` or ``NACK``, valid, invalid) of the one reply among ``events``."""
    (reply,) = [e for e in events if isinstance(e, (ResponseAccepted, ResponseRejected))]
    if isinstance(reply, ResponseAccepted):
        return "ACK", reply.valid_resources, 0
    return "NACK", reply.valid_resources, reply.invalid_resources


@pytest.mark.parametrize("shape", ["bare", "wrapped", "raw"])
def test_sotw_counts_wanted_resources_unchanged_ones_too(api: Api, mode: str, shape: str) -> None:
    h = sotw(api, mode, validators={api.cds: reject_bad})
    h.p.subscribe(api.cds, ["a", "b", "c"])
    h.start()

    def send(version: str, *clusters: Any) -> tuple[str, int, int]:
        items = [
            wrap(c.name, c) if shape == "wrapped" and not isinstance(c, AnyProto) else c
            for c in clusters
        ]
        response: Any = sotw_response(api.cds, version, f"n{version}", items)
        if shape == "raw":
            response = to_raw_response(response)
        return counts(h.receive(response))

    a, b = make(api.cds, "a"), make(api.cds, "b")
    unwanted = make(api.cds, "x")  # not asked for: neither valid nor invalid
    assert send("1", a, b, unwanted) == ("ACK", 2, 0)
    assert send("2", a, b, unwanted) == ("ACK", 2, 0)  # unchanged: counted again
    bad = make(api.cds, "c", "bad")
    assert send("3", a, bad, unwanted) == ("NACK", 1, 1)
    # A resource that cannot be read counts invalid (it may be a wanted one).
    assert send("4", a, bad_any(api.cds)) == ("NACK", 1, 1)


def test_sotw_wildcard_counts_every_resource(api: Api, mode: str) -> None:
    h = sotw(api, mode, validators={api.cds: reject_bad})
    h.p.subscribe(api.cds, None)
    h.start()
    clusters = [make(api.cds, n) for n in ("a", "b", "c")]
    assert counts(h.receive(sotw_response(api.cds, "1", "n1", clusters))) == ("ACK", 3, 0)
    clusters[1] = make(api.cds, "b", "bad")
    assert counts(h.receive(sotw_response(api.cds, "2", "n2", clusters))) == ("NACK", 2, 1)


def test_a_response_rejected_as_a_whole_counts_every_resource_invalid(api: Api, mode: str) -> None:
    h = sotw(api, mode)
    h.p.subscribe(api.cds, None)
    h.start()
    twice = [make(api.cds, "a"), make(api.cds, "b"), make(api.cds, "a", "other")]
    assert counts(h.receive(sotw_response(api.cds, "1", "n1", twice))) == ("NACK", 0, 3)
    d = delta(api, mode)
    d.p.subscribe(api.cds, ["a", "b"])
    d.start()
    items = [delta_resource("a", make(api.cds, "a")), delta_resource("b", make(api.cds, "b"))]
    both = delta_response(api.cds, "n1", items, removed=["a"])  # updated and removed
    assert counts(d.receive(both)) == ("NACK", 0, 2)


def test_delta_counts_wanted_resources_unchanged_ones_too(api: Api, mode: str) -> None:
    h = delta(api, mode, validators={api.cds: reject_bad})
    h.p.subscribe(api.cds, ["a", "b", "c"])
    h.start()

    def send(nonce: str, *clusters: Any, removed: tuple[str, ...] = ()) -> tuple[str, int, int]:
        items = [delta_resource(c.name, c, version=nonce) for c in clusters]
        return counts(h.receive(delta_response(api.cds, nonce, items, removed)))

    a, b = make(api.cds, "a"), make(api.cds, "b")
    assert send("1", a) == ("ACK", 1, 0)  # one resource: the core's short path
    assert send("2", a) == ("ACK", 1, 0)  # unchanged
    assert send("3", a, b, make(api.cds, "x")) == ("ACK", 2, 0)  # x was not asked for
    assert send("4", make(api.cds, "c", "bad")) == ("NACK", 0, 1)
    assert send("5", a, make(api.cds, "c", "bad"), removed=("b",)) == ("NACK", 1, 1)
    assert send("6", removed=("a",)) == ("ACK", 0, 0)  # a removal is no resource received
