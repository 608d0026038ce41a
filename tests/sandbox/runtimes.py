"""Sandboxes under each container runtime a profile may choose, for the isolation suite.

``runc`` is always there with the engine; ``runsc`` (gVisor) is installed and registered by
``sandbox/image/ensure-engine.sh``. Under ``CI=true`` a missing runtime fails its tests, it
never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, get_args

import docker
import pytest

from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult
from tests.conftest import IMAGE, LoopThread, Sandbox, require_docker

__all__ = ["RUNTIMES", "RuntimeSandbox", "require_runtime", "runtime_sandbox"]

RUNTIMES: tuple[ContainerRuntime, ...] = get_args(ContainerRuntime)


def require_runtime(runtime: ContainerRuntime) -> None:
    """Fail under CI=true, skip elsewhere, when the engine does not offer ``runtime``."""
    require_docker()
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
def runtime_sandbox(runtime: ContainerRuntime) -> Iterator[RuntimeSandbox]:
    """A started backend with a warm pool whose containers run under ``runtime``."""
    require_runtime(runtime)
    loop = LoopThread()
    backend = DockerBackend(image=IMAGE, pool_size=2, profile=SandboxProfile(runtime=runtime))
    loop.call(backend.start())
    try:
        yield RuntimeSandbox(loop, backend)
    finally:
        loop.call(backend.close())
        loop.stop()
