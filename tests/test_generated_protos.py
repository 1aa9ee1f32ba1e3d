"""Generated ResourceStore code is what `make protos` produces, with the wire names intact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from xds_client.store._proto import resource_pb2, resource_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent


def test_generated_protocol_code_is_in_sync() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_wire_names_are_grafanas() -> None:
    services = resource_pb2.DESCRIPTOR.services_by_name
    store = services["ResourceStore"]
    assert store.full_name == "resource.ResourceStore"
    assert [m.name for m in store.methods] == [
        "Read",
        "Create",
        "Update",
        "Delete",
        "List",
        "Watch",
        "ListStoredResources",
    ]
    assert services["Diagnostics"].full_name == "resource.Diagnostics"
    quotas = services["Quotas"]
    assert quotas.full_name == "resource.Quotas"
    assert [m.name for m in quotas.methods] == ["GetQuotaUsage"]
    assert resource_pb2.DESCRIPTOR.package == "resource"
    assert hasattr(resource_pb2_grpc, "ResourceStoreStub")


def test_field_numbers_match_the_seed() -> None:
    fields = {f.name: f.number for f in resource_pb2.ResourceKey.DESCRIPTOR.fields}
    assert fields == {"namespace": 2, "group": 1, "resource": 3, "name": 4}
    watch = {f.name: f.number for f in resource_pb2.WatchRequest.DESCRIPTOR.fields}
    assert watch == {"since": 1, "options": 3, "send_initial_events": 4, "allow_watch_bookmarks": 5}
    assert resource_pb2.WatchEvent.Type.Value("BOOKMARK") == 4
    retry = resource_pb2.ErrorDetails.DESCRIPTOR.fields_by_name["retryAfterSeconds"]
    assert retry.number == 5


def test_newer_calls_match_grafanas_field_numbers() -> None:
    # From Grafana's current resource.proto (resourcepb): ListStoredResources, Quotas.
    def numbers(message: object) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    stored = {"namespace": 1, "group": 2, "resource": 3}
    assert numbers(resource_pb2.ListStoredResourcesRequest) == stored
    assert numbers(resource_pb2.ListStoredResourcesResponse) == {"items": 1}
    assert numbers(resource_pb2.ListStoredResourcesResponse.StoredResource) == stored
    assert numbers(resource_pb2.QuotaUsageRequest) == {"key": 1}
    assert numbers(resource_pb2.QuotaUsageResponse) == {"error": 1, "usage": 2, "limit": 3}
