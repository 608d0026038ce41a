"""CPU spent per container lifecycle, by process: the engine (``dockerd``, ``containerd``), the
shims and the OCI runtime, the container's own processes, and this client; for bare
``docker run --rm`` (runc and crun) and for :class:`DockerBackend` runs with a new principal
each (pool 0: every start on the run's path).

Read from ``/proc``: ``dockerd`` and ``containerd`` by their own CPU time; the shims (which
re-parent to pid 1 when they start) with the runtime processes and the containers under them,
by pid 1's reaped children's time; the containers' own processes by the engine's cpuacct
cgroup (``/sys/fs/cgroup/cpuacct/docker``, cgroup v1), so "shims + runtime" is the first minus
the second. Other users of the engine on the machine add to every column but "client":
run it with the engine otherwise idle, or repeat it and compare. A last table reads each
container's own cgroup, which nobody else adds to: what a container's start costs inside it
(the runtime's set-up, then the program or the runner's start-up and warm-up).

    .venv/bin/python bench/lifecycle_cpu.py [--runs 40] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import docker
import docker.errors

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.bridge import ToolSession
from airlock.policies import Grant, Principal, SandboxProfile
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend
from airlock.tools import Registry
from bench._args import at_least
from bench._bare_docker import BARE_COMMAND, run_bare

PROGRAM = "import os\nlen(os.listdir('/tmp')) + 1\n"
IMAGE = os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE)
TICK = os.sysconf("SC_CLK_TCK")
CONTAINERS_CGROUP = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")
OWNER_LABEL = "io.airlock.owner"
"""The label naming the process whose backend started a container (``host/pid/...``)."""
COLUMNS = ("dockerd", "containerd", "shims+runtime", "containers", "client", "machine")


def _pid(name: str) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    return int(entry.name)
            except OSError:
                continue
    raise SystemExit(f"no {name!r} process: is the engine running?")


def _times(pid: int | str) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) / TICK, (cutime + cstime) / TICK


def _machine() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / TICK


def _snapshot(dockerd: int, containerd: int) -> dict[str, float]:
    containers = int(CONTAINERS_CGROUP.read_text()) / 1e9 if CONTAINERS_CGROUP.exists() else 0.0
    return {
        "dockerd": _times(dockerd)[0],
        "containerd": _times(containerd)[0],
        "reaped": _times(1)[1],
        "containers": containers,
        "client": _times("self")[0],
        "machine": _machine(),
    }


async def _measure(
    runs: int, concurrency: int, one: Callable[[], Awaitable[None]]
) -> tuple[dict[str, float], float]:
    """CPU ms per run by column, and runs/s."""
    dockerd, containerd = _pid("dockerd"), _pid("containerd")
    left = runs

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    await asyncio.sleep(1.0)  # removals of an earlier case settle
    before = _snapshot(dockerd, containerd)
    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - began
    await asyncio.sleep(1.0)  # removals off the run's path are part of the lifecycle
    after = _snapshot(dockerd, containerd)
    delta = {k: (after[k] - before[k]) * 1000 / runs for k in before}
    per_run = {
        "dockerd": delta["dockerd"],
        "containerd": delta["containerd"],
        "shims+runtime": delta["reaped"] - delta["containers"],
        "containers": delta["containers"],
        "client": delta["client"],
        "machine": delta["machine"],
    }
    return per_run, runs / elapsed


async def bare(runs: int, concurrency: int, runtime: str | None) -> tuple[dict[str, float], float]:
    client = docker.from_env()

    def run_one() -> None:
        run_bare(client, IMAGE, runtime)

    async def one() -> None:
        await asyncio.to_thread(run_one)

    return await _measure(runs, concurrency, one)


async def ours(runs: int, concurrency: int, runtime: str) -> tuple[dict[str, float], float]:
    profile = SandboxProfile.model_validate({"language_mode": "full", "runtime": runtime})
    registry = Registry()
    async with DockerBackend(image=IMAGE, profile=profile, pool_size=0) as backend:
        await backend.run(PROGRAM)  # image checked, first imports paid

        async def one() -> None:
            principal = Principal(user_id="u" + uuid.uuid4().hex[:12], tenant_id="bench")
            session = ToolSession(registry=registry, principal=principal, grant=Grant())
            result = await backend.run(PROGRAM, tools=session)
            if not result.ok or result.value != 1:
                raise SystemExit(f"a run failed: {result!r}")

        return await _measure(runs, concurrency, one)


def _own_cpu_ms(container_id: str) -> float:
    """CPU the container's own processes used so far (the runtime's set-up inside it too)."""
    path = CONTAINERS_CGROUP.parent / container_id / "cpuacct.usage"
    return int(path.read_text()) / 1e6


async def start_costs(runtime: str, count: int) -> tuple[float, float]:
    """Median CPU (ms) in a container's own cgroup until it is ready, which no other user of
    the machine adds to: a bare container that has run ``BARE_COMMAND`` (and then waits), and
    a pooled :class:`DockerBackend` container whose runner said hello (and waits)."""
    client = docker.from_env()
    command = [*BARE_COMMAND[:-1], BARE_COMMAND[-1] + "; import time; time.sleep(60)"]
    bare_ids = [
        client.api.create_container(
            IMAGE,
            command,
            entrypoint=[],
            user="65534:65534",
            host_config=client.api.create_host_config(network_mode="none", runtime=runtime),
        )["Id"]
        for _ in range(count)
    ]
    try:
        for container_id in bare_ids:
            client.api.start(container_id)
        await asyncio.sleep(2.0)
        bare_ms = statistics.median(_own_cpu_ms(c) for c in bare_ids)
    finally:
        for container_id in bare_ids:
            client.api.remove_container(container_id, force=True)
    profile = SandboxProfile.model_validate({"language_mode": "full", "runtime": runtime})
    async with DockerBackend(image=IMAGE, profile=profile, pool_size=count) as backend:
        await backend.pool.wait_ready(count, timeout=300)
        await asyncio.sleep(0.5)
        mine = f"/{os.getpid()}/"
        pooled = [
            c.id
            for c in client.containers.list(filters={"label": OWNER_LABEL})
            if mine in c.labels.get(OWNER_LABEL, "")
        ]
        ours_ms = statistics.median(_own_cpu_ms(str(c)) for c in pooled)
    return bare_ms, ours_ms


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=at_least(1), default=40)
    parser.add_argument("--concurrency", type=at_least(1), default=4)
    parser.add_argument("--runtimes", default="runc,crun")
    args = parser.parse_args()
    offered = docker.from_env().info().get("Runtimes") or {}
    runtimes = [r for r in args.runtimes.split(",") if r in offered]
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    rows: list[tuple[str, dict[str, float], float]] = []
    for runtime in runtimes:
        bare_row = await bare(args.runs, args.concurrency, runtime)
        rows.append((f"docker run --rm ({runtime})", *bare_row))
        rows.append(
            (f"DockerBackend ({runtime})", *await ours(args.runs, args.concurrency, runtime))
        )
    starts = {runtime: await start_costs(runtime, args.concurrency) for runtime in runtimes}
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"\nCPU ms per lifecycle ({args.runs} runs, {args.concurrency} at a time)")
    print(f"{'case':<28}" + "".join(f"{c:>15}" for c in COLUMNS) + f"{'runs/s':>9}")
    for name, cpu, rate in rows:
        print(f"{name:<28}" + "".join(f"{cpu[c]:>15.1f}" for c in COLUMNS) + f"{rate:>9.1f}")

    print("\nCPU ms in the container's own cgroup until ready (median; others do not add to it)")
    for runtime, (bare_ms, ours_ms) in starts.items():
        print(
            f"{runtime:<6} bare, program run {bare_ms:8.1f}"
            f"   DockerBackend, at hello {ours_ms:8.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
