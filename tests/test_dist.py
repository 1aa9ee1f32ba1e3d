"""The built wheel works alone: a fresh venv with only it (and what it pulls in) type-checks
a user script under ``mypy --strict``, serves a YAML file and runs the quickstart.

Slow (a wheel build and a venv install, about 30 s with a warm pip cache); it needs the
package index, as any ``pip install`` does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

USER_SCRIPT = """\
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from typing_extensions import assert_type

from xds_client import Node, XdsClient
from xds_client.testing import ControlPlane


def main() -> None:
    with ControlPlane() as cp:
        cp.set_resources("cds", [Cluster(name="a", type=Cluster.EDS)])
        with XdsClient(cp.address, node=Node(id="n1")) as client:
            cluster = client.wait_for(Cluster, "a", timeout=10)
            assert_type(cluster, Cluster)
            name: str = cluster.name
            seconds: int = cluster.connect_timeout.seconds
            print(name, seconds, Cluster.DiscoveryType.Name(cluster.type))


if __name__ == "__main__":
    main()
"""

# A script that only type-checks when resources are Any: the stubs must reject it.
WRONG_SCRIPT = """\
from envoy.config.cluster.v3.cluster_pb2 import Cluster

port: int = Cluster(name="a").name
"""


def _run(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh venv holding the wheel built from this checkout."""
    base = tmp_path_factory.mktemp("dist")
    built = _run(
        sys.executable, "-m", "build", "--wheel", "--outdir", base / "dist", ROOT, cwd=base
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (base / "dist").glob("xds_client-*.whl")
    venv.create(base / "venv", with_pip=True)
    bin_dir = base / "venv" / "bin"
    pip = _run(
        bin_dir / "python", "-m", "pip", "install", "-q", f"{wheel}[typing]", "mypy", cwd=base
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return bin_dir


def test_user_script_type_checks_strictly(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    (tmp_path / "wrong.py").write_text(WRONG_SCRIPT)
    checked = _run(installed / "mypy", "--strict", "--no-incremental", "user.py", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    wrong = _run(installed / "mypy", "--strict", "--no-incremental", "wrong.py", cwd=tmp_path)
    assert wrong.returncode == 1, wrong.stdout
    assert 'expression has type "str", variable has type "int"' in wrong.stdout
    ran = _run(installed / "python", "user.py", cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["a", "0", "EDS"]


def test_serve_yaml_and_fetch_from_the_install(installed: Path, tmp_path: Path) -> None:
    resources = tmp_path / "resources.yaml"
    resources.write_text((ROOT / "docs" / "examples" / "resources.yaml").read_text())
    serve = subprocess.Popen(
        [installed / "xds-client", "serve", "--resources", resources, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        announced = json.loads(serve.stdout.readline())
        assert announced["event"] == "serving", announced
        fetched = _run(
            installed / "xds-client", "fetch", "-s", announced["address"], "cds", cwd=tmp_path
        )
        assert fetched.returncode == 0, fetched.stderr
        assert "backend" in fetched.stdout
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=20)
    assert serve.returncode == 0


def test_quickstart_runs_from_the_install(installed: Path, tmp_path: Path) -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    server, sync_code = re.findall(r"```python\n(.*?)```", text, re.S)[:2]
    # The fixed port of the page may be taken on this machine: a free one, same code.
    script = server.replace("port=18000", "port=0") + (
        "\nseen = []\n\n"
        "def print(event: object) -> None:\n"
        "    seen.append(event)\n"
        "    if type(event).__name__ == 'ResourceUpdated':\n"
        "        raise SystemExit(0)\n\n"
    )
    script += sync_code.replace('"127.0.0.1:18000"', "cp.address")
    (tmp_path / "quickstart.py").write_text(script)
    ran = _run(installed / "python", "quickstart.py", cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
