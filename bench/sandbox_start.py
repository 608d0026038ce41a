"""Time from a run request to the program's first instruction and to its result, and a tool
call's round trip, under each container runtime (runc and gVisor's runsc) side by side.

Cold: ``docker run`` per run (no pool). Warm: a pooled container whose runner is connected
and warmed; before each warm run the pool is allowed to refill, so each sample measures a run
that found a warm container, as under light load. Round trip: sequential tool calls from a
program (guest -> host admission -> guest), through the bridge over the host's Unix socket
(under runsc, through gVisor's file proxy). Also prints the idle memory of a pooled
container, read from its cgroup (under runsc: gVisor's own processes included).

    .venv/bin/python bench/sandbox_start.py [--runs 50] [--runtimes runc,runsc]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.bridge import BridgeLimits, ToolSession
from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend
from airlock.tools import AuditLog, SQLiteAuditStore
from bench._table import print_table
from bench.bridge import GRANT, PRINCIPAL, build_registry

PROGRAM = "x = 1\nx + 1\n"
ROUND_TRIP_PROGRAM = """
import time
get = tools.records_item_get
for n in range(50):
    get(record_id="rec_1")                # warm the path
latencies = []
for n in range(CALLS):
    t = time.perf_counter(); get(record_id=f"rec_{n % 1000 + 1}")
    latencies.append(time.perf_counter() - t)
latencies
"""


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


async def round_trips(backend: DockerBackend, calls: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        audit = AuditLog(SQLiteAuditStore(Path(tmp) / "audit.db"), batch_size=1024)
        session = ToolSession(
            registry=build_registry(audit),
            principal=PRINCIPAL,
            grant=GRANT,
            limits=BridgeLimits(max_calls=calls + 100),
        )
        await backend.pool.wait_ready(1)
        result = await backend.run(ROUND_TRIP_PROGRAM.replace("CALLS", str(calls)), tools=session)
        audit.close()
    if not result.ok or not isinstance(result.value, list):
        raise SystemExit(f"round-trip program failed: {result.reason()} {result.error}")
    return [float(x) * 1e6 for x in result.value]  # type: ignore[arg-type]


async def one_runtime(
    runtime: ContainerRuntime, runs: int, calls: int, image: str
) -> dict[str, list[float]]:
    profile = SandboxProfile(runtime=runtime, language_mode="full", timeout_s=60)
    async with DockerBackend(image=image, profile=profile, pool_size=0) as cold_backend:
        await measure(cold_backend, 2, warm=False)
        cold_first, cold_done = await measure(cold_backend, runs, warm=False)
    async with DockerBackend(image=image, profile=profile, pool_size=2) as warm_backend:
        await warm_backend.pool.wait_ready(2)
        await measure(warm_backend, 2, warm=True)
        warm_first, warm_done = await measure(warm_backend, runs, warm=True)
        trips = await round_trips(warm_backend, calls)
        await warm_backend.pool.wait_ready(2)
        await asyncio.sleep(2)  # let the refilled containers settle before reading memory
        idle = [c.memory_bytes() or 0 for c in list(warm_backend.pool._ready)]
    return {
        "cold first": cold_first,
        "warm first": warm_first,
        "cold done": cold_done,
        "warm done": warm_done,
        "round trip": trips,
        "idle": idle,
    }


async def main(runs: int, calls: int, image: str, runtimes: list[ContainerRuntime]) -> None:
    seen = {runtime: await one_runtime(runtime, runs, calls, image) for runtime in runtimes}
    base = runtimes[0]
    for title, key, unit in [
        (f"request -> first instruction, {runs} runs each (ms)", "first", "ms"),
        (f"request -> result, {runs} runs each (ms)", "done", "ms"),
    ]:
        rows: list[tuple[str, list[float], str]] = []
        for runtime in runtimes:
            for kind in ("cold", "warm"):
                baseline = "" if runtime == base else f"{base} {kind}"
                rows.append((f"{runtime} {kind}", seen[runtime][f"{kind} {key}"], baseline))
        print_table(title, rows, unit)
    trip = "guest -> host -> guest"
    print_table(
        f"tool call round trip, {calls} sequential calls (us)",
        [
            (f"{rt} {trip}", seen[rt]["round trip"], "" if rt == base else f"{base} {trip}")
            for rt in runtimes
        ],
        "us",
    )
    print()
    for runtime in runtimes:
        idle = seen[runtime]["idle"]
        print(
            f"{runtime}: idle pooled container memory (cgroup): median "
            f"{statistics.median(idle) / 2**20:.1f} MiB over {len(idle)} containers"
        )
    print("goals (runc): warm median <= 10 ms, p99 <= 50 ms; idle pooled container <= 32 MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--runtimes", default="runc,runsc")
    parser.add_argument("--image", default=os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE))
    args = parser.parse_args()
    chosen: list[ContainerRuntime] = []
    for name in args.runtimes.split(","):
        if name not in ("runc", "runsc"):
            raise SystemExit(f"--runtimes takes runc and runsc, not {name!r}")
        chosen.append("runc" if name == "runc" else "runsc")
    asyncio.run(main(args.runs, args.calls, args.image, chosen))
