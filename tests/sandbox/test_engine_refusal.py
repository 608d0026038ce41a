"""A profile the engine refuses as invalid (more CPUs than the machine has) fails every start
the same way: runs are told at once that retrying is no use, and the warm pool stops instead
of starting and failing again every few seconds."""

from __future__ import annotations

import asyncio
import os

import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, SandboxRefused
from tests.conftest import IMAGE, require_docker

# The profile allows up to 64 cores; the engine refuses a quota over the machine's count.
TOO_MANY_CPUS = float(min(64, (os.cpu_count() or 1) + 1))


@pytest.mark.parametrize("pool_size", [0, 1])
def test_more_cpus_than_the_machine_has_is_refused_for_good(pool_size: int) -> None:
    require_docker()

    async def main() -> None:
        profile = SandboxProfile(cpus=TOO_MANY_CPUS)
        async with DockerBackend(image=IMAGE, profile=profile, pool_size=pool_size) as backend:
            for _ in range(2):
                with pytest.raises(SandboxRefused) as caught:
                    await backend.run("result(1 + 1)")
                assert caught.value.retryable is False
                assert caught.value.code == "sandbox_refused"
                assert "CPUs" in str(caught.value)
            if pool_size:
                for _ in range(100):  # (its own start fails in the background)
                    if backend.pool.stopped_by is not None:
                        break
                    await asyncio.sleep(0.1)
                assert isinstance(backend.pool.stopped_by, SandboxRefused)

    asyncio.run(asyncio.wait_for(main(), 60))
