"""What one hostile run costs the host: memory, event-loop time, and the engine's CPU.

Run: ``.venv/bin/python bench/hostile_frames.py [--runs 5]``. Each case runs one program in a
real container, next to a benign run on the same event loop:

- **host memory and loop stalls**: a program writes its worst frame straight onto the bridge
  socket (a 12 MB ``done`` frame of empty objects, the same of empty lists, a 12 MB frame of
  escaped characters, a stream of 1 MiB ``call`` frames of empty objects, the same of
  argument names the tool does not take, a burst of 60 such frames of 240 KB). While it does, a
  ticker task on the loop records the longest gap between its 1 ms ticks, and the host's peak
  RSS is read from ``/proc/self/status`` (``VmHWM``, reset through ``/proc/self/clear_refs``
  before each sample; freed memory is handed back with ``malloc_trim`` between samples).
  The benign run makes 50 tool calls one after another; its duration shows whether the
  hostile run stalled it.
- **output flood**: a program writes to every descriptor it holds for 3 s, but the bridge
  socket and its own stdout and stderr (captured, and capped at the output limit); the CPU
  seconds that ``dockerd``, ``containerd`` and the containers' shims spend meanwhile are read
  from ``/proc/PID/stat``, next to a program that sleeps for 3 s (the engine's own baseline,
  other users of the engine included).

Goals (issue 14): host RSS growth < 64 MiB and the longest loop stall < 50 ms for the worst
frame; the engine spends next to nothing on a flood the program cannot get past its cap.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil

from airlock.bridge import ToolSession
from airlock.policies import SandboxProfile
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend, RunResult
from airlock.tools import AuditLog, MemoryAuditStore
from bench._args import at_least
from bench._table import print_table
from bench.bridge import GRANT, PRINCIPAL, build_registry

# The program finds the bridge socket among its descriptors and writes one crafted frame
# (or a stream of them) on it, then waits for the host to end the run.
_SEND = """
import os, socket, stat, struct, time
fd = next(fd for fd in range(1024) if _is_socket(fd))
bridge = socket.socket(fileno=fd)
for body in FRAMES():
    bridge.sendall(struct.pack(">I", len(body)) + body)
time.sleep(60)
"""

_IS_SOCKET = """
def _is_socket(fd):
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False
"""

SIZE = 12_000_000
HOSTILE: dict[str, str] = {
    "done: 12 MB of empty objects": f"""
def FRAMES():
    head = b'{{"type":"done","result":{{"status":"ok","exit_status":0,"has_value":true,"value":['
    n = ({SIZE} - len(head) - 4) // 3
    yield head + b"{{}}," * n + b"{{}}]}}}}"
""",
    "done: 12 MB of empty lists": f"""
def FRAMES():
    head = b'{{"type":"done","result":{{"status":"ok","exit_status":0,"has_value":true,"value":['
    n = ({SIZE} - len(head) - 4) // 3
    yield head + b"[]," * n + b"[]]}}}}"
""",
    "done: 12 MB of escaped characters": f"""
def FRAMES():
    head = b'{{"type":"done","result":{{"status":"ok","exit_status":0,"has_value":true,"value":"'
    n = ({SIZE} - len(head) - 4) // 6
    yield head + b"\\\\u0000" * n + b'"}}}}'
""",
    "call: 1 MiB frames of empty objects": """
def FRAMES():
    for call_id in range(1, 21):
        head = b'{"type":"call","id":%d,"tool":"records_item_get","args":{"x":[' % call_id
        n = (1024 * 1024 - len(head) - 12) // 3  # the limit counts the 4-byte header
        yield head + b"{}," * n + b"{}]}}"
""",
    "call: 1 MiB frames of unknown names": """
def FRAMES():
    for call_id in range(1, 21):
        head = b'{"type":"call","id":%d,"tool":"records_item_get","args":{' % call_id
        names, size, n = [], len(head) + 8, 0
        while size < 1024 * 1024 - 32:
            name = b'"k%d":0' % n
            names.append(name)
            size += len(name) + 1
            n += 1
        yield head + b",".join(names) + b"}}"
""",
    "call: burst of 240 KB unknown names": """
def FRAMES():
    args = b",".join(b'"k%d":0' % n for n in range(23_000))
    for call_id in range(1, 61):
        yield b'{"type":"call","id":%d,"tool":"records_item_get","args":{' % call_id + args + b"}}"
""",
}
BENIGN = """
for n in range(1, 51):
    tools.records_item_get(record_id=f"rec_{n}")
"done"
"""
IDLE = """
import time
time.sleep(3)
0
"""
FLOOD = """
import os, stat, time
chunk = b"f" * (1 << 20)
written = 0
targets = []
for fd in range(1024):
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        continue
    if fd not in (1, 2) and not stat.S_ISSOCK(mode):  # 1, 2: captured and capped
        targets.append(fd)
end = time.monotonic() + 3
while time.monotonic() < end:
    for fd in targets:
        try:
            written += os.write(fd, chunk)
        except OSError:
            pass
written
"""
_DAEMONS = ("dockerd", "containerd")


def _program(name: str) -> str:
    return _IS_SOCKET + HOSTILE[name] + _SEND


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


class Ticker:
    """A task on the loop that wakes every millisecond and records the longest gap."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            self.longest = max(self.longest, time.perf_counter() - began - 0.001)

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


def _session() -> ToolSession:
    registry = build_registry(AuditLog(MemoryAuditStore()))
    return ToolSession(registry=registry, principal=PRINCIPAL, grant=GRANT)


async def _timed(run: Awaitable[RunResult]) -> tuple[RunResult, float]:
    began = time.perf_counter()
    result = await run
    return result, time.perf_counter() - began


async def sample(
    backend: DockerBackend, profile: SandboxProfile, program: str | None
) -> tuple[float, float, float, str]:
    """One hostile run (or none) next to a benign one: RSS growth MiB, longest stall ms,
    the benign run's duration ms, and how the hostile run ended."""
    await backend.pool.wait_ready(backend.pool.size)
    _reset_peak()
    before = _status_kib("VmRSS")
    with Ticker() as ticker:
        runs: list[Awaitable[tuple[RunResult, float]]] = [
            _timed(backend.run(BENIGN, profile=profile, tools=_session()))
        ]
        if program is not None:
            runs.append(_timed(backend.run(program, profile=profile, tools=_session())))
        outcomes = await asyncio.gather(*runs)
    benign, benign_s = outcomes[0]
    if benign.value != "done":
        raise SystemExit(f"the benign run failed: {benign.reason()} {benign.error}")
    ended = outcomes[1][0].status if program is not None else benign.status
    growth = (_status_kib("VmHWM") - before) / 1024
    return growth, ticker.longest * 1000, benign_s * 1000, ended


def _daemon_cpu(pids: dict[int, psutil.Process]) -> dict[int, float]:
    seconds = {}
    for pid, process in pids.items():
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        seconds[pid] = times.user + times.system
    return seconds


async def engine_cpu(
    backend: DockerBackend, profile: SandboxProfile, program: str
) -> tuple[float, RunResult]:
    """Engine CPU seconds (dockerd, containerd, shims) while one program runs."""
    await backend.pool.wait_ready(backend.pool.size)
    watched = {
        p.pid: p
        for p in psutil.process_iter(["name"])
        if (p.info["name"] or "") in _DAEMONS
        or (p.info["name"] or "").startswith("containerd-shim")
    }
    first = _daemon_cpu(watched)
    last = dict(first)
    task = asyncio.create_task(backend.run(program, profile=profile))
    while not task.done():
        last.update(_daemon_cpu(watched))  # a shim's last reading before it exits
        await asyncio.sleep(0.05)
    return sum(last[pid] - first[pid] for pid in first), task.result()


async def _repeat(
    runs: int, measure: Callable[[], Awaitable[tuple[float, float, float, str]]]
) -> list[tuple[float, float, float, str]]:
    return [await measure() for _ in range(runs)]


async def main(runs: int, image: str) -> None:
    profile = SandboxProfile(language_mode="full", timeout_s=10)
    async with DockerBackend(image=image, profile=profile, pool_size=2) as backend:
        await backend.pool.wait_ready(2)
        await sample(backend, profile, None)  # warm the paths once
        cases: dict[str, list[tuple[float, float, float, str]]] = {
            "benign run alone": await _repeat(runs, lambda: sample(backend, profile, None))
        }
        for name in HOSTILE:
            program = _program(name)
            cases[name] = await _repeat(runs, lambda p=program: sample(backend, profile, p))  # type: ignore[misc]
        engine: dict[str, list[float]] = {"sleep 3 s (baseline)": [], "flood 3 s": []}
        for _ in range(3):
            for name, program in zip(engine, (IDLE, FLOOD), strict=True):
                cpu, result = await engine_cpu(backend, profile, program)
                engine[name].append(cpu)
    base = "benign run alone"
    print_table(
        f"host RSS growth while the run sends its frame, {runs} runs each (MiB)",
        [(name, [s[0] for s in samples], "") for name, samples in cases.items()],
        "MiB",
    )
    print_table(
        f"longest event-loop stall, {runs} runs each (ms)",
        [(name, [s[1] for s in samples], "") for name, samples in cases.items()],
        "ms",
    )
    print_table(
        f"a benign run of 50 tool calls next to the hostile one, {runs} runs each (ms)",
        [
            (name, [s[2] for s in samples], base if name != base else "")
            for name, samples in cases.items()
        ],
        "ms",
    )
    print("\nhow the hostile runs ended:")
    for name, samples in cases.items():
        print(f"  {name:<38}{', '.join(sorted({s[3] for s in samples}))}")
    print_table(
        "engine CPU (dockerd, containerd, shims) while one program runs, 3 runs each (s)",
        [
            ("sleep 3 s (baseline)", engine["sleep 3 s (baseline)"], ""),
            ("flood 3 s", engine["flood 3 s"], "sleep 3 s (baseline)"),
        ],
        "s",
    )
    print(
        f"the flood ended {result.status}{f' ({result.limit})' if result.limit else ''}, "
        f"{len(result.stdout)} bytes of stdout reached the host"
    )
    worst_rss = max(max(s[0] for s in samples) for samples in cases.values())
    worst_stall = max(max(s[1] for s in samples) for samples in cases.values())
    print(
        f"worst: RSS growth {worst_rss:.1f} MiB, loop stall {worst_stall:.1f} ms "
        "(goals: < 64 MiB, < 50 ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=at_least(1), default=5)
    parser.add_argument("--image", default=os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE))
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.image))
