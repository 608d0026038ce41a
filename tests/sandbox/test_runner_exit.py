"""Asking the engine whether a runner exited: by the time given, whatever the engine says."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import docker
import pytest
from docker.models.containers import Container

from airlock.sandbox._runner_exit import RunnerState, runner_state

RUNNING = {"Running": True, "OOMKilled": False}
EXITED = {"Running": False, "OOMKilled": False}
OOM = {"Running": False, "OOMKilled": True}
GONE = docker.errors.NotFound("No such container")
UNREACHABLE = docker.errors.DockerException("no engine")


class _Engine:
    """Answers ``inspect`` with the states given, one per question (the last one again)."""

    def __init__(self, answers: list[Any], *, slow_s: float = 0.0) -> None:
        self._answers: Iterator[Any] = iter(answers)
        self._last: Any = answers[-1]
        self._slow_s = slow_s
        self.asked = 0
        self.api = self

    def inspect_container(self, _container_id: str) -> dict[str, Any]:
        self.asked += 1
        time.sleep(self._slow_s)
        answer = next(self._answers, self._last)
        self._last = answer
        if isinstance(answer, Exception):
            raise answer
        return {"State": answer}


class _Container:
    def __init__(self, engine: _Engine) -> None:
        self.id = "c" * 64
        self.client = engine


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# (case, the engine's answers, time given (s), how slow each answer is (s), state)
ANSWERS = [
    ("exited_at_once", [EXITED], 1.0, 0.0, "exited"),
    ("exited_a_moment_later", [RUNNING, RUNNING, EXITED], 1.0, 0.0, "exited"),
    ("oom_killed", [RUNNING, OOM], 1.0, 0.0, "oom_killed"),
    ("still_running", [RUNNING], 0.3, 0.0, "running"),
    ("removed_meanwhile", [RUNNING, GONE], 1.0, 0.0, "exited"),
    ("no_engine", [UNREACHABLE], 1.0, 0.0, "exited"),
    ("the_engine_answers_too_late", [EXITED], 0.0, 2.0, "running"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "answers", "given_s", "slow_s", "state"), ANSWERS, ids=[row[0] for row in ANSWERS]
)
async def test_the_runner_state_comes_by_the_time_given(
    case: str, answers: list[Any], given_s: float, slow_s: float, state: RunnerState
) -> None:
    engine = _Engine(answers, slow_s=slow_s)
    began = time.perf_counter()
    found = await runner_state(cast(Container, _Container(engine)), until=began + given_s)
    took = time.perf_counter() - began
    assert found == state, case
    assert took <= given_s + 0.5 + 0.3, (case, took)  # _ANSWER_S for a late answer
    if state == "running" and slow_s == 0.0:
        assert engine.asked > 1  # asked again, in short calls
