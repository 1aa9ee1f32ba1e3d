"""List pages of the test server stay pinned to the list's version under any writes.

Runs the server's storage without gRPC, so hypothesis can try many interleavings.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from xds_client.store import ResourceKey
from xds_client.store._proto import resource_pb2 as pb
from xds_client.testing import ResourceStoreServer
from xds_client.testing._store._engine import _Prefix

PREFIX = ResourceKey("grp.grafana.app", "things", "default")
NAMES = [f"n{i}" for i in range(12)]

op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(NAMES)),
    st.tuples(st.just("del"), st.sampled_from(NAMES)),
    st.tuples(st.just("other"), st.sampled_from(NAMES)),  # another resource type
    st.tuples(st.just("page"), st.just("")),
)


@given(
    initial=st.sets(st.sampled_from(NAMES)),
    ops=st.lists(op, max_size=40),
    limit=st.integers(min_value=1, max_value=5),
)
def test_pages_show_the_store_as_it_was(
    initial: set[str], ops: list[tuple[str, str]], limit: int
) -> None:
    srv = ResourceStoreServer()
    srv._open_db()
    try:
        for name in sorted(initial):
            srv.put(PREFIX.with_name(name), {"spec": {"v": 0}})
        snapshot = {
            json.loads(v)["metadata"]["name"]: (rv, v) for rv, v in srv._snapshot(_prefix())
        }
        request = pb.ListRequest(limit=limit, options=pb.ListOptions(key=PREFIX.to_proto()))
        got: list[tuple[str, int, bytes]] = []
        token: str | None = None

        def page() -> None:
            nonlocal token
            req = pb.ListRequest()
            req.CopyFrom(request)
            req.next_page_token = token or ""
            resp = srv._list_page(req)
            got.extend(
                (json.loads(w.value)["metadata"]["name"], w.resource_version, w.value)
                for w in resp.items
            )
            token = resp.next_page_token

        page()
        for i, (kind, name) in enumerate(ops):
            key = PREFIX.with_name(name)
            if kind == "put":
                srv.put(key, {"spec": {"v": i + 1}})
            elif kind == "del" and srv._get(key.to_proto()) is not None:
                srv.remove(key)
            elif kind == "other":
                srv.put(ResourceKey("grp.grafana.app", "others", "default", name), {"spec": {}})
            elif kind == "page" and token:
                page()
        while token:
            page()
        assert [name for name, _, _ in got] == sorted(snapshot)
        assert {name: (rv, value) for name, rv, value in got} == snapshot
    finally:
        srv.stop()


def _prefix() -> _Prefix:
    return _Prefix(PREFIX.group, PREFIX.resource, PREFIX.namespace)
