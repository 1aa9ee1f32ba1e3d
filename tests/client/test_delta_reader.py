"""The delta reader of AsyncXdsClient: what runs first once a response is applied."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryResponse

from xds_client import AsyncXdsClient, Node, ResourceUpdated
from xds_client.resources import CLUSTER
from xds_client.testing import AsyncMockTransport, MockStream

pytestmark = pytest.mark.timeout(30)


def _response(version: str) -> DeltaDiscoveryResponse:
    response = DeltaDiscoveryResponse(type_url=CLUSTER, nonce=version, system_version_info=version)
    res = response.resources.add(name="c", version=version)
    res.resource.Pack(Cluster(name="c", alt_stat_name=version))
    return response


async def _until(check: Any, what: str, timeout: float = 10.0) -> None:
    """Poll ``check`` on the loop until it is true; fail after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


def _blocked_in_get(watch: Any) -> bool:
    future = watch._waiter._future
    return future is not None and not future.done()


def test_a_waiting_watcher_gets_the_update_before_its_ack_is_queued() -> None:
    """The watcher's task runs before the ACK is handed to the stream (and before the
    next read starts); the ACK still goes out for every response, in order."""
    log: list[str] = []

    def handler(stream: MockStream, request: Any) -> None:
        if request.response_nonce:
            log.append(f"ack {request.response_nonce}")

    async def main() -> list[str]:
        transport = AsyncMockTransport(handler)
        async with AsyncXdsClient(
            "mock:1", node=Node(id="n"), protocol="delta", transport=transport
        ) as client:
            watch = client.watch(Cluster, "c")
            await _until(
                lambda: transport.streams and transport.streams[0].requests, "the subscription"
            )
            stream = transport.streams[0]

            async def watcher() -> None:
                for _ in range(3):
                    event = await watch.get(timeout=10)
                    while not isinstance(event, ResourceUpdated):
                        event = await watch.get(timeout=10)
                    log.append(f"watcher {event.version}")

            task = asyncio.create_task(watcher())
            for version in ("1", "2", "3"):
                await _until(lambda: _blocked_in_get(watch), "the watcher to wait in get()")
                stream.push(_response(version))
            await asyncio.wait_for(task, 10)
            await _until(lambda: len(log) == 6, "the third ACK")
        return log

    assert asyncio.run(main()) == [
        "watcher 1", "ack 1", "watcher 2", "ack 2", "watcher 3", "ack 3",
    ]  # fmt: skip
