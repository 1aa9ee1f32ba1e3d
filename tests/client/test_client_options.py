"""The client options are declared once: ClientOptions, which the docs' table follows."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from xds_client.client import ClientArgs, ClientOptions
from xds_client.client._options import build_options
from xds_client.errors import UsageError
from xds_client.protocol import ProtocolConfig

DOCS = Path(__file__).resolve().parents[2] / "docs" / "client.md"
_ROW = re.compile(r"^\| `(?P<name>\w+)` \| `(?P<default>[^`]+)` \|")


def _defaults() -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(ClientOptions):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def test_the_docs_table_shows_the_declared_defaults() -> None:
    shown = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match is not None:
            shown[match["name"]] = ast.literal_eval(match["default"])
    assert shown, "the Options table of docs/client.md"
    declared = _defaults()
    assert {name: declared[name] for name in shown} == shown


def test_every_option_a_user_gives_is_a_client_option_or_builds_a_server() -> None:
    fields = {f.name for f in dataclasses.fields(ClientOptions)}
    connection = {
        "credentials",
        "bearer_token",
        "metadata",
        "call_credentials",
        "keepalive",
        "max_receive_message_size",
        "server_features",
    }
    assert set(ClientArgs.__optional_keys__) - connection <= fields


def test_the_client_and_the_core_share_the_timeout_default_and_its_check() -> None:
    assert (
        build_options("x:1").does_not_exist_timeout
        == ProtocolConfig.__dataclass_fields__["does_not_exist_timeout"].default
    )
    with pytest.raises(UsageError, match="does_not_exist_timeout must be positive"):
        build_options("x:1", does_not_exist_timeout=0)


def test_options_are_frozen_and_unknown_keywords_refused() -> None:
    options = build_options("x:1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.queue_size = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'queue'"):
        build_options("x:1", queue=3)  # type: ignore[call-arg]
