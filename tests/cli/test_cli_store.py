"""store get|list|watch|create|update|delete|health against the SQLite ResourceStoreServer."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from xds_client.cli import run
from xds_client.store import ResourceKey
from xds_client.testing import ResourceStoreServer

from .conftest import Result

pytestmark = pytest.mark.timeout(60)

KIND = "dashboard.grafana.app/dashboards"
PREFIX = ResourceKey("dashboard.grafana.app", "dashboards", "default")


def test_create_get_update_delete(
    cli: Any, resource_store_server: ResourceStoreServer, tmp_path: Path
) -> None:
    s = resource_store_server.address
    doc = {"metadata": {"labels": {"app": "web"}}, "spec": {"title": "A"}}
    created: Result = cli("store", "create", "-s", s, KIND, "a", "-n", "default",
                          "-d", json.dumps(doc))  # fmt: skip
    assert created.code == 0, created.err
    assert created.out.strip() == f"created {KIND}/default/a at resource version 1"

    got = cli("store", "get", "-s", s, KIND, "a", "-n", "default", "--json")
    assert got.code == 0, got.err
    (record,) = got.json_lines()  # the object itself, as kubectl get -o json prints it
    metadata = record["metadata"]
    assert (metadata["name"], metadata["namespace"], metadata["resourceVersion"]) == (
        "a", "default", "1"
    )  # fmt: skip
    assert record["spec"] == {"title": "A"}

    text = cli("store", "get", "-s", s, KIND, "a", "-n", "default")
    # stdout is the document alone (pipe it to jq); which object and version is a note.
    assert text.err.startswith(f"{KIND}/default/a @ resource version 1\n")
    assert json.loads(text.out)["spec"] == {"title": "A"}
    body = cli("store", "get", "-s", s, KIND, "a", "-n", "default", "-o", "yaml")
    assert yaml.safe_load(body.out)["spec"] == {"title": "A"}

    update_file = tmp_path / "a.json"
    update_file.write_text(json.dumps({"spec": {"title": "A2"}}))
    updated = cli("store", "update", "-s", s, KIND, "a", "-n", "default", "-f", str(update_file),
                  "--resource-version", "1", "--json")  # fmt: skip
    assert updated.code == 0, updated.err
    assert updated.json_lines() == [
        {"event": "updated", "key": f"{KIND}/default/a", "name": "a", "namespace": "default",
         "version": "2"}
    ]  # fmt: skip

    stale = cli("store", "update", "-s", s, KIND, "a", "-n", "default", "-d", "{}",
                "--resource-version", "1")  # fmt: skip
    assert stale.code == 1
    assert "409" in stale.err
    assert len(stale.err.strip().splitlines()) == 1

    deleted = cli("store", "delete", "-s", s, KIND, "a", "-n", "default")
    assert deleted.code == 0, deleted.err
    assert deleted.out.startswith(f"deleted {KIND}/default/a")

    missing = cli("store", "get", "-s", s, KIND, "a", "-n", "default")
    assert missing.code == 1
    assert "404" in missing.err
    assert "not found" in missing.err


def test_list_table_json_and_selector(cli: Any, resource_store_server: ResourceStoreServer) -> None:
    for name, app in (("a", "web"), ("b", "db"), ("c", "web")):
        resource_store_server.put(
            PREFIX.with_name(name),
            {"metadata": {"name": name, "namespace": "default", "labels": {"app": app}}},
        )
    s = resource_store_server.address
    table = cli("store", "list", "-s", s, KIND, "--limit", "2")
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "VERSION", "LABELS"]
    assert [line.split()[1] for line in lines[1:]] == ["a", "b", "c"]
    assert table.err == ""  # no progress indicator when stderr is not a terminal

    selected = cli("store", "list", "-s", s, KIND, "-n", "default", "-l", "app=web", "--json")
    assert selected.code == 0, selected.err
    assert [r["name"] for r in selected.json_lines()] == ["a", "c"]


def test_watch_prints_changes_until_count(resource_store_server: ResourceStoreServer) -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = ["store", "watch", "-s", resource_store_server.address, KIND, "--json",
            "--count", "3", "--timeout", "20"]  # fmt: skip
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(run(argv, out, err)))
    worker.start()
    try:
        resource_store_server.wait_for_watchers(1, timeout=10)
        key = PREFIX.with_name("x")
        resource_store_server.put(key, {"metadata": {"name": "x", "namespace": "default"}})
        resource_store_server.put(key, {"metadata": {"name": "x", "namespace": "default"},
                                        "spec": {"n": 2}})  # fmt: skip
        resource_store_server.remove(key)
    finally:
        worker.join(20)
    assert codes == [0], err.getvalue()
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["event"] for r in records] == ["added", "modified", "deleted"]
    assert all(r["name"] == "x" for r in records)
    assert records[1]["resource"]["spec"] == {"n": 2}


def test_watch_initial_events_and_timeout(
    cli: Any, resource_store_server: ResourceStoreServer
) -> None:
    resource_store_server.put(PREFIX.with_name("a"), {"metadata": {"name": "a"}})
    s = resource_store_server.address
    result = cli("store", "watch", "-s", s, KIND, "--initial", "--timeout", "1")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "added" in lines[0]
    assert f"{KIND}/default/a" in lines[0]
    assert "bookmark" in lines[1]


def test_health(cli: Any, resource_store_server: ResourceStoreServer) -> None:
    ok = cli("store", "health", "-s", resource_store_server.address, "--json")
    assert ok.code == 0
    assert ok.json_lines()[0]["healthy"] is True
    down = cli("store", "health", "-s", "127.0.0.1:1")
    assert down.code == 1
    assert "cannot reach ResourceStore at 127.0.0.1:1" in down.err  # not "NOT SERVING"
    assert not down.out


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["list", "-s", "127.0.0.1:1", KIND, "-l", "app in ("], "bad label selector 'app in ('"),
        (["list", "-s", "127.0.0.1:1", "dashboards"], "bad kind 'dashboards'"),
        (["get", "-s", "nonsense", KIND, "a"], "bad server address"),
        (["create", "-s", "127.0.0.1:1", KIND, "a", "-d", "{oops"], "--data: invalid JSON"),
        (["create", "-s", "127.0.0.1:1", KIND, "a", "-d", "[1]"], "expected a JSON object"),
        (["create", "-s", "127.0.0.1:1", KIND, "a", "-f", "/no/such.json"], "cannot read"),
        (["create", "-s", "127.0.0.1:1", KIND, "a"], "one of the arguments"),
    ],
)
def test_usage_errors(cli: Any, argv: list[str], text: str) -> None:
    result = cli("store", *argv)
    assert result.code == 2
    assert "Traceback" not in result.err
    (line,) = result.err.strip().splitlines()
    assert text in line


def test_unreachable_server_is_one_line(cli: Any) -> None:
    result = cli("store", "list", "-s", "127.0.0.1:1", KIND)
    assert result.code == 1
    (line,) = result.err.strip().splitlines()
    assert line.startswith("xds-client: error: cannot reach ResourceStore at 127.0.0.1:1: 503")


def test_watch_of_unreachable_server_is_one_line(cli: Any) -> None:
    result = cli("store", "watch", "-s", "127.0.0.1:1", KIND, "--timeout", "30")
    assert result.code == 1
    (line,) = result.err.strip().splitlines()
    assert line.startswith("xds-client: error: cannot reach ResourceStore at 127.0.0.1:1: 503")
