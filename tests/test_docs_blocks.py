"""Every code block of README.md and docs/*.md runs as written, or says why not.

- A ```python block runs alone, in a fresh namespace (no imports borrowed from the
  block before it). A ```bash block runs with bash -e, ``xds-client`` on PATH, in a
  scratch folder where ``docs/`` is the real one.
- ``<!-- excerpt -->`` (or ``<!-- excerpt: why -->``) on the line before a block
  marks it as shown, not run: a command that serves until Ctrl-C, an install, a
  fragment with ``...``.
- Blocks talk to servers this test starts: an xDS control plane serving
  docs/examples/resources.yaml plus clusters ``a`` and ``b``, and a ResourceStore.
  The only rewrites are their addresses: ``127.0.0.1:18000`` (xDS),
  ``http://127.0.0.1:18001`` (REST), ``127.0.0.1:40311`` (store) and
  ``port=18000`` / ``--port 18000`` (a free port), since fixed ports may be taken here.
- ``print`` in Python blocks stops an endless watch loop after the first resource update.
- Pages whose blocks form one program run in their own tests; they are listed in
  ``RUN_ELSEWHERE`` (that test must exist and name the page). ``text``, ``yaml``, ``json``
  and unlabelled blocks are output or data, not programs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from xds_client import ResourceUpdated
from xds_client.testing import ControlPlane, ResourceStoreServer

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "bash", "sh", "shell"}
# Pages that are one program, block after block, run by their own test.
RUN_ELSEWHERE = {
    "docs/client.md": "tests/client/test_docs_client.py",
    "docs/store.md": "tests/store/test_docs.py",
    "docs/protocol.md": "tests/protocol/test_protocol_docs.py",
    "docs/polling.md": "tests/transport/test_docs_polling_example.py",
    "docs/api.md": "tools/gen_api_docs.py",  # generated signatures, not programs
}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
EXCERPT = re.compile(r"<!--\s*excerpt\b[^>]*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    excerpt: bool

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        page = path.relative_to(ROOT).as_posix()
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            line = text.count("\n", 0, match.start()) + 1
            found.append(
                Block(page, line, match.group(1), match.group(2), bool(EXCERPT.search(before)))
            )
    return found


def to_run() -> list[Block]:
    return [
        b for b in blocks() if b.lang in RUNNABLE and not b.excerpt and b.page not in RUN_ELSEWHERE
    ]


@dataclass
class Servers:
    xds: ControlPlane
    store: ResourceStoreServer

    def rewrite(self, code: str) -> str:
        assert self.xds.rest_url is not None
        return (
            code.replace("http://127.0.0.1:18001", self.xds.rest_url)
            .replace("127.0.0.1:18000", self.xds.address)
            .replace("127.0.0.1:40311", self.store.address)
            .replace("port=18000", "port=0")
            .replace("--port 18000", "--port 0")
        )


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    from envoy.config.cluster.v3.cluster_pb2 import Cluster

    with ControlPlane() as xds, ResourceStoreServer(":memory:") as store:
        xds.load_file(ROOT / "docs" / "examples" / "resources.yaml")
        xds.update("cds", [Cluster(name="a"), Cluster(name="b")])
        yield Servers(xds, store)


class Enough(Exception):  # noqa: N818 - the signal that ends a snippet's endless loop
    pass


def _stopper(*args: object, **kwargs: Any) -> None:
    # A watch loop runs forever: the first resource update shows that it works.
    if any(isinstance(a, ResourceUpdated) for a in args):
        raise Enough


def _close_servers(namespace: dict[str, Any]) -> None:
    for value in namespace.values():
        if isinstance(value, ControlPlane):
            value.close()
        elif isinstance(value, ResourceStoreServer):
            value.stop()


def test_every_page_is_seen_and_run_elsewhere_is_true() -> None:
    assert len(to_run()) >= 10
    for page, runner in RUN_ELSEWHERE.items():
        assert (ROOT / page).exists(), page
        assert Path(page).name in (ROOT / runner).read_text(encoding="utf-8"), (page, runner)


def test_markers_sit_on_blocks() -> None:
    # A marker that is not right before a fence would silently mark nothing.
    for path in PAGES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if EXCERPT.search(line):
                assert i + 1 < len(lines), f"{path}:{i + 1}"
                assert lines[i + 1].startswith("```"), f"{path}:{i + 1}: marker not before a block"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", to_run(), ids=str)
def test_block_runs_as_written(block: Block, servers: Servers, tmp_path: Path) -> None:
    code = servers.rewrite(block.code)
    if block.lang == "python":
        _run_python(block, code)
    else:
        _run_shell(block, code, tmp_path)


@contextmanager
def _registry_restored() -> Iterator[None]:
    # A block may register() a type (docs/resource-types.md); other tests must not see it.
    from xds_client import resources

    by_url, by_alias = dict(resources._by_url), dict(resources._by_alias)
    try:
        yield
    finally:
        resources._by_url.clear()
        resources._by_url.update(by_url)
        resources._by_alias.clear()
        resources._by_alias.update(by_alias)


def _run_python(block: Block, code: str) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__", "print": _stopper}
    with _registry_restored():
        _exec(block, code, namespace)


def _exec(block: Block, code: str, namespace: dict[str, Any]) -> None:
    try:
        exec(compile(code, str(block), "exec"), namespace)
    except Enough:
        pass
    finally:
        _close_servers(namespace)


def _run_shell(block: Block, code: str, tmp_path: Path) -> None:
    if shutil.which("jq") is None and "jq " in code:
        pytest.skip(f"{block} pipes into jq, which is not installed")
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("GRPC_XDS_BOOTSTRAP", None)
    env.pop("GRPC_XDS_BOOTSTRAP_CONFIG", None)
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, f"{block}\n{code}\nstdout:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
