"""Time from a run request to the program's first instruction and to its result.

Cold: ``docker run`` per run (no pool). Warm: a pooled container whose runner is connected
and warmed; before each warm run the pool is allowed to refill, so each sample measures a run
that found a warm container, as under light load. Also prints the idle memory of a pooled
container, read from its cgroup.

    .venv/bin/python bench/sandbox_start.py [--runs 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.sandbox import DEFAULT_IMAGE, DockerBackend
from bench._table import print_table

PROGRAM = "x = 1\nx + 1\n"


async def measure(
    backend: DockerBackend, runs: int, *, warm: bool
) -> tuple[list[float], list[float]]:
    first, done = [], []
    for _ in range(runs):
        if warm:
            await backend.pool.wait_ready(1)
        wall = time.time()
        began = time.perf_counter()
        result = await backend.run(PROGRAM)
        elapsed = time.perf_counter() - began
        if not result.ok or result.pooled != warm or result.started_at is None:
            raise SystemExit(f"unexpected result: {result}")
        first.append((result.started_at - wall) * 1000)
        done.append(elapsed * 1000)
    return first, done


async def main(runs: int, image: str) -> None:
    async with DockerBackend(image=image, pool_size=0) as cold_backend:
        await measure(cold_backend, 2, warm=False)
        cold_first, cold_done = await measure(cold_backend, runs, warm=False)
    async with DockerBackend(image=image, pool_size=2) as warm_backend:
        await warm_backend.pool.wait_ready(2)
        await measure(warm_backend, 2, warm=True)
        warm_first, warm_done = await measure(warm_backend, runs, warm=True)
        await warm_backend.pool.wait_ready(2)
        await asyncio.sleep(2)  # let the refilled containers settle before reading memory
        idle = [c.memory_bytes() or 0 for c in list(warm_backend.pool._ready)]
    print_table(
        f"sandbox start, {runs} runs each (ms)",
        [
            (
                "cold: request -> first instruction",
                cold_first,
                "warm: request -> first instruction",
            ),
            ("warm: request -> first instruction", warm_first, ""),
            ("cold: request -> result", cold_done, "warm: request -> result"),
            ("warm: request -> result", warm_done, ""),
        ],
        "ms",
    )
    print(
        f"\nidle pooled container memory (cgroup): median "
        f"{statistics.median(idle) / 2**20:.1f} MiB over {len(idle)} containers"
    )
    print("goals: warm median <= 10 ms, p99 <= 50 ms; idle pooled container <= 32 MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--image", default=os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE))
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.image))
