"""The names an application needs to run a session, from the composition root: loaded on
first use (``airlock.__getattr__``), so the check resolves every one of them."""

from __future__ import annotations

import importlib

import pytest

import airlock
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
    "Budget",
    "Harness",
    "MalformedBlockError",
    "MissingExtraError",
    "ModelResult",
    "ModelTool",
    "ModelToolSurface",
    "PendingWrite",
    "Provider",
    "ReplayError",
    "ReplayModel",
    "Session",
    "Transcript",
    "anthropic_tools",
    "handle_block",
    "handle_turn",
    "openai_chat_tools",
    "openai_responses_tools",
    "render_tools",
    "requires_extra",
]


def test_public_api_is_pinned() -> None:
    assert_public_api(airlock, PUBLIC_API)


def test_each_lazy_name_is_its_home_packages_object() -> None:
    homes = [importlib.import_module(f"airlock.{room}") for room in ("harness", "frontends")]
    for name in PUBLIC_API:
        value = getattr(airlock, name)
        owners = [home for home in homes if getattr(home, name, None) is value]
        assert owners or name in ("MissingExtraError", "requires_extra"), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NotAName'"):
        getattr(airlock, "NotAName")  # noqa: B009
