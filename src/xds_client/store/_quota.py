"""What a namespace holds and its quota: requests and results of the newer calls.

``ResourceStore/ListStoredResources`` names the collections (namespace, group,
resource) that hold objects, without counting them; ``Quotas/GetQuotaUsage``
tells how many objects one collection holds and how many it may hold. Both
exist in today's Grafana only. Over quota, Grafana refuses a create with 403
(:class:`~xds_client.store.QuotaExceededError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xds_client.store._errors import InvalidResponseError, check_result
from xds_client.store._keys import ResourceKey
from xds_client.store._proto import resource_pb2 as pb

__all__ = [
    "QuotaUsage",
    "quota_request",
    "quota_result",
    "stored_request",
    "stored_result",
]


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """The quota of one collection: objects held and the most it may hold."""

    collection: ResourceKey
    """The collection (namespace, group and resource; no name)."""
    usage: int
    """How many objects it holds."""
    limit: int
    """How many it may hold (a create beyond is 403, :class:`QuotaExceededError`)."""

    @property
    def remaining(self) -> int:
        """How many more creates fit (0 when full or over)."""
        return max(0, self.limit - self.usage)


def stored_request(namespace: str, group: str, resource: str) -> pb.ListStoredResourcesRequest:
    """Empty fields match every value."""
    return pb.ListStoredResourcesRequest(namespace=namespace, group=group, resource=resource)


def stored_result(
    resp: pb.ListStoredResourcesResponse, trailing: Sequence[Any] | None
) -> list[ResourceKey]:
    """The collections as name-less keys, sorted (Grafana's response has no error field)."""
    check_result(None, trailing)
    found = {ResourceKey(i.group, i.resource, i.namespace) for i in resp.items}
    return sorted(found, key=lambda k: (k.namespace, k.group, k.resource))


def quota_request(collection: ResourceKey) -> pb.QuotaUsageRequest:
    """The key's namespace, group and resource name the collection (its name is ignored)."""
    return pb.QuotaUsageRequest(key=collection.prefix().to_proto())


def quota_result(
    collection: ResourceKey, resp: pb.QuotaUsageResponse, trailing: Sequence[Any] | None
) -> QuotaUsage:
    """Raise the typed error of a failed call, or the usage."""
    check_result(resp.error if resp.HasField("error") else None, trailing)
    if resp.usage < 0 or resp.limit < 0:
        raise InvalidResponseError(f"quota usage {resp.usage} of {resp.limit} is negative")
    return QuotaUsage(collection.prefix(), resp.usage, resp.limit)
