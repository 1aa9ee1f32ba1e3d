"""docs/cli.md stays true to the parser: every command and option it names exists."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from xds_client.cli._args import build_parser

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _walk(parser: argparse.ArgumentParser, prefix: str, found: dict[str, set[str]]) -> None:
    options: set[str] = set()
    for action in parser._actions:
        options.update(s for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _walk(sub, f"{prefix} {name}".strip(), found)
    found[prefix] = options


def test_every_documented_option_exists() -> None:
    commands: dict[str, set[str]] = {}
    _walk(build_parser(), "", commands)
    known = set().union(*commands.values())
    text = DOC.read_text(encoding="utf-8")
    documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    assert documented - known == set()
    # ...and every option of the parser is documented (except --help and hidden ones).
    hidden = {"--help", "--reload-interval"}
    assert known - documented - hidden == set()


def test_every_documented_command_exists() -> None:
    commands: dict[str, set[str]] = {}
    _walk(build_parser(), "", commands)
    text = DOC.read_text(encoding="utf-8")
    for line in re.findall(r"^xds-client ([a-z]+(?: [a-z]+)?)", text, re.M):
        words = line.split()
        assert words[0] in commands or " ".join(words) in commands, line
