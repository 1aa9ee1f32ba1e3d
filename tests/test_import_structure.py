"""The import structure of src/: layers that only look down, and no cycles.

Every ``import`` in ``src/xds_client`` is read with :mod:`ast`, wherever it sits: at the
top of a module, inside a function (a lazy import still ties the two modules together)
or under ``if TYPE_CHECKING:`` (two modules whose types need each other are one concept
cut in two). Three rules hold:

- no module imports a package that contains it (``xds_client/__init__.py`` is the
  facade for users; ``xds_client.store`` for the store's users, ...);
- a lower layer never imports a higher one (:data:`LAYERS`);
- no two modules import each other, directly or around a loop.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "xds_client"

# Each top-level part of the package and its layer: a module may import its own part and
# the parts of a lower layer, never a part of its own layer or of a higher one.
LAYERS: dict[str, int] = {
    # what every layer uses: versions, errors, the clock, tables for notebooks
    "_version": 0,
    "errors": 0,
    "_clock": 0,
    "_gc": 0,
    "_tables": 0,
    "_prebuilt_dataclasses": 0,  # the import line's dataclasses, methods written at build time
    # plain values and the I/O primitives of the two drivers
    "resources": 1,
    "federation": 1,
    "node": 1,
    "_backoff": 1,
    "_backends": 1,
    # the sans-I/O protocol core
    "protocol": 2,
    # streams to a server
    "transport": 3,
    # what a program uses: the store client, the config graph (below the xDS client,
    # whose ``config_watch`` builds one), the load reporting client, the xDS client
    "store": 4,
    "graph": 4,
    "lrs": 4,
    "client": 5,
    # on top of a client: the conformance checker, the load generator, the
    # OpenTelemetry metrics hooks
    "conformance": 6,
    "load": 6,
    "otel": 6,
    # servers and fixtures for tests, then the command line on top of everything
    "testing": 7,
    "cli": 8,
    "__main__": 9,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Import:
    source: str
    """The importing module (``xds_client.client._session``)."""
    target: str
    """The imported module of this package."""
    line: int
    where: str
    """``top``, ``function`` (a lazy import) or ``TYPE_CHECKING``."""

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.where})"


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _known(name: str) -> str:
    """The longest prefix of ``name`` that is a module of this package ('' if none)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        base = module.split(".")
        if not _is_package(module):
            base.pop()
        base = base[: len(base) - (node.level - 1)]
        origin = ".".join([*base, node.module] if node.module else base)
    else:
        origin = node.module or ""
    for alias in node.names:
        # ``from pkg import submodule`` imports the submodule, not the package's facade
        submodule = f"{origin}.{alias.name}"
        yield submodule if submodule in MODULES else origin


def _imports_of(module: str) -> Iterator[Import]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    where: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                where.setdefault(id(inner), "function")
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in ast.walk(node):
                where[id(inner)] = "TYPE_CHECKING"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in _targets(module, node):
                target = _known(name)
                if target and target != module:
                    yield Import(
                        source=module,
                        target=target,
                        line=node.lineno,
                        where=where.get(id(node), "top"),
                    )


IMPORTS: list[Import] = [imp for module in MODULES for imp in _imports_of(module)]


def _part(module: str) -> str:
    """The top-level part a module belongs to ('' for the package facade itself)."""
    return module.split(".")[1] if "." in module else ""


def test_the_layer_table_names_every_part() -> None:
    parts = {_part(module) for module in MODULES} - {""}
    assert parts - set(LAYERS) == set(), "give every new part of the package a layer"
    assert set(LAYERS) - parts == set(), "a layer names a part that no longer exists"


def test_no_module_imports_a_package_that_contains_it() -> None:
    upward = [
        str(imp)
        for imp in IMPORTS
        if _is_package(imp.target) and imp.source.startswith(imp.target + ".")
    ]
    assert not upward, "import from the module that defines the name:\n" + "\n".join(upward)


def test_no_lower_layer_imports_a_higher_one() -> None:
    upward = []
    for imp in IMPORTS:
        source, target = _part(imp.source), _part(imp.target)
        if source and target and source != target and LAYERS[source] <= LAYERS[target]:
            upward.append(f"{imp} [{source}={LAYERS[source]}, {target}={LAYERS[target]}]")
    assert not upward, "\n".join(upward)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles() -> None:
    edges: dict[str, set[str]] = {}
    for imp in IMPORTS:
        edges.setdefault(imp.source, set()).add(imp.target)
    report = []
    for cycle in _cycles(edges):
        members = set(cycle)
        report.append(" ".join(cycle))
        report += sorted(
            {f"  {imp}" for imp in IMPORTS if imp.source in members and imp.target in members}
        )
    assert not report, "modules that import each other are one concept (merge or re-cut):\n" + (
        "\n".join(report)
    )


def test_the_checker_sees_a_cycle_and_a_lazy_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    # this file's own parse: a function-level import is seen as one
    lazy = [imp for imp in IMPORTS if imp.where == "function"]
    assert lazy, "the pytest plugin imports its servers on use"


@pytest.mark.parametrize("module", ["xds_client.protocol._sotw", "xds_client.cli._args"])
def test_the_checker_resolves_relative_and_absolute_imports(module: str) -> None:
    assert any(imp.source == module for imp in IMPORTS)
