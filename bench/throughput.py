"""Sandboxed runs per second, and their latency, side by side with bare ``docker run --rm``.

Every sustained case runs the same trivial program (``SUSTAINED_PROGRAM``, full mode; the
bare baseline the same as a ``python3 -c`` command) for ``--seconds`` of sustained load, each
run from a clean process and a clean scratch directory. Every run answers which container it
ran in, and a container seen serving a second principal stops the benchmark, as does a run
that failed or found its scratch directory not empty. A case's time ends once its backend has
closed: the removals it does off a run's path count (a bare ``docker run --rm`` waits for its
own), and so does the removal of a pool's idle containers (whose starts came before the time
began). In one benchmark run, so that the ratios hold on a loaded machine (``--rounds`` splits
the time of each baseline and new-principal case into rounds that take turns, so that a burst
of load falls on every case alike; a reuse case runs once, after them):

- ``docker run --rm``: the baseline, ``--concurrency`` workers each starting a container of
  the sandbox image (``--network none``) that runs the program and is removed, through the
  engine's API (``containers.run(remove=True)``), as bare as a container run gets, under the
  engine's default runtime (runc) as a user would type it; and the same with
  ``--runtime crun`` when the engine has crun (``sandbox/image/ensure-engine.sh``);
- ``new principal per request, pool N``: the same workers through :class:`DockerBackend`,
  every request from a new principal, so every run takes a fresh container (a warm one when
  the pool of size N has it), under each of ``--new-principal-runtimes`` (runc, crun);
- ``reuse, P principals``: P principals each issuing runs one after another, all at once;
  with ``reuse=True`` each principal's runs share one container (a fresh process and an empty
  ``/tmp`` per run);
- warm run: one principal, one run at a time, the machine otherwise as it is: a reused
  container with runs issued back to back, and issued 20 ms after the previous result (as
  between a model's turns: the container is ready for the next program again), and a pooled
  fresh container (the pool refilled before each run). Against each reused row, its floor
  (``bench/_floor.py``): the same request -> result with a ``python3`` waiting in a container
  of the same image, nothing of airlock in between, in blocks taking turns with the reused
  rows' so that they see the same machine, and the paused runs' three steps against the
  floor's (:data:`STEPS`): request -> the program's first line, the program, its last line
  -> result, from the wall clock the host and its containers share. Beside them, what the
  first step of each paused run alone took (building its :class:`ToolSession`, a few
  microseconds of the host's own code), against the same step made again right after that
  run: after a pause, every step a run takes costs more than when its code was just used, on
  a machine whose processors idle in between (a virtual machine's especially), and the ratio
  of these two rows says by how much the machine's idle state, not the code, moves the warm
  run's figures.

    .venv/bin/python bench/throughput.py [--seconds 10] [--concurrency 8]
        [--principals 1,2,8,32] [--pools 0,2,4,8] [--warm-runs 200] [--runtime runc]
        [--new-principal-runtimes runc,crun] [--rounds 1] [--busy 0]

``--busy N`` runs N processes spinning beside it for the whole benchmark: the loaded machine
every goal must also hold on.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import docker
import docker.errors

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.bridge import ToolSession
from airlock.policies import Grant, Principal, SandboxProfile
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend, RunResult
from airlock.tools import Registry
from bench._args import at_least, counts, positive_seconds
from bench._bare_docker import CONTAINER_OF_RUN, run_bare
from bench._busy import busy_processes
from bench._floor import floor
from bench._table import percentile, print_table

PROGRAM = "import os\nlen(os.listdir('/tmp')) + 1\n"
"""The warm case's program. Also a check: a clean scratch directory holds nothing, so every
run answers 1."""
SUSTAINED_PROGRAM = f"import os\n[len(os.listdir('/tmp')) + 1, {CONTAINER_OF_RUN}]\n"
"""The sustained cases' program (the bare baseline runs the same, :data:`BARE_COMMAND`): it
answers 1 in a clean scratch directory, and which container it ran in, by which the
benchmark checks that no container serves two principals."""
IMAGE = os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE)
RUNTIMES = ("runc", "crun", "runsc")
REGISTRY = Registry()


def _session(principal: Principal) -> ToolSession:
    return ToolSession(registry=REGISTRY, principal=principal, grant=Grant())


def _new_principal() -> Principal:
    return Principal(user_id="u" + uuid.uuid4().hex[:12], tenant_id="bench")


def _check(result: RunResult) -> None:
    if not result.ok or result.value != 1:
        raise SystemExit(f"a run failed or was not clean: {result!r}")


def _check_floor(value: object) -> None:
    if value != 1:
        raise SystemExit(f"the floor's run answered {value!r}, not 1")


class ServedBy:
    """Which principal each container served, from the sustained program's answers: a
    container seen serving a second principal stops the benchmark. Under gVisor (``runsc``),
    whose own mount table names no host path, a run cannot tell its container: the check is
    not made there (the benchmark says so)."""

    def __init__(self, runtime: str = "runc") -> None:
        self.principals: dict[str, str] = {}
        self.can_tell = runtime != "runsc"

    def check(self, result: RunResult, principal: Principal) -> None:
        value = result.value
        if not result.ok or not isinstance(value, list) or value[:1] != [1]:
            raise SystemExit(f"a run failed or was not clean: {result!r}")
        container = value[1]
        if container == "" and not self.can_tell:
            return
        if not isinstance(container, str) or not container:
            raise SystemExit(f"a run could not tell its container: {value!r}")
        first = self.principals.setdefault(container, principal.user_id)
        if first != principal.user_id:
            raise SystemExit(
                f"container {container[:12]} served two principals: {first} and {principal.user_id}"
            )


async def _sustain(
    workers: int,
    seconds: float,
    one: Callable[[int], Awaitable[None]],
    wind_down: Callable[[], Awaitable[object]] | None = None,
) -> tuple[list[float], float]:
    """``workers`` loops calling ``one(worker)`` for ``seconds``: latencies and runs/s. The
    time ends after ``wind_down()``: what the runs left the engine to do (our removals off
    a run's path) counts, as a bare ``docker run --rm`` waits for its removal."""
    latencies: list[float] = []
    end = time.monotonic() + seconds

    async def loop(worker: int) -> None:
        while time.monotonic() < end:
            began = time.perf_counter()
            await one(worker)
            latencies.append(time.perf_counter() - began)

    began = time.monotonic()
    await asyncio.gather(*(loop(w) for w in range(workers)))
    if wind_down is not None:
        await wind_down()
    return latencies, len(latencies) / (time.monotonic() - began)


async def bare_docker(
    workers: int, seconds: float, runtime: str | None
) -> tuple[list[float], float]:
    client = docker.from_env()

    def run_one() -> None:
        output = run_bare(client, IMAGE, runtime)
        if not output:
            # It exited 0 (else run() raises), but the engine answered its logs empty: seen
            # once under load (--busy 3). The run was made; a wrong answer still stops it.
            print("note: the engine lost the output of a bare run that exited 0; counted")
            return
        answer = output.split()
        if answer[:1] != [b"1"] or len(answer) != 2:
            raise SystemExit(f"the bare run answered {output!r}")

    async def one(_worker: int) -> None:
        await asyncio.to_thread(run_one)

    return await _sustain(workers, seconds, one)


async def new_principals(
    workers: int, seconds: float, pool: int, profile: SandboxProfile
) -> tuple[list[float], float]:
    served = ServedBy(profile.runtime)
    async with DockerBackend(image=IMAGE, profile=profile, pool_size=pool) as backend:
        await backend.pool.wait_ready(pool, timeout=300)

        async def one(_worker: int) -> None:
            principal = _new_principal()
            result = await backend.run(SUSTAINED_PROGRAM, tools=_session(principal))
            served.check(result, principal)

        # (closing removes the pool's idle containers too, as the runs' removals: their
        # starts came before the time began)
        return await _sustain(workers, seconds, one, wind_down=backend.close)


async def reused(
    principals: int, seconds: float, pool: int, profile: SandboxProfile
) -> tuple[list[float], float]:
    owners = [Principal(user_id=f"p{n}", tenant_id="bench") for n in range(principals)]
    async with DockerBackend(
        image=IMAGE, profile=profile, pool_size=pool, reuse=True, reuse_max=max(principals, 1)
    ) as backend:
        await backend.pool.wait_ready(pool, timeout=300)
        served = ServedBy(profile.runtime)
        # Each principal's first run takes its container: sustained load starts after.
        firsts = [backend.run(SUSTAINED_PROGRAM, tools=_session(o)) for o in owners]
        for owner, result in zip(owners, await asyncio.gather(*firsts), strict=True):
            served.check(result, owner)

        async def one(worker: int) -> None:
            result = await backend.run(SUSTAINED_PROGRAM, tools=_session(owners[worker]))
            served.check(result, owners[worker])

        return await _sustain(principals, seconds, one, wind_down=backend.close)


WARM_PAUSE_S = 0.02
"""The pause before each run of the warm case's paused row: as between a model's turns, and
long enough for a reused container to be ready for the next program again."""
WARM_BLOCK = 25
"""Runs of one kind in a row: the warm case alternates back-to-back and paused blocks, so
that both see the same load."""
FRESH = "pooled fresh container"
BACK_TO_BACK = "reused container, back to back"
PAUSED = f"reused, {WARM_PAUSE_S * 1000:g} ms apart (ready again)"
FLOOR_BACK_TO_BACK = "floor: waiting python3, back to back"
FLOOR_PAUSED = f"floor, {WARM_PAUSE_S * 1000:g} ms apart"
SESSION_PAUSED = f"a ToolSession built {WARM_PAUSE_S * 1000:g} ms after a run"
SESSION_AT_ONCE = "the same, built right after"
STEPS = ("request -> first line", "the program", "last line -> result")
"""A paused run's steps, from the wall clock (``time.time()``) the host and its containers
share: when the request began, when the program began and ended in the container (a run's
``started_at`` and ``program_duration_s``; the floor's own stamps), and when the result came.
A reused run's first step is the host's work before its ``run`` frame leaves, the frame
reaching the program's process and that process's set-up; its last, the result reaching
the host and the host judging it."""
PAUSED_STEPS = tuple(f"reused: {step}" for step in STEPS)
FLOOR_STEPS = tuple(f"floor: {step}" for step in STEPS)


async def warm(runs: int, profile: SandboxProfile) -> dict[str, list[float]]:
    """Request -> result of ``runs`` runs, one at a time: in a reused container (a fresh
    process per run) issued back to back, and issued :data:`WARM_PAUSE_S` after the previous
    result, in alternating blocks; and (at most 50) in a pooled fresh container, the pool
    refilled and settled before each. With each paused run, its first step alone (building
    its session), and the same step made again right after the run."""
    owner = Principal(user_id="warm", tenant_id="bench")
    names = (FRESH, BACK_TO_BACK, PAUSED, FLOOR_BACK_TO_BACK, FLOOR_PAUSED)
    samples: dict[str, list[float]] = {
        name: [] for name in (*names, SESSION_AT_ONCE, SESSION_PAUSED, *PAUSED_STEPS, *FLOOR_STEPS)
    }

    def steps(step_names: tuple[str, ...], *stamps: float) -> None:
        for name, start, end in zip(step_names, stamps, stamps[1:], strict=False):
            samples[name].append(end - start)

    async with (
        DockerBackend(image=IMAGE, profile=profile, pool_size=1, reuse=True) as backend,
        floor(IMAGE, profile.runtime) as bare,
    ):
        for _ in range(20):
            _check(await backend.run(PROGRAM, tools=_session(owner)))
            _check_floor((await bare.run(PROGRAM)).value)

        async def sandboxed(name: str, pause: float) -> None:
            began, wall = time.perf_counter(), time.time()
            session = _session(owner)
            built = time.perf_counter()
            result = await backend.run(PROGRAM, tools=session)
            samples[name].append(time.perf_counter() - began)
            ended = time.time()
            _check(result)
            if pause:
                again = time.perf_counter()
                _session(owner)
                samples[SESSION_AT_ONCE].append(time.perf_counter() - again)
                samples[SESSION_PAUSED].append(built - began)
                started, took = result.started_at, result.program_duration_s
                if started is not None and took is not None:
                    steps(PAUSED_STEPS, wall, started, started + took, ended)

        async def floored(name: str, pause: float) -> None:
            began, wall = time.perf_counter(), time.time()
            answer = await bare.run(PROGRAM)
            samples[name].append(time.perf_counter() - began)
            ended = time.time()
            _check_floor(answer.value)
            if pause:
                steps(FLOOR_STEPS, wall, answer.started, answer.ended, ended)

        blocks = (
            (BACK_TO_BACK, 0.0, sandboxed),
            (PAUSED, WARM_PAUSE_S, sandboxed),
            (FLOOR_BACK_TO_BACK, 0.0, floored),
            (FLOOR_PAUSED, WARM_PAUSE_S, floored),
        )
        while len(samples[PAUSED]) < runs:
            for name, pause, one in blocks:
                # A back-to-back block's first run follows a pause: it is not counted.
                for n in range(min(WARM_BLOCK, runs - len(samples[name])) + (not pause)):
                    if pause:
                        await asyncio.sleep(pause)
                    await one(name, pause)
                    if not (pause or n):
                        samples[name].pop()
    async with DockerBackend(image=IMAGE, profile=profile, pool_size=1) as backend:
        for _ in range(min(runs, 50)):
            await backend.pool.wait_ready(1, timeout=300)
            await asyncio.sleep(0.2)  # the refill's start has settled
            began = time.perf_counter()
            _check(await backend.run(PROGRAM))
            samples[FRESH].append(time.perf_counter() - began)
    return samples


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


Case = Callable[[float], Awaitable[tuple[list[float], float]]]


def _new_principal_cases(
    args: argparse.Namespace, profile: SandboxProfile, base: str
) -> dict[str, Case]:
    """The sustained cases by row name: the baselines first (``base``: the engine's default
    runtime, runc, as a user would type it; then crun when the engine has it), then a new
    principal per run under each of ``--new-principal-runtimes`` and each pool size."""
    workers = args.concurrency
    cases: dict[str, Case] = {base: lambda seconds: bare_docker(workers, seconds, None)}
    offered = docker.from_env().info().get("Runtimes") or {}
    if "crun" in offered:
        name = f"docker run --rm --runtime crun, {workers} c."
        cases[name] = lambda seconds: bare_docker(workers, seconds, "crun")
    for runtime in (r for r in args.new_principal_runtimes.split(",") if r):
        if runtime not in offered:
            print(f"the engine has no {runtime!r} runtime: its rows are left out")
            continue
        chosen = profile.model_copy(update={"runtime": runtime})
        for pool in args.pools:
            name = f"new principal/run, pool {pool}" + ("" if runtime == "runc" else f", {runtime}")
            cases[name] = functools.partial(_new_principals_for, workers, pool, chosen)
    return cases


async def _new_principals_for(
    workers: int, pool: int, profile: SandboxProfile, seconds: float
) -> tuple[list[float], float]:
    return await new_principals(workers, seconds, pool, profile)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=positive_seconds, default=10.0)
    parser.add_argument("--concurrency", type=at_least(1), default=8)
    parser.add_argument("--principals", type=counts(1), default="1,2,8,32")
    parser.add_argument("--pools", type=counts(0), default="0,2,4,8")
    parser.add_argument("--reuse-pool", type=at_least(0), default=4)
    parser.add_argument("--warm-runs", type=at_least(0), default=200)
    parser.add_argument(
        "--runtime", default="runc", choices=RUNTIMES, help="of the reuse and warm cases"
    )
    parser.add_argument("--new-principal-runtimes", default="runc,crun")
    parser.add_argument(
        "--rounds",
        type=at_least(1),
        default=1,
        help="split the seconds of each baseline and new-principal case into rounds",
    )
    parser.add_argument(
        "--busy", type=at_least(0), default=0, help="processes spinning beside it: a loaded machine"
    )
    args = parser.parse_args()
    with busy_processes(args.busy):
        await _measure(args)


async def _measure(args: argparse.Namespace) -> None:
    profile = SandboxProfile.model_validate({"language_mode": "full", "runtime": args.runtime})
    print(
        f"load average at start: {_load()}; image {IMAGE}; runtime {args.runtime}; "
        f"{args.busy} busy processes beside it"
    )

    runtimes = {args.runtime, *args.new_principal_runtimes.split(",")}
    if "runsc" in runtimes:
        print("under runsc a run cannot tell its container: no container check is made there")
    base = f"docker run --rm, {args.concurrency} conc."
    cases = _new_principal_cases(args, profile, base)
    rows: list[tuple[str, list[float], float]] = []
    for name in cases:
        rows.append((name, [], 0.0))
    # Rounds: every case runs once per round, in turn, so that a burst of load on a shared
    # machine falls on all of them alike; its rate is all its runs over all its time.
    spent = dict.fromkeys(cases, 0.0)
    for _ in range(args.rounds):
        for index, (name, case) in enumerate(cases.items()):
            samples, rate = await case(args.seconds / args.rounds)
            rows[index][1].extend(samples)
            spent[name] += len(samples) / rate if rate else 0.0
    if not all(samples for _, samples, _ in rows):
        raise SystemExit(f"no run finished in {args.seconds:g} s in some case: give it more time")
    rows = [(name, samples, len(samples) / spent[name]) for name, samples, _ in rows]
    for count in args.principals:
        name = f"reuse, {count} principals"
        rows.append((name, *await reused(count, args.seconds, args.reuse_pool, profile)))
    warm_samples = await warm(args.warm_runs, profile) if args.warm_runs > 0 else {}
    print(f"load average at end: {_load()}")

    print(f"\nsustained runs/s ({args.seconds:g} s per case, in {args.rounds} rounds)")
    print(f"{'case':<38}{'runs':>6}{'runs/s':>10}{'median ms':>10}{'p99 ms':>10}  ratio")
    base_rate = rows[0][2]
    for name, samples, rate in rows:
        print(
            f"{name:<38}{len(samples):>6}{rate:>10.1f}"
            f"{statistics.median(samples) * 1000:>10.1f}{percentile(samples, 99) * 1000:>10.1f}"
            f"  {rate / base_rate:.2f}x {base}"
        )
    if args.principals:
        print(
            f"(a reuse row runs its principals' loops at once, against the baseline's "
            f"{args.concurrency} workers; its rounds are one)"
        )
    print_table(
        "run latency under sustained load",
        [(name, [s * 1000 for s in samples], base) for name, samples, _ in rows],
        "ms",
    )
    if not warm_samples:
        return
    print_table(
        "warm run, one at a time (request -> result)",
        [
            (name, [s * 1000 for s in warm_samples[name]], "" if name == FRESH else FRESH)
            for name in (FRESH, BACK_TO_BACK, PAUSED)
        ],
        "ms",
    )
    print_table(
        "the warm run against its floor, at the same moments",
        [
            (name, [s * 1000 for s in warm_samples[name]], floor_name)
            for name, floor_name in (
                (FLOOR_BACK_TO_BACK, ""),
                (BACK_TO_BACK, FLOOR_BACK_TO_BACK),
                (FLOOR_PAUSED, ""),
                (PAUSED, FLOOR_PAUSED),
            )
        ],
        "ms",
    )
    print_table(
        f"the runs {WARM_PAUSE_S * 1000:g} ms apart, step by step, against the floor's steps",
        [
            (name, [s * 1e6 for s in warm_samples[name]], floor_name)
            for pair in zip(FLOOR_STEPS, PAUSED_STEPS, strict=True)
            for name, floor_name in ((pair[0], ""), (pair[1], pair[0]))
        ],
        "us",
    )
    print_table(
        "the machine after a pause: a run's first step alone",
        [
            (SESSION_PAUSED, [s * 1e6 for s in warm_samples[SESSION_PAUSED]], SESSION_AT_ONCE),
            (SESSION_AT_ONCE, [s * 1e6 for s in warm_samples[SESSION_AT_ONCE]], ""),
        ],
        "us",
    )


if __name__ == "__main__":
    asyncio.run(main())
