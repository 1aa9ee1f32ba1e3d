"""Every code block of README.md and docs/*.md runs as written, or says why not.

- A ```python block runs alone, in a fresh namespace (no imports borrowed from the
  block before it). A ```bash block runs with bash -e, ``xds-client`` on PATH, in a
  scratch folder where ``docs/`` is the real one.
- ``<!-- excerpt -->`` (or ``<!-- excerpt: why -->``) on the line before a block
  marks it as shown, not run: an install, a fragment, a server that needs your
  credentials.
- Blocks talk only to the servers their own page starts, on the ports the page names:
  nothing is rewritten. ``<!-- server -->`` (or ``<!-- server: why -->``) marks the block
  that starts one: a ```python block whose servers stay up until the page's last block
  has run, or a ```bash block that serves until Ctrl-C, which the test runs in the
  background (as the reader's other terminal) until the page is done.
  ``<!-- server, or: why -->`` marks an alternative to the server block before it: the
  page then runs a second time, on that server instead.
- Pages that start servers on fixed ports run one at a time (a lock file), also across
  test processes; a port the page names that something else holds fails the test with
  that reason.
- ``print`` in Python blocks stops an endless watch loop after the first resource update.
- Pages whose blocks form one program run in their own tests; they are listed in
  ``RUN_ELSEWHERE`` (that test must exist and name the page). ``text``, ``yaml``, ``json``
  and unlabelled blocks are output or data, not programs.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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
MARKER = re.compile(r"<!--\s*(excerpt|server, or|server)\b[^>]*-->\s*$")
# The ports a serving command names: the test waits until each accepts connections.
PORT_OPTION = re.compile(r"--(?:port|rest-port|store-port)[ =](\d+)")
PORT_LOCK = Path(tempfile.gettempdir()) / "xds-client-doc-ports.lock"
SERVER_START = 30.0  # seconds a background server may take to open its ports


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    marker: str | None  # "excerpt", "server", "server, or" or None

    @property
    def excerpt(self) -> bool:
        return self.marker == "excerpt"

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
            marker = MARKER.search(before)
            found.append(
                Block(
                    page, line, match.group(1), match.group(2), marker.group(1) if marker else None
                )
            )
    return found


def to_run() -> list[Block]:
    return [
        b for b in blocks() if b.lang in RUNNABLE and not b.excerpt and b.page not in RUN_ELSEWHERE
    ]


@dataclass(frozen=True)
class PageRun:
    """One pass over a page: its blocks in order, with one choice of server."""

    page: str
    blocks: tuple[Block, ...]

    def __str__(self) -> str:
        servers = [str(b.line) for b in self.blocks if b.marker is not None]
        return self.page + (f"[server@{','.join(servers)}]" if servers else "")


def page_runs() -> list[PageRun]:
    runs = []
    by_page: dict[str, list[Block]] = {}
    for block in to_run():
        by_page.setdefault(block.page, []).append(block)
    for page, page_blocks in by_page.items():
        alternatives = [b for b in page_blocks if b.marker == "server, or"]
        first = [b for b in page_blocks if b.marker != "server, or"]
        runs.append(PageRun(page, tuple(first)))
        for alternative in alternatives:
            # The alternative stands in for the server block before it.
            replaced = [
                b for b in page_blocks if b.marker == "server" and b.line < alternative.line
            ][-1]
            chosen = [
                alternative if b is replaced else b for b in page_blocks if b.marker != "server, or"
            ]
            runs.append(PageRun(page, tuple(chosen)))
    return runs


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
            if MARKER.search(line):
                assert i + 1 < len(lines), f"{path}:{i + 1}"
                assert lines[i + 1].startswith("```"), f"{path}:{i + 1}: marker not before a block"


def test_nothing_is_rewritten_and_servers_come_from_the_page() -> None:
    # The pages that talk to fixed ports start what listens there themselves.
    for run in page_runs():
        code = "\n".join(b.code for b in run.blocks)
        if re.search(r"127\.0\.0\.1:(18000|18001|40311)", code):
            assert any(b.marker is not None for b in run.blocks), f"{run}: who serves?"
    alternatives = [b for b in blocks() if b.marker == "server, or"]
    assert alternatives, "quickstart.md offers two servers; both must be run"
    serving = [b for b in blocks() if b.marker in ("server", "server, or") and b.lang == "bash"]
    assert serving
    assert all("--port" in b.code for b in serving)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("run", page_runs(), ids=str)
def test_page_runs_as_written(run: PageRun, tmp_path: Path) -> None:
    with ExitStack() as stack:
        if any(b.marker is not None for b in run.blocks):
            stack.enter_context(_fixed_ports())
        for block in run.blocks:
            if block.lang == "python":
                namespace = _run_python(block, keep=block.marker is not None)
                if namespace is not None:
                    stack.callback(_close_servers, namespace)
            elif block.marker is not None:
                stack.enter_context(_serving(block, tmp_path))
            else:
                _run_shell(block, block.code, tmp_path)


@contextmanager
def _fixed_ports() -> Iterator[None]:
    """One page with fixed ports at a time, across processes (other test runs too)."""
    with PORT_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def _serving(block: Block, tmp_path: Path) -> Iterator[None]:
    """Run a serving bash block in the background until the page is done."""
    ports = [int(p) for p in PORT_OPTION.findall(block.code)]
    taken = [p for p in ports if _accepting(p)]
    assert not taken, f"{block}: port(s) {taken} already in use here; the page needs them free"
    log = tmp_path / f"server-{block.line}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            ["bash", "-e", "-c", block.code],
            cwd=_scratch(tmp_path),
            env=_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: Ctrl-C reaches serve, not us
        )
    try:
        deadline = time.monotonic() + SERVER_START
        while not all(_accepting(p) for p in ports):
            assert process.poll() is None, f"{block} ended early:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{block} opened no port:\n{log.read_text()}"
            time.sleep(0.1)
        yield
    finally:
        os.killpg(process.pid, signal.SIGINT)  # what the reader's Ctrl-C does
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = log.read_text()
    assert "Traceback" not in output, output


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


def _run_python(block: Block, *, keep: bool) -> dict[str, Any] | None:
    """Run a block; with ``keep``, return its namespace with its servers still up."""
    namespace: dict[str, Any] = {"__name__": "__main__", "print": _stopper}
    with _registry_restored():
        try:
            exec(compile(block.code, str(block), "exec"), namespace)
        except Enough:
            pass
        except BaseException:
            _close_servers(namespace)
            raise
    if keep:
        return namespace
    _close_servers(namespace)
    return None


def _scratch(tmp_path: Path) -> Path:
    if not (tmp_path / "docs").exists():
        (tmp_path / "docs").symlink_to(ROOT / "docs")
    return tmp_path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("GRPC_XDS_BOOTSTRAP", "GRPC_XDS_BOOTSTRAP_CONFIG", "XDS_CLIENT_SERVER"):
        env.pop(name, None)
    return env


def _run_shell(block: Block, code: str, tmp_path: Path) -> None:
    if shutil.which("jq") is None and "jq " in code:
        return  # pipes into jq, which is not installed here
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", code],
        cwd=_scratch(tmp_path),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, f"{block}\n{code}\nstdout:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
