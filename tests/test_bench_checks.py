"""The benchmarks' own checks: nearest-rank percentiles, and the sustained cases' refusal of
a run that failed, was not clean, could not tell its container, or ran in a container that
served another principal."""

from __future__ import annotations

import time
from typing import Any

import docker
import pytest

from airlock.policies import Principal
from airlock.sandbox import RunResult
from bench._floor import floor
from bench._table import percentile
from bench.throughput import PROGRAM, ServedBy
from tests.conftest import IMAGE, require_docker

# (samples 1..n, q, the nearest rank's sample)
PERCENTILES = [
    (100, 99, 99),
    (300, 99, 297),
    (200, 99, 198),
    (6, 50, 3),
    (10, 50, 5),
    (4, 50, 2),
    (1, 99, 1),
    (5, 0, 1),
    (5, 100, 5),
    (1000, 99.9, 999),
]


@pytest.mark.parametrize(("n", "q", "expected"), PERCENTILES)
def test_percentile_is_the_nearest_rank(n: int, q: float, expected: int) -> None:
    assert percentile([float(x) for x in reversed(range(1, n + 1))], q) == expected


def test_a_percentile_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


def _result(value: Any, status: str = "ok") -> RunResult:
    return RunResult.model_validate(
        {"status": status, "exit_status": 0, "has_value": True, "value": value, "duration_s": 0.1}
    )


ALICE, BOB = Principal(user_id="alice", tenant_id="t"), Principal(user_id="bob", tenant_id="t")
C1, C2 = "a" * 64, "b" * 64

# (runs in order: (answer, status, principal); the message the last one stops with)
REFUSED: list[tuple[list[tuple[Any, str, Principal]], str]] = [
    ([([1, C1], "ok", ALICE), ([1, C1], "ok", BOB)], "served two principals: alice and bob"),
    ([([2, C1], "ok", ALICE)], "not clean"),
    ([([1, C1], "error", ALICE)], "failed"),
    ([(1, "ok", ALICE)], "not clean"),
    ([([1, ""], "ok", ALICE)], "could not tell its container"),
    ([([1, None], "ok", ALICE)], "could not tell its container"),
]


@pytest.mark.parametrize(("runs", "message"), REFUSED)
def test_a_run_the_benchmark_cannot_count_stops_it(
    runs: list[tuple[Any, str, Principal]], message: str
) -> None:
    served = ServedBy()
    *before, (value, status, principal) = runs
    for earlier_value, earlier_status, earlier_principal in before:
        served.check(_result(earlier_value, earlier_status), earlier_principal)
    with pytest.raises(SystemExit, match=message):
        served.check(_result(value, status), principal)


def test_one_principal_may_use_its_container_again_and_others_theirs() -> None:
    served = ServedBy()
    for value, principal in [([1, C1], ALICE), ([1, C1], ALICE), ([1, C2], BOB)]:
        served.check(_result(value), principal)
    assert served.principals == {C1: "alice", C2: "bob"}


def test_under_gvisor_a_run_that_cannot_tell_its_container_passes_unchecked() -> None:
    served = ServedBy("runsc")
    for principal in (ALICE, BOB):
        served.check(_result([1, ""]), principal)
    assert served.principals == {}
    served.check(_result([1, C1]), ALICE)  # one that can tell is still checked
    with pytest.raises(SystemExit, match="served two principals"):
        served.check(_result([1, C1]), BOB)


def _floor_containers(client: docker.DockerClient) -> set[str]:
    listed = client.containers.list(all=True, filters={"name": "airlock-bench-floor-"})
    return {container.id for container in listed}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_warm_runs_floor_answers_as_a_sandboxed_run_and_leaves_nothing() -> None:
    require_docker()
    client = docker.from_env()
    before = _floor_containers(client)
    async with floor(IMAGE) as bare:
        assert [(await bare.run(PROGRAM)).value for _ in range(3)] == [1, 1, 1]
        assert (await bare.run("x = 20\nx * 2 + 2\n")).value == 42
        sent = time.time()
        answer = await bare.run("import time\ntime.sleep(0.05)\n20 * 2 + 2\n")
        came = time.time()
        assert answer.value == 42
        # Its stamps are the shared wall clock's, in order, around the program's own time.
        assert sent <= answer.started < answer.ended <= came
        assert answer.ended - answer.started >= 0.05
        assert len(_floor_containers(client) - before) == 1
    assert _floor_containers(client) == before
