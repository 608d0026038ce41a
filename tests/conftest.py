"""Shared fixtures: a real Docker engine for `docker`-marked tests.

Without an engine those tests skip on a developer's machine; under ``CI=true`` they fail,
because a green CI must mean the real sandbox was exercised.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import docker
import pytest

from airlock.bridge import ToolSession
from airlock.policies import SandboxProfile
from airlock.sandbox import DEFAULT_DATA_IMAGE, DEFAULT_IMAGE, DockerBackend, RunResult
from airlock.sandbox._owner import OWNER_LABEL, labelled_containers, owner_label
from tests.postgres import postgres_url  # noqa: F401 -- the fixture, for every test

T = TypeVar("T")
IMAGE = os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE)
DATA_IMAGE = os.environ.get("AIRLOCK_DATA_IMAGE", DEFAULT_DATA_IMAGE)


def _engine_problem(image: str) -> str | None:
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.images.get(image)
    except Exception as exc:
        return f"Docker engine or image {image!r} unavailable: {exc}"
    return None


def require_docker(image: str = IMAGE) -> None:
    """Fail under CI=true, skip elsewhere, when the engine or ``image`` is missing (the data
    image: ``make image-data``)."""
    problem = _engine_problem(image)
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI=true: Docker tests must run, not skip)")
    pytest.skip(f"{problem} (set CI=true to fail instead)")


class LoopThread:
    """An event loop on its own thread, so one backend and its pool serve many sync tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class Sandbox:
    """A started DockerBackend with a warm pool, driven synchronously."""

    def __init__(self, loop: LoopThread, backend: DockerBackend) -> None:
        self.loop = loop
        self.backend = backend

    def run(self, program: str, *, tools: ToolSession | None = None, **profile: Any) -> RunResult:
        chosen = SandboxProfile(**profile) if profile else None
        return self.loop.call(self.backend.run(program, profile=chosen, tools=tools))

    def wait_pool(self, timeout: float = 60) -> None:
        self.loop.call(self.backend.pool.wait_ready(self.backend.pool.size, timeout=timeout))


@pytest.fixture(autouse=True, scope="session")
def _airlock_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A temporary ``$AIRLOCK_HOME`` for the whole session: a ``Harness`` without an audit
    store writes ``audit.db`` there, never to the real state directory."""
    before = os.environ.get("AIRLOCK_HOME")
    os.environ["AIRLOCK_HOME"] = str(tmp_path_factory.mktemp("airlock-home"))
    yield
    if before is None:
        os.environ.pop("AIRLOCK_HOME", None)
    else:
        os.environ["AIRLOCK_HOME"] = before


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    require_docker()
    loop = LoopThread()
    backend = DockerBackend(image=IMAGE, pool_size=2)
    loop.call(backend.start())
    try:
        yield Sandbox(loop, backend)
    finally:
        loop.call(backend.close())
        loop.stop()
        # Only this process's containers: other test runs may share the engine.
        mine = owner_label().rsplit("/", 1)[0] + "/"
        left = [
            entry["Id"]
            for entry in labelled_containers(docker.from_env())
            if (entry.get("Labels") or {}).get(OWNER_LABEL, "").startswith(mine)
        ]
        assert not left, f"sandbox containers left behind by this test session: {left}"


@pytest.fixture
def docker_client() -> docker.DockerClient:
    require_docker()
    return docker.from_env()


__all__ = ["DATA_IMAGE", "IMAGE", "Sandbox", "require_docker"]
