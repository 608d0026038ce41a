"""Kept sessions and ``reuse=True`` in the data image, whose runner warms up with numpy,
pyarrow, pandas and matplotlib loaded: native libraries that may start threads of their own
(a BLAS pool sized to the CPU quota, jemalloc's background thread). The kept runner serves
program after program all the same, and still ends every process and thread of one program
before the next starts.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import AsyncIterator

import docker
import pytest

from airlock.bridge import ToolSession
from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DockerBackend, KeptSandbox
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import DATA_IMAGE, IMAGE
from tests.sandbox.runtimes import RUNTIMES, require_runtime

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

DEADLINE_S = 20.0
"""Generous: numpy's first product in a fresh process, on a small and busy machine."""
SETTLES_S = 5
"""How long the next program's process, forked ahead, may take to be ready: it restores the
kept names in a child of its own first (``airlock_kept_trial``, a second at most), which a
loaded machine runs late; until then, that child is in the container too."""
TAKES_S = 8.0
"""A program of a kept session that is not held up: well under the 10 s the host waits for a
kept runner to open a program's connection."""

# Starts the BLAS pool in its own process, a thread and a child that would both outlive it.
FIRST = textwrap.dedent("""
    import os, threading, time
    import numpy as np
    square = np.ones((400, 400))
    total = float((square @ square).sum())
    threading.Thread(target=time.sleep, args=(600,), daemon=False).start()
    child = os.fork()
    if child == 0:
        time.sleep(600)
        os._exit(0)
    [os.getpid(), child, len(os.listdir("/proc/self/task")), total]
""")
SECOND = textwrap.dedent("""
    import os
    me = os.getpid()
    others = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me))
    [others, os.path.exists(f"/proc/{FIRST}"), os.path.exists(f"/proc/{CHILD}")]
""")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(
    params=[(runtime, 1.0) for runtime in RUNTIMES] + [("runc", 2.0)],
    ids=lambda param: f"{param[0]}-{param[1]:g}cpu",
)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[DockerBackend]:
    """A data image backend, under each runtime, and with two CPUs (a BLAS pool of two in the
    runner) under runc."""
    runtime: ContainerRuntime
    runtime, cpus = request.param
    require_runtime(runtime, "data")
    profile = SandboxProfile(
        image="data", language_mode="full", timeout_s=DEADLINE_S, runtime=runtime, cpus=cpus
    )
    backend = DockerBackend(image=IMAGE, data_image=DATA_IMAGE, profile=profile, reuse=True)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _session() -> ToolSession:
    return ToolSession(registry=build_registry(), principal=ALICE, grant=GRANT)


def _processes(kept: KeptSandbox) -> list[tuple[int, int, str]]:
    """(pid, threads, what it is) of every process in the kept container, as the engine sees
    it: what it is tells a failure's leftover apart (its state, parent and command line)."""
    container = kept._container
    assert container is not None
    lister = (
        "import os\n"
        "me = os.getpid()\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit() and int(p) != me:\n"
        "        try:\n"
        "            stat = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[:2]\n"
        "            argv = open(f'/proc/{p}/cmdline').read().split(chr(0))[:4]\n"
        "            print(p, len(os.listdir(f'/proc/{p}/task')), stat, argv, sep='\\t')\n"
        "        except OSError: pass\n"
    )
    engine = docker.from_env().containers.get(container.id)
    for _ in range(5):
        # A lister started while the runner clears the container is ended too: again.
        code, output = engine.exec_run(["python3", "-I", "-S", "-c", lister])
        if code == 0:
            break
        time.sleep(0.1)
    assert code == 0, output
    rows = (line.split("\t", 2) for line in output.decode().splitlines())
    return sorted((int(pid), int(threads), what) for pid, threads, what in rows)


async def test_a_kept_session_runs_one_program_after_another_each_alone(
    backend: DockerBackend,
) -> None:
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        first = await kept.run(FIRST, tools=_session())
        assert first.status == "ok", first
        pid, child, threads, _ = first.value
        began = time.monotonic()
        second = await kept.run(
            SECOND.replace("FIRST", str(pid)).replace("CHILD", str(child)), tools=_session()
        )
        second_took = time.monotonic() - began
        for _ in range(SETTLES_S * 2):
            await asyncio.sleep(0.5)  # the next program's process, forked ahead, is ready
            rows = await asyncio.to_thread(_processes, kept)
            if len(rows) <= 2:
                break
        starts = kept.starts
    finally:
        await kept.close()

    assert threads >= 2, first  # its own thread ran beside it
    assert second.status == "ok", second
    # Nothing of the first program is left: neither its process (nor so its thread) nor
    # its child; no other process at all.
    assert second.value == [[], False, False], second
    # One container served both, and the second was not held up.
    assert starts == 1
    assert second_took < TAKES_S, second_took
    # The runner is alone with the next program's process, and has one thread: the image
    # turns jemalloc's background thread off, and OpenBLAS ends its pool at the first fork.
    assert rows[0][:2] == (1, 1), rows
    assert len(rows) <= 2, rows


async def test_reuse_runs_each_program_in_a_fresh_process_of_one_container(
    backend: DockerBackend,
) -> None:
    program = "import os, numpy\n[open('/etc/hostname').read(), os.getpid(), numpy.random.rand()]"
    first = await backend.run(program, tools=_session())
    began = time.monotonic()
    second = await backend.run(program, tools=_session())
    took = time.monotonic() - began

    assert first.status == "ok", first
    assert second.status == "ok", second
    assert first.value[0] == second.value[0]  # one container
    assert first.value[1] != second.value[1]  # a process each
    assert first.value[2] != second.value[2]  # numpy's generator seeded anew in each
    assert took < TAKES_S, took
