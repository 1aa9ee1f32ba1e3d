"""The error tree drawn in ``xds_client/errors.py`` is the real one, and it is complete."""

from __future__ import annotations

import importlib
import pkgutil
import re

import xds_client
from xds_client import errors
from xds_client.errors import XdsClientError

_LINE = re.compile(r"^    (?P<branch>[│├└─ ]*)(?P<name>[A-Z]\w*)\b")


def _drawn() -> dict[str, str | None]:
    """Each class drawn in the module docstring -> the class drawn as its parent."""
    assert errors.__doc__ is not None
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in errors.__doc__.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        depth = len(match["branch"]) // 4
        del stack[depth:]
        parents[match["name"]] = stack[-1] if stack else None
        stack.append(match["name"])
    return parents


_NOT_IMPORTED = frozenset({"xds_client.load.locust"})
"""Importing Locust monkey-patches the whole process with gevent (pytest's too: the
run then hangs in gevent's hub); it defines no error of its own."""


def _public_errors() -> dict[str, type[XdsClientError]]:
    for module in pkgutil.walk_packages(xds_client.__path__, "xds_client."):
        if module.name.endswith("__main__") or module.name in _NOT_IMPORTED:
            continue
        importlib.import_module(module.name)
    found: dict[str, type[XdsClientError]] = {}
    todo: list[type[XdsClientError]] = [XdsClientError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("xds_client") and not cls.__name__.startswith("_"):
            found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def test_every_public_error_is_drawn_once_under_its_base() -> None:
    drawn = _drawn()
    classes = _public_errors()
    assert sorted(set(classes) - set(drawn)) == [], "draw these in errors.py"
    assert sorted(set(drawn) - set(classes)) == [], "drawn but not an XdsClientError"
    for name, parent in drawn.items():
        bases = [base.__name__ for base in classes[name].__bases__]
        if parent is None:
            assert classes[name] is XdsClientError
        else:
            assert parent in bases, f"{name} is drawn under {parent}, its bases are {bases}"


def test_the_drawing_is_read_as_a_tree() -> None:
    drawn = _drawn()
    assert drawn["XdsClientError"] is None
    assert drawn["RuleViolationError"] == "ResourceValidationError"
    assert drawn["DeletedWithoutObjectError"] == "InvalidResponseError"
    assert drawn["WaitTimeoutError"] == "XdsClientError"


def test_resource_validation_error_is_exported_at_the_root() -> None:
    # docs/client.md tells users to raise it from their validators
    assert xds_client.ResourceValidationError is errors.ResourceValidationError
    assert "ResourceValidationError" in xds_client.__all__
