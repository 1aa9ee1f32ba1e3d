"""A bare-bones xDS stream client for driving the ControlPlane from tests."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

import grpc
from envoy.service.discovery.v3.discovery_pb2 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)

if TYPE_CHECKING:
    from grpc import _CallIterator

ADS_V3 = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
ADS_V2 = "/envoy.service.discovery.v2.AggregatedDiscoveryService/"
SOTW_ADS = ADS_V3 + "StreamAggregatedResources"
DELTA_ADS = ADS_V3 + "DeltaAggregatedResources"

Req = TypeVar("Req", DiscoveryRequest, DeltaDiscoveryRequest)
Resp = TypeVar("Resp", DiscoveryResponse, DeltaDiscoveryResponse)


class RawStream(Generic[Req, Resp]):
    """One bidi stream: ``send`` requests, ``recv`` responses with a timeout."""

    def __init__(
        self, channel: grpc.Channel, method: str, request_type: type[Req], response_type: type[Resp]
    ) -> None:
        self._out: queue.SimpleQueue[Req | None] = queue.SimpleQueue()
        self._in: queue.SimpleQueue[Resp | grpc.RpcError | None] = queue.SimpleQueue()
        call: grpc.StreamStreamMultiCallable[Req, Resp] = channel.stream_stream(
            method,
            request_serializer=request_type.SerializeToString,
            response_deserializer=response_type.FromString,
        )
        self._call: _CallIterator[Resp] = call(self._requests())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[Req]:
        while True:
            item = self._out.get()
            if item is None:
                return
            yield item

    def _read(self) -> None:
        try:
            for response in self._call:
                self._in.put(response)
        except grpc.RpcError as exc:
            self._in.put(exc)
            return
        self._in.put(None)

    def send(self, request: Req) -> None:
        self._out.put(request)

    def recv(self, timeout: float = 5.0) -> Resp:
        """The next response; raises the stream's RpcError, or AssertionError on timeout/end."""
        try:
            item = self._in.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no response within {timeout}s") from None
        if item is None:
            raise AssertionError("the stream ended")
        if isinstance(item, grpc.RpcError):
            raise item
        return item

    def expect_nothing(self, timeout: float = 0.3) -> None:
        """Assert that no response arrives within ``timeout`` seconds."""
        try:
            item = self._in.get(timeout=timeout)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected response: {item}")

    def error(self, timeout: float = 5.0) -> grpc.RpcError:
        """Wait for the stream to fail and return its error."""
        try:
            while True:
                item = self._in.get(timeout=timeout)
                if isinstance(item, grpc.RpcError):
                    return item
                if item is None:
                    raise AssertionError("the stream ended without an error")
        except queue.Empty:
            raise AssertionError(f"no error within {timeout}s") from None

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self._reader.join(timeout=5.0)


def sotw(
    channel: grpc.Channel, method: str = SOTW_ADS
) -> RawStream[DiscoveryRequest, DiscoveryResponse]:
    return RawStream(channel, method, DiscoveryRequest, DiscoveryResponse)


def delta(
    channel: grpc.Channel, method: str = DELTA_ADS
) -> RawStream[DeltaDiscoveryRequest, DeltaDiscoveryResponse]:
    return RawStream(channel, method, DeltaDiscoveryRequest, DeltaDiscoveryResponse)
