"""Quotas and stored collections of the test ResourceStore (newer Grafana's calls).

As Grafana: a create into a collection (namespace, group, resource) that holds
its quota already is refused with 403 and a message that says it is the quota
(no reason); ``Quotas/GetQuotaUsage`` tells the usage and the limit (501 when
the server has no quotas); ``ResourceStore/ListStoredResources`` names the
collections that hold objects. Quotas are per namespace: ``quotas={"ns": 10}``
lets each collection of ``ns`` hold 10 objects, and a ``"*"`` entry applies to
the namespaces not listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from xds_client.store._proto import resource_pb2 as pb
from xds_client.store._proto import resource_pb2_grpc as pb_grpc

from ._engine import StoreEngine

__all__ = ["QuotasServicer", "quota_limit", "quota_refusal", "stored_resources"]


def quota_limit(quotas: Mapping[str, int] | None, namespace: str) -> int | None:
    """The most objects a collection of ``namespace`` may hold (None: no limit)."""
    if quotas is None:
        return None
    return quotas.get(namespace, quotas.get("*"))


def quota_refusal(resource: str, namespace: str, used: int, limit: int) -> str:
    """The message of a create over quota (Grafana's names the quota; no reason)."""
    return (
        f"quota exceeded for {resource} in namespace {namespace!r}: "
        f"{used} of {limit} used; delete some or ask for a higher quota"
    )


def stored_resources(store: StoreEngine, req: Any) -> pb.ListStoredResourcesResponse:
    """The collections that hold objects, filtered by the request's non-empty fields."""
    clauses, args = [], []
    for column, value in (("ns", req.namespace), ("grp", req.group), ("res", req.resource)):
        if value:
            clauses.append(f"{column} = ?")
            args.append(value)
    where = " AND ".join(clauses) or "1"
    rows = store._db.execute(
        f"SELECT DISTINCT ns, grp, res FROM objects WHERE {where} ORDER BY ns, grp, res",
        args,
    ).fetchall()
    resp = pb.ListStoredResourcesResponse()
    for ns, grp, res in rows:
        resp.items.add(namespace=ns, group=grp, resource=res)
    return resp


class QuotasServicer(pb_grpc.QuotasServicer):
    """``Quotas/GetQuotaUsage`` over the store's objects."""

    def __init__(self, store: StoreEngine) -> None:
        self.s = store

    def GetQuotaUsage(  # noqa: N802 - gRPC method name
        self, request: pb.QuotaUsageRequest, context: grpc.ServicerContext
    ) -> pb.QuotaUsageResponse:
        s = self.s
        s._take_fault("GetQuotaUsage")
        key = request.key
        limit = quota_limit(s.quotas, key.namespace)
        if limit is None:
            return pb.QuotaUsageResponse(
                error=pb.ErrorResult(
                    code=501, message="overrides service not configured on resource server"
                )
            )
        with s._cond:
            used = s._db.execute(
                "SELECT COUNT(*) FROM objects WHERE ns=? AND grp=? AND res=?",
                (key.namespace, key.group, key.resource),
            ).fetchone()[0]
        return pb.QuotaUsageResponse(usage=int(used), limit=limit)
