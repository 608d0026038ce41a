"""Sandboxed runs per second, and their latency, side by side with bare ``docker run --rm``.

Every case runs the same trivial program (``PROGRAM``, full mode) for ``--seconds`` of
sustained load, each run from a clean process and a clean scratch directory, and no container
ever serves two principals. In one benchmark run, so that the ratios hold on a loaded
machine:

- ``docker run --rm``: the baseline, ``--concurrency`` workers each starting a container of
  the sandbox image (``--network none``) that runs the program and is removed, through the
  engine's API (``containers.run(remove=True)``), as bare as a container run gets;
- ``new principal per request, pool N``: the same workers through :class:`DockerBackend`,
  every request from a new principal, so every run takes a fresh container (a warm one when
  the pool of size N has it);
- ``reuse, P principals``: P principals each issuing runs one after another, all at once;
  with ``reuse=True`` each principal's runs share one container (a fresh process and an empty
  ``/tmp`` per run);
- warm run: one principal, one run at a time, the machine otherwise as it is: a reused
  container, and a pooled fresh container (the pool refilled before each run).

    .venv/bin/python bench/throughput.py [--seconds 10] [--concurrency 8]
        [--principals 1,2,8,32] [--pools 0,2,4,8] [--warm-runs 200] [--runtime runc]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import docker

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.bridge import ToolSession
from airlock.policies import Grant, Principal, SandboxProfile
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend, RunResult
from airlock.tools import Registry
from bench._table import percentile, print_table

PROGRAM = "import os\nlen(os.listdir('/tmp')) + 1\n"
"""Also a check: a clean scratch directory holds nothing, so every run answers 1."""
BARE_COMMAND = ["python3", "-I", "-S", "-c", "import os; print(len(os.listdir('/tmp')) + 1)"]
IMAGE = os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE)
REGISTRY = Registry()


def _session(principal: Principal) -> ToolSession:
    return ToolSession(registry=REGISTRY, principal=principal, grant=Grant())


def _new_principal() -> Principal:
    return Principal(user_id="u" + uuid.uuid4().hex[:12], tenant_id="bench")


def _check(result: RunResult) -> None:
    if not result.ok or result.value != 1:
        raise SystemExit(f"a run failed or was not clean: {result!r}")


async def _sustain(
    workers: int, seconds: float, one: Callable[[int], Awaitable[None]]
) -> tuple[list[float], float]:
    """``workers`` loops calling ``one(worker)`` for ``seconds``: latencies and runs/s."""
    latencies: list[float] = []
    end = time.monotonic() + seconds

    async def loop(worker: int) -> None:
        while time.monotonic() < end:
            began = time.perf_counter()
            await one(worker)
            latencies.append(time.perf_counter() - began)

    began = time.monotonic()
    await asyncio.gather(*(loop(w) for w in range(workers)))
    return latencies, len(latencies) / (time.monotonic() - began)


async def bare_docker(workers: int, seconds: float, runtime: str) -> tuple[list[float], float]:
    client = docker.from_env()

    def run_one() -> None:
        output = client.containers.run(
            IMAGE,
            BARE_COMMAND,
            entrypoint=[],
            remove=True,
            network_mode="none",
            runtime=runtime,
            user="65534:65534",
        )
        if output.strip() != b"1":
            raise SystemExit(f"the bare run answered {output!r}")

    async def one(_worker: int) -> None:
        await asyncio.to_thread(run_one)

    return await _sustain(workers, seconds, one)


async def new_principals(
    workers: int, seconds: float, pool: int, profile: SandboxProfile
) -> tuple[list[float], float]:
    async with DockerBackend(image=IMAGE, profile=profile, pool_size=pool) as backend:
        await backend.pool.wait_ready(pool, timeout=300)

        async def one(_worker: int) -> None:
            _check(await backend.run(PROGRAM, tools=_session(_new_principal())))

        return await _sustain(workers, seconds, one)


async def reused(
    principals: int, seconds: float, pool: int, profile: SandboxProfile
) -> tuple[list[float], float]:
    owners = [Principal(user_id=f"p{n}", tenant_id="bench") for n in range(principals)]
    async with DockerBackend(
        image=IMAGE, profile=profile, pool_size=pool, reuse=True, reuse_max=max(principals, 1)
    ) as backend:
        await backend.pool.wait_ready(pool, timeout=300)
        # Each principal's first run takes its container: sustained load starts after.
        await asyncio.gather(*(backend.run(PROGRAM, tools=_session(o)) for o in owners))

        async def one(worker: int) -> None:
            _check(await backend.run(PROGRAM, tools=_session(owners[worker])))

        return await _sustain(principals, seconds, one)


async def warm(runs: int, profile: SandboxProfile) -> tuple[list[float], list[float]]:
    owner = Principal(user_id="warm", tenant_id="bench")
    kept: list[float] = []
    fresh: list[float] = []
    async with DockerBackend(image=IMAGE, profile=profile, pool_size=1, reuse=True) as backend:
        for _ in range(20):
            await backend.run(PROGRAM, tools=_session(owner))
        for _ in range(runs):
            began = time.perf_counter()
            _check(await backend.run(PROGRAM, tools=_session(owner)))
            kept.append(time.perf_counter() - began)
    async with DockerBackend(image=IMAGE, profile=profile, pool_size=1) as backend:
        for _ in range(min(runs, 50)):
            await backend.pool.wait_ready(1, timeout=300)
            await asyncio.sleep(0.2)  # the refill's start has settled
            began = time.perf_counter()
            _check(await backend.run(PROGRAM))
            fresh.append(time.perf_counter() - began)
    return kept, fresh


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--principals", default="1,2,8,32")
    parser.add_argument("--pools", default="0,2,4,8")
    parser.add_argument("--reuse-pool", type=int, default=4)
    parser.add_argument("--warm-runs", type=int, default=200)
    parser.add_argument("--runtime", default="runc")
    args = parser.parse_args()
    profile = SandboxProfile.model_validate({"language_mode": "full", "runtime": args.runtime})
    print(f"load average at start: {_load()}; image {IMAGE}; runtime {args.runtime}")

    rows: list[tuple[str, list[float], float]] = []
    base = f"docker run --rm, {args.concurrency} conc."
    rows.append((base, *await bare_docker(args.concurrency, args.seconds, args.runtime)))
    for pool in (int(p) for p in args.pools.split(",")):
        name = f"new principal/run, pool {pool}"
        rows.append((name, *await new_principals(args.concurrency, args.seconds, pool, profile)))
    for count in (int(p) for p in args.principals.split(",")):
        name = f"reuse, {count} principals"
        rows.append((name, *await reused(count, args.seconds, args.reuse_pool, profile)))
    kept, fresh = await warm(args.warm_runs, profile)
    print(f"load average at end: {_load()}")

    print(f"\nsustained runs/s ({args.seconds:g} s per case)")
    print(f"{'case':<38}{'runs':>6}{'runs/s':>10}{'p50 ms':>10}{'p99 ms':>10}  ratio")
    base_rate = rows[0][2]
    for name, samples, rate in rows:
        print(
            f"{name:<38}{len(samples):>6}{rate:>10.1f}"
            f"{percentile(samples, 50) * 1000:>10.1f}{percentile(samples, 99) * 1000:>10.1f}"
            f"  {rate / base_rate:.2f}x {base}"
        )
    print_table(
        "run latency under sustained load",
        [(name, [s * 1000 for s in samples], base) for name, samples, _ in rows],
        "ms",
    )
    print_table(
        "warm run, one at a time (request -> result)",
        [
            ("pooled fresh container", [s * 1000 for s in fresh], ""),
            (
                "reused container (fresh process)",
                [s * 1000 for s in kept],
                "pooled fresh container",
            ),
        ],
        "ms",
    )


if __name__ == "__main__":
    asyncio.run(main())
