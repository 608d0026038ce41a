"""Sandboxes under each container runtime a profile may choose, and in each image, for the
isolation suite.

``runc`` is always there with the engine; ``runsc`` (gVisor) is installed and registered by
``sandbox/image/ensure-engine.sh``. The data image (``make image-data``) runs the same suite.
Under ``CI=true`` a missing runtime or image fails its tests, it never skips them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, get_args

import docker
import pytest

from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult
from tests.conftest import DATA_IMAGE, IMAGE, LoopThread, Sandbox, require_docker

__all__ = [
    "IMAGES",
    "RUNTIMES",
    "RuntimeSandbox",
    "require_runtime",
    "runtime_sandbox",
    "started_backend",
]

RUNTIMES: tuple[ContainerRuntime, ...] = get_args(ContainerRuntime)
IMAGES: tuple[str, ...] = get_args(SandboxProfile.model_fields["image"].annotation)


def require_runtime(runtime: ContainerRuntime, image: str = "base") -> None:
    """Fail under CI=true, skip elsewhere, when the engine does not offer ``runtime`` (or
    the ``image`` kind is not built)."""
    require_docker(DATA_IMAGE if image == "data" else IMAGE)
    offered = docker.from_env().info().get("Runtimes") or {}
    if runtime in offered:
        return
    problem = f"the Docker engine has no {runtime!r} runtime; run sandbox/image/ensure-engine.sh"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI=true: every runtime is tested)")
    pytest.skip(problem)


class RuntimeSandbox(Sandbox):
    """A :class:`Sandbox` whose per-run profiles keep the backend's runtime."""

    def run(self, program: str, *, tools: Any = None, **profile: Any) -> RunResult:
        chosen = self.backend.profile.model_copy(update=profile) if profile else None
        if chosen is not None:
            chosen = SandboxProfile.model_validate(chosen.model_dump())
        return self.loop.call(self.backend.run(program, profile=chosen, tools=tools))


@contextmanager
def runtime_sandbox(runtime: ContainerRuntime, image: str = "base") -> Iterator[RuntimeSandbox]:
    """A started backend with a warm pool whose containers run under ``runtime``, in the
    ``image`` kind (``base`` or ``data``)."""
    require_runtime(runtime, image)
    loop = LoopThread()
    profile = SandboxProfile.model_validate({"runtime": runtime, "image": image})
    backend = DockerBackend(image=IMAGE, data_image=DATA_IMAGE, pool_size=2, profile=profile)
    loop.call(backend.start())
    try:
        yield RuntimeSandbox(loop, backend)
    finally:
        loop.call(backend.close())
        loop.stop()


@asynccontextmanager
async def started_backend(
    runtime: ContainerRuntime, **profile: Any
) -> AsyncIterator[DockerBackend]:
    """A started backend with no pool whose containers run under ``runtime``, in ``full``
    mode with ``profile``'s other fields: the kept-session suites' own."""
    require_runtime(runtime)
    chosen = SandboxProfile.model_validate({"language_mode": "full", "runtime": runtime, **profile})
    backend = DockerBackend(image=IMAGE, profile=chosen, pool_size=0)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()
