"""Small pieces both kinds of client use: the raw ADS stream and the node."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import grpc

from bench._data import NODE_ID

MAX_RECEIVE = 256 * 1024 * 1024


def node() -> Any:
    from envoy.config.core.v3.base_pb2 import Node

    return Node(id=NODE_ID, cluster="bench")


class RawStream:
    """The raw loop's stream: the generated ADS stub, fed from a queue (grpcio's idiom)."""

    def __init__(self, address: str, *, delta: bool) -> None:
        from envoy.service.discovery.v3.ads_pb2_grpc import AggregatedDiscoveryServiceStub

        self.channel = grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", MAX_RECEIVE)]
        )
        stub = AggregatedDiscoveryServiceStub(self.channel)
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        method = stub.DeltaAggregatedResources if delta else stub.StreamAggregatedResources
        self.call: Any = method(self._iter())

    def _iter(self) -> Iterator[Any]:
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def send(self, request: Any) -> None:
        self._requests.put(request)

    def recv(self) -> Any:
        return next(self.call)

    def close(self) -> None:
        self._requests.put(None)
        self.call.cancel()
        self.channel.close()
