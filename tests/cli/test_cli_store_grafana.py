"""``store kinds``, ``store quota`` and Grafana's token exchange flags, on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store._token_exchange import TokenExchangeServer
from xds_client.store import ResourceKey
from xds_client.testing import AccessTokenCheck, ResourceStoreServer

from .conftest import Result

pytestmark = pytest.mark.timeout(60)

SECRET = b"cli-secret"
SERVICE_TOKEN = "svc-s3cret-token"
NS = "stacks-1"
KIND = "dashboard.grafana.app/dashboards"
KEY = ResourceKey("dashboard.grafana.app", "dashboards", NS, "a")


@pytest.fixture
def setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ResourceStoreServer, TokenExchangeServer, list[str]]]:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # the exchange is on 127.0.0.1
    token_file = tmp_path / "service-token"
    token_file.write_text(SERVICE_TOKEN + "\n")
    id_file = tmp_path / "id-token"
    id_file.write_text("user-id-token\n")
    check = AccessTokenCheck(SECRET)
    with (
        TokenExchangeServer(SECRET, service_token=SERVICE_TOKEN) as tx,
        ResourceStoreServer(auth=check, quotas={NS: 5}) as srv,
    ):
        srv.put(KEY, {"metadata": {"name": "a", "namespace": NS}, "spec": {"title": "A"}})
        flags = [
            "-s", srv.address, "--exchange-url", tx.url,
            "--exchange-token-file", str(token_file), "--id-token-file", str(id_file),
        ]  # fmt: skip
        yield srv, tx, flags


def test_get_with_an_exchanged_token_and_id_token(cli: Any, setup: Any) -> None:
    srv, tx, flags = setup
    result: Result = cli("store", "get", *flags, KIND, "a", "-n", NS, "--json")
    assert result.code == 0, result.err
    (record,) = result.json_lines()
    assert record["resource"]["spec"] == {"title": "A"}
    assert tx.exchanges == 1
    assert tx.requests[0][1] == {"namespace": NS, "audiences": ["resourceStore"]}
    assert srv.auth.seen[-1]["x-id-token"] == "user-id-token"
    assert SERVICE_TOKEN not in result.out + result.err


def test_kinds_and_quota(cli: Any, setup: Any) -> None:
    _, _, flags = setup
    kinds: Result = cli("store", "kinds", *flags, "-n", NS, "--json")
    assert kinds.code == 0, kinds.err
    assert kinds.json_lines() == [
        {
            "event": "stored",
            "kind": KIND,
            "namespace": NS,
            "group": "dashboard.grafana.app",
            "resource": "dashboards",
        }
    ]
    table: Result = cli("store", "kinds", *flags, "-n", NS)
    assert "dashboard.grafana.app" in table.out
    quota: Result = cli("store", "quota", *flags, KIND, "-n", NS)
    assert quota.code == 0, quota.err
    assert quota.out.strip() == f"{KIND} in {NS}: 1 of 5 used, 4 left"


def test_another_namespace_is_refused_and_a_bad_exchange_is_one_line(
    cli: Any, setup: Any, tmp_path: Path
) -> None:
    _, _tx, flags = setup
    other: Result = cli("store", "get", *flags, "--exchange-namespace", NS, KIND, "a", "-n", "x")
    assert other.code == 1
    assert "PERMISSION_DENIED" in other.err
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-service-token")
    bad_flags = [*flags[:4], "--exchange-token-file", str(wrong)]
    refused: Result = cli("store", "get", *bad_flags, KIND, "a", "-n", NS)
    assert refused.code == 1
    assert "token exchange" in refused.err
    assert "401" in refused.err
    assert "not-the-service-token" not in refused.err


def test_exchange_flags_are_checked_before_any_call(cli: Any, tmp_path: Path) -> None:
    alone: Result = cli("store", "health", "-s", "127.0.0.1:1", "--exchange-url", "http://x")
    assert alone.code == 2
    assert "--exchange-token-file" in alone.err
    empty = tmp_path / "empty"
    empty.write_text("")
    no_token: Result = cli(
        "store", "health", "-s", "127.0.0.1:1", "--exchange-url", "http://x",
        "--exchange-token-file", str(empty),
    )  # fmt: skip
    assert no_token.code == 2
    orphan: Result = cli("store", "health", "-s", "127.0.0.1:1", "--exchange-namespace", "n")
    assert orphan.code == 2
