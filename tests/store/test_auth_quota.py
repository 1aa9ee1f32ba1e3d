# Generated from tests/store/test_async_auth_quota.py by tools/gen_sync.py: do not edit.
"""Grafana's service authentication, quotas and newer calls on ResourceStoreClient
(generated from test_async_auth_quota.py), against both test servers.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from xds_client.errors import UsageError
from xds_client.store import (
    Dialect,
    ExchangedToken,
    ForbiddenError,
    QuotaExceededError,
    QuotaUsage,
    ResourceKey,
    ResourceStoreClient,
    StoreNotImplementedError,
    TokenExchange,
    UnauthorizedError,
)
from xds_client.testing import AccessTokenCheck, ResourceStoreServer

from ._grafana_like import GrafanaLikeServer
from ._store_support import FAST, doc
from ._token_exchange import TokenExchangeServer

pytestmark = pytest.mark.timeout(60)

SECRET = b"shared-by-the-exchange-and-the-store"
NS = "stacks-1"
DASHBOARDS = ResourceKey("dashboard.grafana.app", "dashboards", NS)
FOLDERS = ResourceKey("folder.grafana.app", "folders", NS)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Setup:
    kind: str
    address: str
    exchange: TokenExchangeServer
    id_tokens: Callable[[], list[str]]
    """The X-Id-Token each call carried, as the server saw it ('' for none)."""

    def credential(self, namespace: str = NS) -> TokenExchange:
        return TokenExchange.http(
            self.exchange.url, "service-token", namespace=namespace, opener=NO_PROXY
        )


@pytest.fixture(params=["sqlite", "grafana-like"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    with contextlib.ExitStack() as stack:
        exchange = stack.enter_context(TokenExchangeServer(SECRET))
        if request.param == "sqlite":
            check = AccessTokenCheck(SECRET)
            srv = stack.enter_context(ResourceStoreServer(auth=check, quotas={NS: 2}))
            ids = lambda: [seen.get("x-id-token", "") for seen in check.seen]  # noqa: E731
            yield Setup("sqlite", srv.address, exchange, ids)
        else:
            like = stack.enter_context(GrafanaLikeServer(access_secret=SECRET, quotas={NS: 2}))
            yield Setup("grafana-like", like.address, exchange, lambda: like.id_tokens)


def connect(setup: Setup, **kwargs: object) -> ResourceStoreClient:
    return ResourceStoreClient(setup.address, retry=FAST, timeout=10, **kwargs)  # type: ignore[arg-type]


def test_exchanged_token_and_id_token_on_every_call(setup: Setup) -> None:
    users = iter(["alice-id", None, "bob-id"])
    with connect(setup, access_token=setup.credential(), id_token=lambda: next(users)) as c:
        c.create(DASHBOARDS.with_name("a"), doc("A"))
        assert (c.read(DASHBOARDS.with_name("a"))).json()["spec"]["title"] == "A"
        names = [obj.key.name for obj in c.list(DASHBOARDS)]
        assert names == ["a"]
    assert setup.exchange.exchanges == 1  # one exchange, kept for every call
    assert setup.id_tokens()[-3:] == ["alice-id", "", "bob-id"]


def test_watch_carries_the_token(setup: Setup) -> None:
    with connect(setup, access_token=setup.credential()) as c:
        c.create(DASHBOARDS.with_name("w"), doc("W"))
        keys = []
        with c.watch(DASHBOARDS, send_initial_events=True, timeout=5) as watch:
            for event in watch:
                keys.append(event.key)
                break
        assert keys == [DASHBOARDS.with_name("w")]


def test_informer_lists_and_watches_with_the_token(setup: Setup) -> None:
    with connect(setup, access_token=setup.credential()) as c:
        c.create(DASHBOARDS.with_name("i"), doc("I"))
        with c.informer(DASHBOARDS) as informer:
            informer.wait_synced(10)
            assert list(informer.objects) == [DASHBOARDS.with_name("i")]
    assert setup.exchange.exchanges == 1


def test_a_token_for_another_namespace_is_refused(setup: Setup) -> None:
    other = DASHBOARDS.with_name("x", namespace="stacks-2")
    with connect(setup, access_token=setup.credential()) as c:
        with pytest.raises(ForbiddenError) as refused:
            c.create(other, doc())
        assert not isinstance(refused.value, QuotaExceededError)
    with connect(setup, access_token=setup.credential("*")) as c:
        c.create(other, doc())  # '*' is every namespace


def test_a_refused_token_is_exchanged_again(setup: Setup) -> None:
    good = setup.exchange.mint(NS, ["resourceStore"])
    bad = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")  # a broken signature
    tokens = [bad, good]
    credential = TokenExchange(lambda: ExchangedToken(tokens.pop(0), time.time() + 600))
    with connect(setup, access_token=credential) as c:
        key = DASHBOARDS.with_name("a")
        with pytest.raises(UnauthorizedError):
            c.create(key, doc())
        c.create(key, doc())  # the refused token was dropped: a new exchange
    assert credential.exchanges == 2


def test_no_token_is_unauthorized(setup: Setup) -> None:
    with connect(setup) as c:
        key = DASHBOARDS.with_name("a")
        with pytest.raises(UnauthorizedError):
            c.read(key)


def test_quota_refusal_is_its_own_error(setup: Setup) -> None:
    with connect(setup, access_token=setup.credential()) as c:
        c.create(DASHBOARDS.with_name("a"), doc())
        assert c.quota_usage(DASHBOARDS) == QuotaUsage(DASHBOARDS, 1, 2)
        c.create(DASHBOARDS.with_name("b"), doc())
        with pytest.raises(QuotaExceededError) as over:
            c.create(DASHBOARDS.with_name("c"), doc())
        assert isinstance(over.value, ForbiddenError)
        assert over.value.code == 403
        usage = c.quota_usage(DASHBOARDS)
        assert (usage.usage, usage.limit, usage.remaining) == (2, 2, 0)
        c.update(DASHBOARDS.with_name("a"), doc("edited"), resource_version=0)
        c.create(FOLDERS.with_name("f"), doc())  # another collection, its own quota


def test_list_stored_resources(setup: Setup) -> None:
    with connect(setup, access_token=setup.credential()) as c:
        assert c.list_stored_resources(NS) == []
        c.create(FOLDERS.with_name("f"), doc())
        c.create(DASHBOARDS.with_name("d"), doc())
        assert c.list_stored_resources(NS) == [DASHBOARDS, FOLDERS]
        assert c.list_stored_resources(NS, group="folder.grafana.app") == [FOLDERS]


def test_quota_usage_without_quotas_is_not_implemented() -> None:
    with ResourceStoreServer() as srv:
        client = ResourceStoreClient(srv.address, retry=FAST, timeout=10)
        with client as c:
            assert c.list_stored_resources() == []
            with pytest.raises(StoreNotImplementedError):
                c.quota_usage(DASHBOARDS)


def test_newer_calls_need_the_grafana_dialect() -> None:
    with ResourceStoreClient("127.0.0.1:1", dialect=Dialect.SEED) as c:
        with pytest.raises(UsageError, match="grafana"):
            c.list_stored_resources()
        with pytest.raises(UsageError, match="grafana"):
            c.quota_usage(DASHBOARDS)
