"""Render ``docs/api.md``, the API reference, from the public docstrings.

Offline and stdlib only (``inspect``): it imports the public modules, walks
each one's ``__all__`` in order, and writes every class (constructor, public
methods, properties, dataclass fields) and function with its signature and
docstring. ``python tools/gen_api_docs.py`` rewrites the page; ``--check``
fails when the committed page differs (run it after changing a docstring).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import importlib
import inspect
import itertools
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_overloads

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api.md"

# (module, title, blurb): the order of the page.
MODULES = [
    ("xds_client", "xds_client", "Clients, events, node, resource registry and errors."),
    ("xds_client.graph", "xds_client.graph", "The config graph (see [graph.md](graph.md))."),
    ("xds_client.store", "xds_client.store", "The ResourceStore client (Grafana unified storage)."),
    ("xds_client.lrs", "xds_client.lrs", "Load reporting, LRS (see [lrs.md](lrs.md))."),
    ("xds_client.otel", "xds_client.otel", "gRFC A78 metrics (see [metrics.md](metrics.md))."),
    ("xds_client.testing", "xds_client.testing", "In-process servers for tests and demos."),
    (
        "xds_client.conformance",
        "xds_client.conformance",
        "Check an xDS server against the protocol (see [conformance.md](conformance.md)).",
    ),
    ("xds_client.cli", "xds_client.cli", "The `xds-client` command line (see [cli.md](cli.md))."),
    ("xds_client.load", "xds_client.load", "Simulated xDS clients (see [load.md](load.md))."),
]
# The pytest plugin's fixtures: requested by name, so they are listed by name.
PLUGIN = "xds_client.testing.pytest_plugin"

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, type):
        return value.__qualname__
    return _ADDRESS.sub("", repr(value)).replace("typing.", "")


def _type_text(value: Any) -> str:
    """A type as a reader writes it: ``ResourceUpdated[M] | ResourceRemoved``, no module paths."""
    if isinstance(value, str):
        return value  # a string alias (``Value: TypeAlias = "bytes | ..."``) is its text
    if isinstance(value, TypeVar):
        return value.__name__
    origin, args = get_origin(value), get_args(value)
    if origin is Union:
        return " | ".join(_type_text(arg) for arg in args)
    if origin is not None and args:
        name = getattr(value, "__name__", None) or getattr(origin, "__name__", repr(origin))
        return f"{name}[{', '.join(_type_text(arg) for arg in args)}]"
    if isinstance(value, type):
        return value.__qualname__
    return _ADDRESS.sub("", repr(value)).replace("typing.", "")


def _is_type_alias(value: Any) -> bool:
    return get_origin(value) is not None or isinstance(value, TypeVar)


def _default(value: Any) -> str:
    if value is Ellipsis:  # an overload's `= ...`
        return "..."
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return _ADDRESS.sub("", repr(value))


def _signature(obj: Any, *, skip_self: bool = False) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts: list[str] = []
    star_done = False
    params = list(sig.parameters.values())
    if skip_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for param in params:
        kind = param.kind
        if kind is inspect.Parameter.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        name = param.name
        if kind is inspect.Parameter.VAR_POSITIONAL:
            name, star_done = "*" + name, True
        elif kind is inspect.Parameter.VAR_KEYWORD:
            name = "**" + name
        annotation = _annotation(param.annotation)
        text = f"{name}: {annotation}" if annotation else name
        if param.default is not inspect.Parameter.empty:
            text += f" = {_default(param.default)}" if annotation else f"={_default(param.default)}"
        parts.append(text)
        if kind is inspect.Parameter.POSITIONAL_ONLY and (
            param is params[-1]
            or params[params.index(param) + 1].kind is not inspect.Parameter.POSITIONAL_ONLY
        ):
            parts.append("/")
    returns = _annotation(sig.return_annotation)
    return f"({', '.join(parts)})" + (f" -> {returns}" if returns else "")


_ROLE = re.compile(r":(?:class|func|meth|attr|exc|mod|data):`(~?)([\w.]+)`")


def _markdown(doc: str) -> str:
    """Docstrings use reST roles and double backticks; Markdown wants single ones."""
    doc = _ROLE.sub(
        lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", doc
    )
    return re.sub(r"``(.+?)``", r"`\1`", doc, flags=re.S)


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return _markdown(doc.strip()) if doc else "*(no docstring)*"


def _own_doc(cls: type, name: str, member: Any) -> str:
    # A member without its own docstring would show the base class's text; say nothing then.
    doc = member.fget.__doc__ if isinstance(member, property) and member.fget else member.__doc__
    return _markdown(inspect.cleandoc(doc)) if doc else ""


def _is_exception(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseException)


def _field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings: the string literal right after ``name: type`` in the class body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = _markdown(" ".join(after.value.value.split()))
    return docs


def _private_base(base: type) -> bool:
    """A base class of ours that no documented module exports."""
    if not base.__module__.startswith("xds_client."):
        return False
    return not any(
        getattr(importlib.import_module(module), base.__name__, None) is base
        for module, _, _ in MODULES
    )


def _members(cls: type) -> list[str]:
    lines: list[str] = []
    if dataclasses.is_dataclass(cls):
        fields = [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        docs = _field_docs(cls)
        if fields:
            lines.append("Fields:\n")
            for field in fields:
                doc = docs.get(field.name)
                text = f"- `{field.name}: {_annotation(field.type)}`"
                lines.append(text + (f": {doc}" if doc else ""))
            lines.append("")
    methods: list[str] = []
    # Members inherited from an undocumented base of ours (ResourceStoreServer's engine)
    # are the class's own API: listed with it, base first.
    owners = [cls, *(base for base in cls.__mro__[1:] if _private_base(base))][::-1]
    own = {name: member for owner in owners for name, member in vars(owner).items()}
    for name, member in own.items():
        if name.startswith("_") and name not in ("__call__",):
            continue
        if isinstance(member, property):
            doc = _own_doc(cls, name, member)
            getter = member.fget
            returns = _annotation(inspect.signature(getter).return_annotation) if getter else ""
            head = f"`{name}` *(property{': ' + returns if returns else ''})*"
        elif isinstance(member, (staticmethod, classmethod)):
            func = member.__func__
            doc = _own_doc(cls, name, func)
            kind = "classmethod" if isinstance(member, classmethod) else "staticmethod"
            head = f"`{name}{_signature(func, skip_self=True)}` *({kind})*"
        elif inspect.isfunction(member):
            doc = _own_doc(cls, name, member)
            prefix = "async " if inspect.iscoroutinefunction(member) else ""
            overloads = get_overloads(member)
            if overloads:
                # The typed overloads are the API; the implementation's `-> Any` is not.
                head = f"`{prefix}{name}` *(overloaded)*"
                forms = [f"  - `{prefix}{name}{_signature(o, skip_self=True)}`" for o in overloads]
                text = f"- {head}" + (f": {_indent_tail(doc)}" if doc else "")
                methods.append(text + "\n" + "\n".join(forms))
                continue
            head = f"`{prefix}{name}{_signature(member, skip_self=True)}`"
        else:
            continue
        methods.append(f"- {head}" + (f": {_indent_tail(doc)}" if doc else ""))
    if methods:
        lines += ["Methods and properties:", "", *methods]
    return lines


def _indent_tail(doc: str) -> str:
    first, _, rest = doc.partition("\n")
    if not rest:
        return first
    return first + "\n" + "\n".join(("  " + line) if line else "" for line in rest.splitlines())


def _render_object(module_name: str, name: str, obj: Any) -> list[str]:
    lines = [f"### `{name}`", ""]
    if inspect.isclass(obj):
        if _is_exception(obj):
            bases = ", ".join(b.__name__ for b in obj.__bases__)
            lines += [f"*exception* `{name}({bases})`", "", _doc(obj), ""]
            return lines
        # A constructor inherited from a private base is still the class's own API.
        has_init = any("__init__" in vars(k) for k in obj.__mro__ if k is not object)
        signature = _signature(obj) if has_init or dataclasses.is_dataclass(obj) else ""
        signature = signature.removesuffix(" -> None")  # a class makes an instance, not None
        lines += ["```python", f"class {name}{signature}", "```", "", _doc(obj), ""]
        members = _members(obj)
        if members:
            lines += [*members, ""]
        return lines
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        prefix = "async def" if inspect.iscoroutinefunction(obj) else "def"
        forms = [f"{prefix} {name}{_signature(o)}" for o in get_overloads(obj)]
        if forms:
            forms = ["@overload\n" + form for form in forms]
        else:
            forms = [f"{prefix} {name}{_signature(obj)}"]
        lines += ["```python", *forms, "```", "", _doc(obj), ""]
        return lines
    # Type aliases: the types they stand for, whole; constants: their value, briefly.
    if _is_type_alias(obj) or (isinstance(obj, str) and _looks_like_type(name)):
        lines += ["```python", f"{name} = {_type_text(obj)}", "```", ""]
        return lines
    value = _ADDRESS.sub("", repr(obj)).replace("typing.", "")
    if len(value) > 200:
        value = value[:197] + "..."
    lines += ["```python", f"{name} = {value}", "```", ""]
    return lines


def _looks_like_type(name: str) -> bool:
    """A string constant declared ``Name: TypeAlias = "..."`` is a type, not a string."""
    modules = [m for n, m in list(sys.modules.items()) if n.startswith("xds_client") and m]
    return any(
        "TypeAlias" in str(vars(m).get("__annotations__", {}).get(name, "")) for m in modules
    )


def _fixtures() -> list[str]:
    """The plugin's fixtures: name, what it gives and its docstring."""
    import pytest

    plugin = importlib.import_module(PLUGIN)
    lines = [
        "## pytest fixtures",
        "",
        "Installing xds_client registers a pytest plugin (`xds_client.testing.pytest_plugin`);",
        "a test asks for a fixture by naming it as a parameter. See [testing.md](testing.md).",
        "",
    ]
    for name, value in vars(plugin).items():
        function = _fixture_function(value, pytest)
        if function is None or name.startswith("_"):
            continue
        returns = _annotation(inspect.signature(function).return_annotation)
        params = ", ".join(inspect.signature(function).parameters)
        head = f"### `{name}`"
        lines += [head, ""]
        lines += ["```python", f"def test_...({name}: {_yielded(returns)}): ...", "```", ""]
        if params:
            lines += [f"Uses: {', '.join(f'`{p}`' for p in params.split(', '))}.", ""]
        lines += [_doc(function), ""]
    return lines


def _fixture_function(value: Any, pytest: Any) -> Any:
    """The function behind ``@pytest.fixture`` (its wrapper differs between pytest versions)."""
    wrapped = getattr(value, "_get_wrapped_function", None)
    if callable(wrapped):
        return wrapped()
    if getattr(value, "_pytestfixturefunction", None) is not None:
        return getattr(value, "__wrapped__", value)
    return None


def _yielded(returns: str) -> str:
    """``Iterator[ControlPlane]`` -> ``ControlPlane``: a test gets what the fixture yields."""
    match = re.fullmatch(r"(?:Iterator|Generator)\[(.+?)(?:, .*)?\]", returns)
    return match.group(1) if match else returns


def render() -> str:
    """The whole page."""
    out = [
        "# API reference",
        "",
        "<!-- Generated by tools/gen_api_docs.py from the docstrings; do not edit by hand. -->",
        "",
        "Everything public, module by module, in the order of each module's `__all__`. The",
        "guides explain how the pieces fit: [client](client.md), [store](store.md),",
        "[testing](testing.md), [protocol](protocol.md).",
        "",
    ]
    for _, title, blurb in MODULES:
        out.append(f"- [`{title}`](#{title.replace('.', '')}): {blurb}")
    out.append("- [pytest fixtures](#pytest-fixtures): what the pytest plugin gives a test.")
    out.append("")
    for module_name, title, blurb in MODULES:
        module = importlib.import_module(module_name)
        out += [f"## {title}", "", blurb, ""]
        for name in getattr(module, "__all__", []):
            if name.startswith("__"):
                continue
            out += _render_object(module_name, name, getattr(module, name))
    out += _fixtures()
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write docs/api.md, or with --check report whether it is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/api.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            stale = OUTPUT.relative_to(ROOT)
            print(f"{stale} is stale: run make docs", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
