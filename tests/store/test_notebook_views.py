"""What the store client hands out shows itself in a notebook (issue #35)."""

from __future__ import annotations

import pytest

from xds_client.store import ResourceKey, ResourceStoreClient, StoredObject
from xds_client.testing import ResourceStoreServer

pytestmark = pytest.mark.timeout(60)

KIND = ResourceKey("dashboard.grafana.app", "dashboards", "default")


def test_a_listing_and_an_object_show_as_tables() -> None:
    with ResourceStoreServer(":memory:") as server, ResourceStoreClient(server.address) as store:
        for name, team in [("cpu", "infra"), ("web", "web<&>")]:
            store.create(KIND.with_name(name), {"metadata": {"labels": {"team": team}}})
        listing = store.list(KIND)._repr_html_()
        assert listing.startswith("<table>")
        assert "<td>cpu</td>" in listing
        assert "<td>team=web&lt;&amp;&gt;</td>" in listing  # escaped
        obj: StoredObject = store.read(KIND.with_name("cpu"))
        view = obj._repr_html_()
        assert "<td>cpu</td>" in view
        assert "<pre>" in view
        assert "&quot;team&quot;: &quot;infra&quot;" in view


def test_an_informers_objects_show_as_a_table() -> None:
    with ResourceStoreServer(":memory:") as server, ResourceStoreClient(server.address) as store:
        store.create(KIND.with_name("cpu"), {"spec": {}})
        with store.informer(KIND) as informer:
            informer.wait_synced(10)
            view = informer.objects._repr_html_()  # type: ignore[attr-defined]
    assert view.startswith("<table>")
    assert "<td>cpu</td>" in view
