"""``reuse_max`` bounds the containers held for principals once a burst is over.

While every held container runs a program, a new principal is given one more for a while;
once the burst ends, idle ones go until ``reuse_max`` are held, and a new principal later
makes room by sending the least recently used idle ones away. The first tests stand in for
the containers (the count is the point); the last runs a burst of real ones and counts them
on the engine too.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any, cast

import docker
import pytest

from airlock.bridge import ToolSession
from airlock.policies import Grant, Principal, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._hardening import container_settings
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._owner import labelled_containers
from airlock.sandbox._reuse import PrincipalContainers
from airlock.sandbox.testing import ok_result
from airlock.tools import Registry
from tests.conftest import IMAGE, require_docker

REUSE_MAX = 2
BURST = REUSE_MAX + 4
REGISTRY = Registry()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _tools(owner: Principal) -> ToolSession:
    return ToolSession(registry=REGISTRY, principal=owner, grant=Grant())


def _owners(prefix: str, count: int) -> list[Principal]:
    return [Principal(user_id=f"{prefix}{n}", tenant_id="acme") for n in range(count)]


class _Container:
    """A principal's container whose programs end once ``ends`` is set."""

    def __init__(self, ends: asyncio.Event) -> None:
        self.id = f"stand-in-{id(self)}"
        self.alive = True
        self.removals = 0
        self._ends = ends

    async def run(self, program: str, **_: Any) -> RunResult:
        await self._ends.wait()
        return ok_result(self.id)

    async def destroy(self) -> None:
        self.removals += 1
        self.alive = False


class _Containers:
    """Reused containers of stand-ins, recording which principal each served."""

    def __init__(self) -> None:
        self.ends = asyncio.Event()
        self.made: list[_Container] = []
        self.reused = PrincipalContainers(self._make, limit=REUSE_MAX)

    def _make(self, owner: Principal) -> KeptSandbox:
        async def start(profile: SandboxProfile) -> SandboxContainer:
            self.made.append(_Container(self.ends))
            return cast(SandboxContainer, self.made[-1])

        return KeptSandbox(
            start,
            owner=owner,
            profile=SandboxProfile(timeout_s=10),
            idle_timeout=300,
            max_program_bytes=1024,
            container_settings=container_settings,
            clean=True,
        )

    async def run(self, owner: Principal) -> RunResult:
        async def fresh() -> RunResult:
            return ok_result("fresh")

        return await self.reused.run(
            "1", profile=SandboxProfile(timeout_s=10), tools=_tools(owner), artifacts=None,
            fresh=fresh,
        )  # fmt: skip

    def unremoved(self) -> int:
        return sum(1 for container in self.made if container.removals == 0)


async def _settled() -> None:
    """Until evictions started in the background have removed their containers."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.anyio
async def test_a_burst_of_new_principals_gives_back_its_extra_containers() -> None:
    containers = _Containers()
    owners = _owners("u", BURST)
    burst = [asyncio.create_task(containers.run(owner)) for owner in owners]
    await asyncio.sleep(0.05)
    assert len(containers.reused) == BURST  # every one was busy: one more for a while
    containers.ends.set()
    await asyncio.gather(*burst)
    await _settled()
    assert len(containers.reused) == REUSE_MAX
    assert containers.unremoved() == REUSE_MAX
    for owner in owners + _owners("v", 3) + owners:  # returning and new principals in turn
        assert (await containers.run(owner)).status == "ok"
        assert len(containers.reused) == REUSE_MAX
    await _settled()
    assert containers.unremoved() == REUSE_MAX
    await containers.reused.close()
    await _settled()
    assert containers.unremoved() == 0


async def _engine_count(owner: str, *, want: int, within: float) -> int:
    """How many of the backend's containers the engine lists, once it lists ``want`` or
    ``within`` seconds have passed."""
    client = docker.from_env()
    try:
        until = time.monotonic() + within
        while True:
            count = len(await asyncio.to_thread(labelled_containers, client, owner=owner))
            if count == want or time.monotonic() >= until:
                return count
            await asyncio.sleep(0.5)
    finally:
        client.close()


# The container's id, as its own mounts name it: which container served the run.
WHICH = """
import time
time.sleep(SLEEP)
[line.split("/containers/")[1].split("/")[0]
 for line in open("/proc/self/mountinfo") if "/containers/" in line][0]
"""


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_held_containers_come_back_to_reuse_max_after_a_burst() -> None:
    require_docker()
    backend = DockerBackend(
        image=IMAGE,
        profile=SandboxProfile(language_mode="full", timeout_s=20),
        pool_size=0,
        reuse=True,
        reuse_max=REUSE_MAX,
        reuse_idle_s=120,
    )
    await backend.start()
    served: dict[str, set[str]] = defaultdict(set)

    async def run(owner: Principal, sleep: float) -> None:
        result = await backend.run(f"SLEEP = {sleep}\n" + WHICH, tools=_tools(owner))
        assert result.status == "ok", result
        served[result.value].add(owner.user_id)

    owners = _owners("burst", BURST)
    try:
        await asyncio.gather(*(run(owner, 1.5) for owner in owners))
        assert len(backend._reused) == REUSE_MAX
        assert await _engine_count(backend._owner, want=REUSE_MAX, within=20) == REUSE_MAX
        for owner in owners:  # one at a time: most were sent away, and come back
            await run(owner, 0)
            assert len(backend._reused) <= REUSE_MAX
        assert len(backend._reused) == REUSE_MAX
        assert await _engine_count(backend._owner, want=REUSE_MAX, within=20) == REUSE_MAX
    finally:
        await backend.close()
    assert all(len(users) == 1 for users in served.values()), dict(served)
    assert await _engine_count(backend._owner, want=0, within=10) == 0
