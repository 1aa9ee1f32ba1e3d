"""The pytest plugin at first contact (issue #35): both protocols, waits that say what
they awaited and point at the test, and a warning for a client a test leaves open."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

SUITE = """
import pytest
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from xds_client import Node, XdsClient


def test_connected(xds_control_plane, xds_client_connected):
    xds_control_plane.set_resources("cds", [Cluster(name="a")], version="1")
    assert xds_client_connected.wait_for(Cluster, "a", timeout=5).name == "a"


def test_wait_names_what_it_awaited(xds_control_plane, xds_client_connected):
    xds_control_plane.set_resources("cds", [Cluster(name="a")], version="1")
    xds_client_connected.wait_for(Cluster, "a", timeout=5)
    xds_control_plane.wait_for_ack("cds", version="42", timeout=0.5)


def test_leaks_a_client(xds_control_plane):
    client = XdsClient(xds_control_plane.address, node=Node(id="leak"))
    client.watch(Cluster, "a")
"""


def test_the_plugin_at_first_contact(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-W", "default",
         "--tb=long", "test_suite.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    out = result.stdout
    # The connected client runs over both protocols.
    assert "test_connected[sotw] PASSED" in out
    assert "test_connected[delta] PASSED" in out
    # A wait that runs out says what it awaited, and the traceback stops at the test.
    assert "an ACK of version '42' of type.googleapis.com/envoy.config.cluster.v3.Cluster" in out
    failure = out.split("test_wait_names_what_it_awaited[sotw]", 2)[-1]
    assert "wait_for_ack(" in failure
    assert "_control_plane.py" not in failure.split("short test summary")[0]
    assert "_log.py" not in failure.split("short test summary")[0]
    # A client left running is named in a warning.
    assert "XdsClientLeakWarning" in out
    assert "test_leaks_a_client left <XdsClient" in out
