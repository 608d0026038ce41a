"""Fixtures for the tool tests."""

from __future__ import annotations

import pytest

from airlock.tools import Registry
from tests.tools.billing import Handled, build_registry
from tests.tools.stores import backend  # noqa: F401 -- the fixture, for the store suites


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def handled() -> Handled:
    return Handled()


@pytest.fixture
def registry(handled: Handled) -> Registry:
    return build_registry(handled)
