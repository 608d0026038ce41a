"""Fixtures for the tool tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airlock.tools import Registry
from tests.tools.billing import Handled, build_registry
from tests.tools.loopback import Upstream, serve
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


@pytest.fixture(scope="module")
def _upstream() -> Iterator[Upstream]:
    with serve(Upstream()) as up:
        yield up


@pytest.fixture
def upstream(_upstream: Upstream) -> Upstream:
    """A loopback HTTP service for the REST adapter, its script and record emptied."""
    _upstream.script.clear()
    _upstream.seen.clear()
    return _upstream
