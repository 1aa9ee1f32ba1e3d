"""Start from the last good config: persist what was accepted, restore it with the
control plane down, then resume without a full resend (SotW and delta, sync and async)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.extensions.transport_sockets.tls.v3.secret_pb2 import Secret
from envoy.service.discovery.v3.discovery_pb2 import DeltaDiscoveryRequest, DiscoveryRequest

from tests._waiting import wait_until
from xds_client import ResourceRestored, ResourceUpdated
from xds_client.client._persist import FORMAT
from xds_client.resources import CLUSTER, SECRET
from xds_client.testing import ControlPlane

from .conftest import ClientProxy

pytestmark = pytest.mark.timeout(60)

MakeClient = Callable[..., ClientProxy]


def cluster(name: str, seconds: int = 1) -> Cluster:
    c = Cluster(name=name)
    c.connect_timeout.seconds = seconds
    return c


def saved(directory: Path, type_url: str = CLUSTER) -> list[dict[str, Any]]:
    out = []
    for path in directory.glob("*.json"):
        document = json.loads(path.read_text())
        if document.get("type_url") == type_url:
            out.append(document)
    return out


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
def test_restart_with_control_plane_down_then_resume(
    cp: ControlPlane, make_client: MakeClient, tmp_path: Path, protocol: str
) -> None:
    cache_dir = tmp_path / "cache"
    cp.set_resources(CLUSTER, {"a": cluster("a", 1), "b": cluster("b", 2)}, version="7")
    first = make_client(cp.address, protocol=protocol, cache_dir=cache_dir)
    with first.watch(Cluster, ["a", "b"]) as watch:
        watch.next(ResourceUpdated)
        watch.next(ResourceUpdated)
        documents = wait_until(lambda: saved(cache_dir), 5, "the cache file")
    first.close()
    (document,) = documents
    assert document["format"] == FORMAT
    assert {r["name"] for r in document["resources"]} == {"a", "b"}
    if protocol == "sotw":
        assert document["version_info"] == "7"

    cp.stop_serving()
    second = make_client(cp.address, protocol=protocol, cache_dir=cache_dir)
    with second.watch(Cluster, ["a", "b"]) as watch:
        # Delivered at once, with no server, and marked as restored.
        got = {}
        for _ in range(2):
            event = watch.next(ResourceUpdated, timeout=2)
            assert isinstance(event, ResourceRestored)
            got[event.name] = event.resource.connect_timeout.seconds
        assert got == {"a": 1, "b": 2}
        assert set(second.resources(Cluster)) == {"a", "b"}
        mark = cp.mark()
        cp.resume_serving()
        request = cp.wait_for_request(CLUSTER, since=mark, timeout=10)
        held = {r["name"]: r["resource_version"] for r in document["resources"]}
        if protocol == "sotw":
            assert isinstance(request.message, DiscoveryRequest)
            assert request.message.version_info == "7"  # resumes from the persisted version
        else:
            assert isinstance(request.message, DeltaDiscoveryRequest)
            assert dict(request.message.initial_resource_versions) == held
        # A change still arrives; the unchanged resources caused no second event.
        cp.update(CLUSTER, {"a": cluster("a", 5)}, version="8")
        event = watch.next(ResourceUpdated, timeout=10)
        assert not isinstance(event, ResourceRestored)
        assert (event.name, event.resource.connect_timeout.seconds) == ("a", 5)
    if protocol == "delta":
        sent = [r for r in cp.responses(CLUSTER) if r.seq >= 0]
        names = [res.name for r in sent for res in getattr(r.message, "resources", [])]
        assert names.count("b") == 1  # only in the first client's life: no full resend


def test_corrupt_and_foreign_files_are_reported_and_ignored(
    cp: ControlPlane, make_client: MakeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache_dir = tmp_path / "cache"
    cp.set_resources(CLUSTER, {"a": cluster("a")}, version="1")
    first = make_client(cp.address, cache_dir=cache_dir)
    with first.watch(Cluster, "a") as watch:
        watch.next(ResourceUpdated)
        wait_until(lambda: saved(cache_dir), 5, "the cache file")
    first.close()
    (path,) = cache_dir.glob("*.json")
    good = path.read_text()
    cp.stop_serving()
    for bad, why in [
        ("{not json", "not JSON"),
        (json.dumps({"format": "other"}), "is not a"),
        (good.replace('"test-node"', '"someone-else"'), "another node"),
        (good.replace('"value":"', '"value":"!'), "malformed"),
    ]:
        path.write_text(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="xds_client"):
            client = make_client(cp.address, cache_dir=cache_dir)
            with client.watch(Cluster, "a") as watch, pytest.raises(AssertionError):
                watch.next(ResourceUpdated, timeout=0.3)
            client.close()
        assert why in caplog.text
        assert str(path) in caplog.text


def test_secrets_are_not_written_unless_asked(
    cp: ControlPlane, make_client: MakeClient, tmp_path: Path
) -> None:
    secret = Secret(name="s")
    secret.generic_secret.secret.inline_string = "hunter2-private"
    cp.set_resources(SECRET, {"s": secret}, version="1")
    cp.set_resources(CLUSTER, {"a": cluster("a")}, version="1")
    for persist, cache_dir in ((False, tmp_path / "plain"), (True, tmp_path / "asked")):
        client = make_client(
            cp.address, protocol="delta", cache_dir=cache_dir, persist_secrets=persist
        )
        with client.watch(Secret, "s") as secrets, client.watch(Cluster, "a") as clusters:
            secrets.next(ResourceUpdated)
            clusters.next(ResourceUpdated)
            wait_until(lambda d=cache_dir: saved(d), 5, "the cluster file")  # type: ignore[misc]
            if persist:
                wait_until(lambda d=cache_dir: saved(d, SECRET), 5, "the secret file")  # type: ignore[misc]
        client.close()
        written = "".join(p.read_text() for p in cache_dir.glob("*.json"))
        assert bool(saved(cache_dir, SECRET)) == persist
        assert ("aHVudGVyMi1wcml2YXRl" in written) == persist  # base64 of the secret text


def test_restore_per_authority(cp: ControlPlane, make_client: MakeClient, tmp_path: Path) -> None:
    """Each authority's config is kept under its own server, and restored from it."""
    remote = "xdstp://other.example/envoy.config.cluster.v3.Cluster/r"
    cache_dir = tmp_path / "cache"
    with ControlPlane(rest_port=None, heartbeat_interval=None) as other:
        cp.set_resources(CLUSTER, {"a": cluster("a", 1)})
        other.set_resources(CLUSTER, {remote: cluster(remote, 2)})
        options: dict[str, Any] = {
            "cache_dir": cache_dir,
            "authorities": {"other.example": other.address},
        }
        first = make_client(cp.address, **options)
        with first.watch(Cluster, ["a", remote]) as watch:
            watch.next(ResourceUpdated)
            watch.next(ResourceUpdated)
            wait_until(lambda: len(saved(cache_dir)) == 2, 5, "one file per server")
        first.close()
        servers = {d["server"] for d in saved(cache_dir)}
        assert servers == {cp.address, other.address}
        cp.stop_serving()
        other.stop_serving()
        second = make_client(cp.address, **options)
        with second.watch(Cluster, ["a", remote]) as watch:
            got = {watch.next(ResourceRestored, timeout=2).name for _ in range(2)}
        assert got == {"a", remote}
        cp.resume_serving()
