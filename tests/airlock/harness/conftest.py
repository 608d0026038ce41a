"""What the harness's batch and write tests share: their world, on asyncio (a file may
define its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.airlock.harness.batch_world import BatchWorld


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[BatchWorld]:
    w = BatchWorld(tmp_path)
    yield w
    w.close()
