"""One session runs at most ``Budget.programs_at_once`` programs at a time, however many
``execute_code`` calls one model turn makes: the rest wait for a turn, never past the
session's time. A gated backend counts the runs in flight; a real engine counts containers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.harness import Budget, Harness
from airlock.policies import Principal, SandboxProfile, parse_policy
from airlock.sandbox import DockerBackend, KeptSandbox, RunResult, SandboxBackend
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, Registry
from tests.conftest import IMAGE, require_docker

ANALYST = Principal(user_id="analyst", tenant_id="acme")
POLICY = 'version = 1\n[principals.analyst]\neffects = ["read(file:*)"]\n'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Counted:
    """Runs in flight through a backend, and the most at once."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def enter(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        self.now -= 1


class GatedBackend(ScriptedBackend):
    """Each run waits at the gate (``release``), counted while it does."""

    def __init__(self) -> None:
        super().__init__(lambda program, profile: ok_result(1))
        self.counted = Counted()
        self.gate = anyio.Event()

    async def run(self, program: str, **kwargs: Any) -> RunResult:
        self.counted.enter()
        try:
            await self.gate.wait()
            return await super().run(program, **kwargs)
        finally:
            self.counted.leave()


def harness(backend: SandboxBackend, tmp_path: Path) -> Harness:
    return Harness(
        Registry(),
        parse_policy(POLICY, source="turns-test"),
        backend,
        audit=MemoryAuditStore(),
        artifacts=tmp_path / "store",
    )


@pytest.mark.parametrize(("at_once", "calls"), [(1, 3), (2, 6), (3, 5)])
@pytest.mark.anyio
async def test_one_turn_runs_at_most_programs_at_once_and_the_rest_wait_their_turn(
    tmp_path: Path, at_once: int, calls: int
) -> None:
    backend = GatedBackend()
    session = harness(backend, tmp_path).session(ANALYST, budget=Budget(programs_at_once=at_once))
    results: list[Any] = []

    async def call() -> None:
        results.append(await session.call("execute_code", {"code": "1"}))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for _ in range(calls):
                group.start_soon(call)
            while backend.counted.now < at_once:
                await anyio.sleep(0.01)
            await anyio.sleep(0.1)  # the others had every chance to start
            assert backend.counted.now == at_once
            backend.gate.set()
    assert backend.counted.peak == at_once
    assert [json.loads(r.content)["value"] for r in results] == [1] * calls


def test_the_default_budget_runs_two_programs_at_once() -> None:
    assert Budget().programs_at_once == 2
    with pytest.raises(ValueError, match="programs_at_once"):
        Budget(programs_at_once=0)


@pytest.mark.anyio
async def test_a_program_that_gets_no_turn_before_the_session_ends_does_not_run(
    tmp_path: Path,
) -> None:
    backend = GatedBackend()
    owner = harness(backend, tmp_path)
    session = owner.session(ANALYST, budget=Budget(programs_at_once=1, seconds=1.0))
    answers: dict[str, Any] = {}

    async def call(label: str) -> None:
        answers[label] = await session.call("execute_code", {"code": label})

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(call, "1")
            while backend.counted.now < 1:
                await anyio.sleep(0.01)
            group.start_soon(call, "2")
            await anyio.sleep(1.5)  # past the session's time: the second got no turn
            assert "2" in answers
            backend.gate.set()
    waited = answers["2"]
    said = json.loads(waited.content)
    assert (waited.code, said["limit"]) == ("limit_exceeded", "programs_at_once")
    assert "at most 1 programs at once" in said["message"]
    assert [program for program, _ in backend.calls] == ["1"]  # the second never ran
    done = [e for e in owner.audit.events(run_id=session.run_id) if e.stage == "done"]
    assert "limit_exceeded" in [e.code for e in done]


class CountingDocker:
    """A real Docker backend, counting the runs in flight through it."""

    def __init__(self, backend: DockerBackend) -> None:
        self.backend = backend
        self.counted = Counted()

    @property
    def profile(self) -> SandboxProfile:
        return self.backend.profile

    @property
    def can_keep(self) -> bool:
        return False

    def keep(self, owner: Principal, **kwargs: Any) -> KeptSandbox:
        raise AssertionError("not kept in this test")

    async def run(self, program: str, **kwargs: Any) -> RunResult:
        self.counted.enter()
        try:
            return await self.backend.run(program, **kwargs)
        finally:
            self.counted.leave()

    async def close(self) -> None:
        await self.backend.close()


@pytest.fixture
def docker_backend() -> None:
    require_docker()


@pytest.mark.docker
@pytest.mark.anyio
async def test_one_turn_of_many_programs_runs_two_containers_at_once(
    tmp_path: Path, docker_backend: None
) -> None:
    from airlock.frontends import handle_turn

    real = DockerBackend(image=IMAGE, profile=SandboxProfile(language_mode="full"), pool_size=0)
    await real.start()
    counting = CountingDocker(real)
    try:
        session = harness(counting, tmp_path).session(ANALYST)
        blocks = [
            {
                "type": "tool_use",
                "id": f"t{n}",
                "name": "execute_code",
                "input": {"code": "import time\ntime.sleep(1)\n1"},
            }
            for n in range(5)
        ]
        with anyio.fail_after(120):
            answers = await handle_turn(session, blocks)
    finally:
        await real.close()
    assert [json.loads(a["content"])["value"] for a in answers] == [1] * 5
    assert counting.counted.peak == 2
