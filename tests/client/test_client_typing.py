"""Static typing of the public client API: mypy checks the ``assert_type`` lines.

The functions are never called at runtime; the test below only makes sure the
module imports. ``mypy --strict`` over tests/ is what verifies them.
"""

from __future__ import annotations

from envoy.config.cluster.v3.cluster_pb2 import Cluster
from google.protobuf.message import Message
from typing_extensions import assert_type

from xds_client import (
    AsyncWatch,
    AsyncXdsClient,
    ResourceUpdated,
    Watch,
    XdsClient,
    resource_type,
)
from xds_client.protocol import CachedResource


def sync_types(client: XdsClient) -> None:
    watch = client.watch(Cluster, ["a"])
    assert_type(watch, Watch[Cluster])
    assert_type(client.watch("cds", None), Watch[Message])
    assert_type(client.watch(resource_type(Cluster), "a"), Watch[Cluster])
    for event in watch:
        if isinstance(event, ResourceUpdated):
            assert_type(event.resource, Cluster)
    assert_type(client.wait_for(Cluster, "a"), Cluster)
    assert_type(client.wait_for("cds", "a"), Message)
    assert_type(client.resources(Cluster), dict[str, CachedResource[Cluster]])


async def async_types(client: AsyncXdsClient) -> None:
    watch = client.watch(Cluster, "a")
    assert_type(watch, AsyncWatch[Cluster])
    async for event in watch:
        if isinstance(event, ResourceUpdated):
            assert_type(event.resource, Cluster)
    assert_type(await client.wait_for(Cluster, "a"), Cluster)
    assert_type(client.config_dump().generic_xds_configs[0].name, str)


def test_typing_module_imports() -> None:
    assert callable(sync_types)
    assert callable(async_types)
