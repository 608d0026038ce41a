"""Time from a run request to the program's first instruction and to its result, and a tool
call's round trip, under each container runtime (runc, crun and gVisor's runsc) and in each image
(base, and data: numpy, pandas, pyarrow, matplotlib) side by side.

Cold: ``docker run`` per run (no pool). Warm: a pooled container whose runner is connected
and warmed; before each warm run the pool is allowed to refill, so each sample measures a run
that found a warm container, as under light load. Round trip: sequential tool calls from a
program (guest -> host admission -> guest), through the bridge over the host's Unix socket
(under runsc, through gVisor's file proxy). Also prints the idle memory of a pooled
container, read from its cgroup (under runsc: gVisor's own processes included).

For the data image, the program imports pandas and sums a column (``DATA_PROGRAM``): a warm
container imported pandas before it was offered, so the run does not pay for it. Two more
rows show what inputs cost: a run given an input file starts its own container (inputs are
mounted when a container is created), unless the backend's pool was created with exactly
those inputs; and what importing the data packages costs a fresh interpreter (what the warm
runner saves each run).

    .venv/bin/python bench/sandbox_start.py [--runs 50] [--runtimes runc,crun,runsc]
        [--images base,data]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import get_args

import docker

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.bridge import BridgeLimits, ToolSession
from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DEFAULT_DATA_IMAGE, DEFAULT_IMAGE, DockerBackend
from airlock.tools import AuditLog, SQLiteAuditStore
from bench._args import at_least
from bench._table import print_table
from bench.bridge import GRANT, PRINCIPAL, build_registry

PROGRAM = "x = 1\nx + 1\n"
DATA_PROGRAM = "import pandas as pd\nint(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())\n"
INPUT_PROGRAM = "import pandas as pd\nlen(pd.read_csv('/data/sales.csv'))\n"
IMPORTS = (
    "import numpy, pandas, pyarrow, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"
)
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
    backend: DockerBackend,
    runs: int,
    *,
    warm: bool,
    program: str = PROGRAM,
    inputs: dict[str, Path] | None = None,
) -> tuple[list[float], list[float]]:
    first, done = [], []
    for _ in range(runs):
        if warm:
            await backend.pool.wait_ready(1, timeout=300)
        wall = time.time()
        began = time.perf_counter()
        result = await backend.run(program, inputs=inputs)
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
    runtime: ContainerRuntime, kind: str, runs: int, calls: int, images: dict[str, str]
) -> dict[str, list[float]]:
    profile = SandboxProfile.model_validate(
        {"runtime": runtime, "image": kind, "language_mode": "full", "timeout_s": 60}
    )
    program = DATA_PROGRAM if kind == "data" else PROGRAM
    backends = {"image": images["base"], "data_image": images["data"], "profile": profile}
    async with DockerBackend(**backends, pool_size=0) as cold_backend:  # type: ignore[arg-type]
        await measure(cold_backend, 2, warm=False, program=program)
        cold_first, cold_done = await measure(cold_backend, runs, warm=False, program=program)
    async with DockerBackend(**backends, pool_size=2) as warm_backend:  # type: ignore[arg-type]
        await warm_backend.pool.wait_ready(2, timeout=300)
        await measure(warm_backend, 2, warm=True, program=program)
        warm_first, warm_done = await measure(warm_backend, runs, warm=True, program=program)
        trips = await round_trips(warm_backend, calls) if kind == "base" else []
        await warm_backend.pool.wait_ready(2, timeout=300)
        await asyncio.sleep(2)  # let the refilled containers settle before reading memory
        idle = [c.memory_bytes() or 0 for c in list(warm_backend.pool._ready)]
    seen = {
        "cold first": cold_first,
        "warm first": warm_first,
        "cold done": cold_done,
        "warm done": warm_done,
        "round trip": trips,
        "idle": idle,
    }
    if kind == "data":
        seen.update(await with_inputs(backends, runs))
    return seen


async def with_inputs(backends: dict[str, object], runs: int) -> dict[str, list[float]]:
    """A run given an input: in its own container, or in a pooled one created with it."""
    with tempfile.TemporaryDirectory() as tmp:
        sales = Path(tmp) / "sales.csv"
        sales.write_text("region,amount\n" + "north,1\n" * 1000)
        sales.chmod(0o644)
        given = {"sales.csv": sales}
        async with DockerBackend(**backends, pool_size=2) as pooled:  # type: ignore[arg-type]
            await pooled.pool.wait_ready(2, timeout=300)
            _, own = await measure(pooled, runs, warm=False, program=INPUT_PROGRAM, inputs=given)
        async with DockerBackend(  # type: ignore[arg-type]
            **backends, pool_size=2, inputs=given
        ) as pooled:
            await pooled.pool.wait_ready(2, timeout=300)
            _, warm = await measure(pooled, runs, warm=True, program=INPUT_PROGRAM, inputs=given)
    return {"inputs own done": own, "inputs pooled done": warm}


def import_cost(image: str, runtime: ContainerRuntime, runs: int) -> list[float]:
    """What a fresh interpreter in the data image pays to import its packages (ms): what the
    warm runner pays once, before a container is offered."""
    client = docker.from_env()
    profile = SandboxProfile(runtime=runtime)
    samples = []
    script = (
        "import sys, time; sys.path[:0] = ['/opt/airlock/lib']; t = time.perf_counter(); "
        f"{IMPORTS}; print((time.perf_counter() - t) * 1000)"
    )
    for _ in range(runs):
        out = client.containers.run(
            image,
            entrypoint=["python3", "-I", "-S", "-c", script],
            command=[],
            environment={"MPLCONFIGDIR": "/tmp", "MPLBACKEND": "Agg"},
            network_mode="none",
            runtime=runtime,
            # The sandbox's own filter: under gVisor, Docker's default one refuses the
            # threads numpy starts while it imports.
            security_opt=[
                "no-new-privileges:true",
                f"seccomp={json.dumps(profile.docker_seccomp())}",
            ],
            cap_drop=["ALL"],
            user="65534:65534",
            read_only=True,
            tmpfs={"/tmp": "rw,size=16777216"},
            remove=True,
        )
        samples.append(float(out.decode().strip().splitlines()[-1]))
    return samples


async def main(
    runs: int,
    calls: int,
    images: dict[str, str],
    runtimes: list[ContainerRuntime],
    kinds: list[str],
) -> None:
    seen = {
        (runtime, kind): await one_runtime(runtime, kind, runs, calls, images)
        for runtime in runtimes
        for kind in kinds
    }
    first = runtimes[0]
    for title, key, unit in [
        (f"request -> first instruction, {runs} runs each (ms)", "first", "ms"),
        (f"request -> result, {runs} runs each (ms)", "done", "ms"),
    ]:
        rows: list[tuple[str, list[float], str]] = []
        for runtime in runtimes:
            for kind in kinds:
                for start in ("cold", "warm"):
                    name = f"{runtime} {kind} {start}"
                    if kind != "base" and "base" in kinds:
                        baseline = f"{runtime} base {start}"
                    elif runtime != first:
                        baseline = f"{first} {kind} {start}"
                    else:
                        baseline = ""
                    rows.append((name, seen[(runtime, kind)][f"{start} {key}"], baseline))
        print_table(title, rows, unit)
    trip = "guest -> host -> guest"
    if "base" in kinds:
        print_table(
            f"tool call round trip, {calls} sequential calls (us)",
            [
                (
                    f"{rt} {trip}",
                    seen[(rt, "base")]["round trip"],
                    "" if rt == first else f"{first} {trip}",
                )
                for rt in runtimes
            ],
            "us",
        )
    if "data" in kinds:
        rows = []
        for runtime in runtimes:
            data = seen[(runtime, "data")]
            warm = f"{runtime} data warm, no inputs"
            rows.append((warm, data["warm done"], ""))
            rows.append((f"{runtime} data, inputs: own container", data["inputs own done"], warm))
            rows.append(
                (f"{runtime} data, inputs: pooled with them", data["inputs pooled done"], warm)
            )
        print_table(
            f"a data run given an input, request -> result, {runs} runs each (ms)", rows, "ms"
        )
        rows = [
            (f"{runtime} import the data packages", import_cost(images["data"], runtime, 5), "")
            for runtime in runtimes
        ]
        print_table("a fresh interpreter in the data image: import cost, 5 runs (ms)", rows, "ms")
    print()
    for runtime in runtimes:
        for kind in kinds:
            idle = seen[(runtime, kind)]["idle"]
            print(
                f"{runtime} {kind}: idle pooled container memory (cgroup): median "
                f"{statistics.median(idle) / 2**20:.1f} MiB over {len(idle)} containers"
            )
    print("goals (runc): warm median <= 10 ms, p99 <= 50 ms; idle pooled container <= 32 MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=at_least(1), default=50)
    parser.add_argument("--calls", type=at_least(1), default=500)
    parser.add_argument("--runtimes", default="runc,crun,runsc")
    parser.add_argument("--images", default="base,data", help="base and/or data")
    parser.add_argument("--image", default=os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE))
    parser.add_argument(
        "--data-image", default=os.environ.get("AIRLOCK_DATA_IMAGE", DEFAULT_DATA_IMAGE)
    )
    args = parser.parse_args()
    kinds = [k for k in args.images.split(",") if k]
    if not kinds or set(kinds) - {"base", "data"}:
        raise SystemExit(f"--images takes base and data, not {args.images!r}")
    known: tuple[ContainerRuntime, ...] = get_args(ContainerRuntime)
    chosen: list[ContainerRuntime] = []
    for name in args.runtimes.split(","):
        runtime = next((r for r in known if r == name), None)
        if runtime is None:
            raise SystemExit(f"--runtimes takes {', '.join(known)}, not {name!r}")
        chosen.append(runtime)
    images = {"base": args.image, "data": args.data_image}
    asyncio.run(main(args.runs, args.calls, images, chosen, kinds))
