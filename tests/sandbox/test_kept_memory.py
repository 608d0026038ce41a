"""A kept container's memory does not grow with the number of programs it has served.

The zygote opens a bridge connection for each program and closes its end once the program's
process has it. The closed connection (a cycle with its outbox) waits for the collector,
which the zygote's few allocations wake only every few dozen programs; its 256 KiB read
buffer waited with it, and the container's memory charge climbed by about that much a
program until a collection (under runc, 16 to 30 MiB in 120 programs). Under gVisor, whose
sandbox counts against the same limit and gives back slowly, a conversation over the data
image (which starts at about 170 of its 256 MiB) ran into the limit after about a hundred
programs: an innocent program ended ``limit_exceeded``, and its state was lost.

Measured from the host, as the container's cgroup charges it, under the runtimes whose
charge is the container's own processes: ``runsc``'s includes its own kernel's memory, which
grows by about 0.2 MiB a program whatever the guest does (see SECURITY.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DockerBackend
from tests.bridge.records import ALICE
from tests.conftest import IMAGE
from tests.sandbox.runtimes import require_runtime

MiB = 1024 * 1024
WARM_PROGRAMS = 10
PROGRAMS = 100
# Before, the charge rose by 256 KiB a program for every program between two collections
# (about 60): 12 MiB and more within these programs.
MOST_GROWTH = 4 * MiB
COUNTING = "n = globals().get('n', 0) + 1\nn"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=("runc", "crun"))
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[DockerBackend]:
    runtime: ContainerRuntime = request.param
    require_runtime(runtime)
    profile = SandboxProfile(language_mode="full", timeout_s=10, runtime=runtime)
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.mark.anyio
async def test_a_kept_container_serves_program_after_program_in_the_same_memory(
    backend: DockerBackend,
) -> None:
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        charges: list[int] = []
        for n in range(1, PROGRAMS + 1):
            result = await kept.run(COUNTING)
            assert result.ok, result
            assert result.value == n  # one container, its state kept
            if n >= WARM_PROGRAMS:
                charge = kept._container.memory_bytes()
                assert charge is not None, "the container's cgroup is not readable"
                charges.append(charge)
        assert kept.starts == 1
    finally:
        await kept.close()
    growth = max(charges) - charges[0]
    assert growth < MOST_GROWTH, (
        f"the container's memory grew by {growth / MiB:.1f} MiB over "
        f"{PROGRAMS - WARM_PROGRAMS} programs (from {charges[0] / MiB:.1f} MiB)"
    )
