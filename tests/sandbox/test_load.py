"""Eight principals running programs at once for 30 s on a backend that reuses a container
per principal: no run sees another's files or processes, no container serves two principals,
and nothing is left behind.

Each run starts by listing ``/tmp`` (a clean scratch directory holds nothing) and the
container's pid list (its runner, pid 1, and its own process only), then leaves a file and a
sleeping child behind; the next run of the same principal must find neither. Which container
served each run is read on the host.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict

import docker
import pytest

from airlock.bridge import ToolSession
from airlock.policies import Grant, Principal, SandboxProfile
from airlock.sandbox import DockerBackend
from airlock.sandbox._owner import labelled_containers
from airlock.tools import Registry
from tests.conftest import IMAGE, require_docker

SECONDS = 30.0
PRINCIPALS = 8
PROGRAM = """
import os, time
me = os.getpid()
seen_files = sorted(os.listdir("/tmp"))
seen_pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me)
open("/tmp/left-by-" + WHO, "w").write(WHO)
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
[seen_files, seen_pids]
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.docker
@pytest.mark.anyio
async def test_eight_principals_at_once_never_meet() -> None:
    require_docker()
    registry = Registry()
    owners = [Principal(user_id=f"load{n}", tenant_id="acme") for n in range(PRINCIPALS)]
    backend = DockerBackend(
        image=IMAGE,
        profile=SandboxProfile(language_mode="full", timeout_s=20),
        pool_size=2,
        reuse=True,
    )
    await backend.start()
    served: dict[str, set[str]] = defaultdict(set)
    runs: dict[str, int] = defaultdict(int)
    failures: list[str] = []
    end = time.monotonic() + SECONDS

    async def principal(owner: Principal) -> None:
        program = f"WHO = {owner.user_id!r}\n" + PROGRAM
        while time.monotonic() < end:
            tools = ToolSession(registry=registry, principal=owner, grant=Grant())
            result = await backend.run(program, tools=tools)
            held = backend._reused._held[(owner.user_id, owner.tenant_id)]._container
            if held is not None:
                served[held.id].add(owner.user_id)
            runs[owner.user_id] += 1
            if not result.ok or result.value != [[], [1]]:
                failures.append(f"{owner.user_id}: {result.status} {result.value!r}")

    try:
        await asyncio.gather(*(principal(owner) for owner in owners))
    finally:
        await backend.close()

    assert not failures, failures[:5]
    assert all(runs[owner.user_id] >= 3 for owner in owners), dict(runs)
    assert all(len(users) == 1 for users in served.values()), dict(served)
    assert len(served) >= PRINCIPALS
    left = labelled_containers(docker.from_env(), owner=backend._owner)
    assert left == [], left
    assert not os.path.exists(backend._socket_root)
