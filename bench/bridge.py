"""Tool calls from a program in a real container, against the same calls made on the host.

Run: ``.venv/bin/python bench/bridge.py [--runs N] [--busy N] [--audit memory]``
(``--busy``: N processes spinning beside it, a loaded machine). A trivial read tool returns a
~200-byte record; every call goes through full admission and a durable SQLite audit log (WAL,
batched, flushed before the run's result returns). ``--audit memory`` keeps the events in
memory instead, stored as they are recorded with no writer thread: the difference between the
two runs is what writing the log costs the bridge. The guest measures its own calls with
``perf_counter``; the floor is ``Registry.call`` made directly in-process on the host, with the
same audit log. 1,000 reads are made as a loop of single calls, as a gather of ``.aio`` calls
bounded to 1, 4, 16 and 64 at a time (a semaphore in the program), as one plain gather and as
one ``.batch``, interleaved run by run so that drift on a shared machine falls on all of them;
each is compared with the loop measured in the same run. A call of the loop's average time is
printed beside the round trip's median, with the share of round trips over 1 ms: beside busy
processes the few calls whose process waited for a processor set the loop's pace. The last
lines give the CPU each call cost over the whole run: the host's (every thread; then the event
loop's and the audit writer's shares, from ``/proc`` on Linux) and the guest's (the program's
own process, as the runner measures it).

The machine's own floor under a round trip is measured in the same run as well: an asyncio
server on a Unix socket answering a blocking client in another process, with messages the
size of a call and its result and no work between them (``bench/_echo.py``). The bridge's round
trip is quoted against it: what the bridge adds, apart from how fast the machine wakes a
process (with ``--busy``, the echo runs beside the busy processes too).

Goals (issue 17, 2-core machine): 64 concurrent ``.aio`` calls >= 3x the loop's calls/s;
round trip median <= 120 us on a loaded machine. (Issue 4: p99 <= 1 ms; >= 30,000 batched
calls/s.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pydantic import BaseModel, Field

from airlock.bridge import BridgeLimits, ToolSession
from airlock.policies import Grant, Principal, SandboxProfile, read
from airlock.sandbox import DEFAULT_IMAGE, DockerBackend
from airlock.tools import AuditLog, CallContext, MemoryAuditStore, Registry, SQLiteAuditStore
from bench._args import at_least
from bench._busy import busy_processes
from bench._echo import echo_round_trips
from bench._table import percentile, print_table

RUNS = 5
SETTLE_S = 0.5
"""The program's pause before it measures. On a virtual machine a processor that idles takes
long to wake (this one halts at once: ``haltpoll``, no polling), and for 100 ms or more after
a container starts, the engine's own work keeps both processors awake: round trips measured
then took about half as long as once the machine had settled, as long as beside busy
processes. (Before, the pool's refill, and its warm-up a second later, ran beside the
program.)"""
CONCURRENCY = (1, 4, 16, 64)
RecordId = Annotated[str, Field(pattern=r"^rec_[0-9]{1,6}$", max_length=12)]
PRINCIPAL = Principal(user_id="bench", tenant_id="acme", scopes=frozenset({"records.read"}))
GRANT = Grant(scopes=frozenset({"records.read"}), effects=(read("records:**"),))


class Record(BaseModel):
    record_id: str
    customer: str
    total_minor: int
    currency: str
    status: str
    memo: str


def build_registry(audit: AuditLog) -> Registry:
    registry = Registry(audit=audit)

    @registry.tool(
        effects=[read("records:record/{record_id}")],
        scope="records.read",
        callers={"direct", "code"},
    )
    async def records_item_get(ctx: CallContext, record_id: RecordId) -> Record:
        """Fetch one record. Use it for benchmarks.
        It does nothing else."""
        return Record(
            record_id=record_id,
            customer="cus_" + record_id[4:].rjust(8, "0"),
            total_minor=int(record_id[4:]) * 7,
            currency="EUR",
            status="paid",
            memo="m" * 110,
        )

    return registry


PROGRAM = """
import asyncio, time
get = tools.records_item_get
ids = [f"rec_{n}" for n in range(1, 1001)]
rt_ids = [f"rec_{n % 1000 + 1}" for n in range(ROUND_TRIPS)]
for i in ids[:200]:
    get(record_id=i)                      # warm the path
time.sleep(SETTLE_S)                      # what follows a start ends first

latencies = []
for i in rt_ids:
    t = time.perf_counter(); get(record_id=i); latencies.append(time.perf_counter() - t)

def timed(times, work):
    t = time.perf_counter(); out = work(); times.append(time.perf_counter() - t)
    return out

async def bounded(limit):
    gate = asyncio.Semaphore(limit)
    async def one(i):
        async with gate:
            return await get.aio(record_id=i)
    return await asyncio.gather(*(one(i) for i in ids))

async def unbounded():
    return await asyncio.gather(*(get.aio(record_id=i) for i in ids))

times = {"loop": [], "batch": [], "all": [], **{c: [] for c in CONCURRENCY}}
for _ in range(RUNS):                     # interleaved: drift falls on every case alike
    out = [timed(times["loop"], lambda: [get(record_id=i) for i in ids])]
    for c in CONCURRENCY:
        out.append(timed(times[c], lambda: asyncio.run(bounded(c))))
    out.append(timed(times["all"], lambda: asyncio.run(unbounded())))
    out.append(timed(times["batch"], lambda: get.batch([{"record_id": i} for i in ids])))
    assert all(o == out[0] for o in out), "every way of calling returns the same records"

{"latencies": latencies, "times": {str(k): v for k, v in times.items()},
 "record_bytes": len(str(out[0][0]))}
"""


async def host_floor(registry: Registry, calls: int) -> tuple[list[float], float]:
    session = ToolSession(registry=registry, principal=PRINCIPAL, grant=GRANT)
    latencies = []
    began = time.perf_counter()
    for n in range(1, calls + 1):
        ctx = session.context(f"floor:{n}", time.monotonic() + 60)
        t = time.perf_counter()
        await registry.call("records_item_get", {"record_id": f"rec_{n % 1000 + 1}"}, ctx)
        latencies.append(time.perf_counter() - t)
    total = time.perf_counter() - began
    await asyncio.to_thread(registry.audit.flush)
    return latencies, total


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by thread name (Linux; empty
    elsewhere): the event loop's and the audit writer's shares of the host's CPU."""
    cpu: dict[str, float] = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/schedstat") as stat:
                ns = int(stat.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        cpu[thread.name] = cpu.get(thread.name, 0.0) + ns / 1e9
    return cpu


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


AUDIT_STORES = ("sqlite", "memory")
ECHO = "asyncio echo, 2 host processes"


async def main(round_trips: int, image: str, runs: int, audit_store: str) -> None:
    print(f"image {image}; audit store {audit_store}; before: {_load()}")
    with tempfile.TemporaryDirectory() as tmp:
        store = (
            MemoryAuditStore()
            if audit_store == "memory"
            else SQLiteAuditStore(Path(tmp) / "audit.db")
        )
        audit = AuditLog(store, batch_size=1024)
        registry = build_registry(audit)
        echo = await echo_round_trips(round_trips)
        floor_lat, floor_total = await host_floor(registry, 2000)
        floor_per_call = floor_total / 2000
        profile = SandboxProfile(language_mode="full", timeout_s=300)
        # No pool: a refill (and its warm-up, once idle) would run beside the program.
        async with DockerBackend(image=image, profile=profile, pool_size=0) as backend:
            session = ToolSession(
                registry=registry,
                principal=PRINCIPAL,
                grant=GRANT,
                limits=BridgeLimits(max_calls=200_000, max_in_flight=2000),
            )
            program = (
                PROGRAM.replace("ROUND_TRIPS", str(round_trips))
                .replace("RUNS", str(runs))
                .replace("SETTLE_S", repr(SETTLE_S))
                .replace("CONCURRENCY", repr(CONCURRENCY))
            )
            cpu_before = time.process_time()
            threads_before = _thread_cpu()
            result = await backend.run(program, tools=session)
            host_cpu = time.process_time() - cpu_before
            threads = {
                name: cpu - threads_before.get(name, 0.0) for name, cpu in _thread_cpu().items()
            }
        if not result.ok or not isinstance(result.value, dict):
            raise SystemExit(f"benchmark program failed: {result.reason()} {result.error}")
        value: dict[str, Any] = result.value
        events = len(audit.events(run_id=session.run_id))
        audit.close()
    if events != result.tool_calls:
        raise SystemExit(
            f"the audit log holds {events} events for the run's {result.tool_calls} calls: "
            "every call must be admitted and recorded once"
        )

    us = [x * 1e6 for x in value["latencies"]]
    echo_us = [x * 1e6 for x in echo]
    print_table(
        f"bridge round trip, {len(us)} sequential calls (us)",
        [
            ("guest -> host -> guest", us, "host Registry.call (floor)"),
            ("host Registry.call (floor)", [x * 1e6 for x in floor_lat], ""),
            (ECHO, echo_us, ""),
        ],
        "us",
    )
    times: dict[str, list[float]] = value["times"]
    loop = "sequential (loop of single calls)"
    bulk = {
        loop: times["loop"],
        **{f"{c} concurrent .aio (bounded gather)": times[str(c)] for c in CONCURRENCY},
        "1,000 at once (plain gather of .aio)": times["all"],
        "batched (one .batch of 1,000)": times["batch"],
    }
    floor_name = "host Registry.call loop (floor)"
    print_table(
        f"1,000 reads of a ~{value['record_bytes']}-byte record, {runs} runs each, "
        "interleaved (ms; ratio of times, lower is faster)",
        [(name, [x * 1000 for x in t], loop if name != loop else "") for name, t in bulk.items()]
        + [(floor_name, [floor_per_call * 1000 * 1000], "")],
        "ms",
    )
    sequential = statistics.median(times["loop"])
    print(f"\n{'case':<38}{'calls/s at the median':>22}{'x the loop':>12}")
    for name, t in bulk.items():
        median = statistics.median(t)
        print(f"{name:<38}{1000 / median:>22,.0f}{sequential / median:>11.2f}x")
    print(
        f"{floor_name:<38}{1 / floor_per_call:>22,.0f}{sequential / 1000 / floor_per_call:>11.2f}x"
    )
    round_trip, echo_median = statistics.median(us), statistics.median(echo_us)
    print(
        f"\nround trip median {round_trip:.0f} us, p99 {percentile(us, 99):.0f} us; "
        f"audit events for the run: {events}, one for each of its calls (checked)"
    )
    print(
        f"the machine's floor ({ECHO}): {echo_median:.0f} us at the median; the bridge's round "
        f"trip is {round_trip / echo_median:.2f}x it, {round_trip - echo_median:.0f} us more"
    )
    slow = sum(1 for x in us if x > 1000) / len(us)
    print(
        f"a call of the loop: {sequential * 1e3:.0f} us on average, against the round trip's "
        f"median of {round_trip:.0f} us; {slow:.1%} of the round trips took over 1 ms (a call "
        "whose process waited for a processor: what sets the loop's pace beside busy ones)"
    )
    calls = session.calls
    print(
        f"host CPU per call over the run: {host_cpu / calls * 1e6:.0f} us ({calls} calls; every "
        "thread of the host process: event loop, admission, audit writer; less noisy than "
        "time on a shared machine)"
    )
    split = {
        "event loop": threads.get("MainThread", 0.0),
        "audit writer": threads.get("airlock-audit-writer", 0.0),
    }
    print(
        "  of which "
        + ", ".join(f"{name} {cpu / calls * 1e6:.0f} us" for name, cpu in split.items())
        + " (the writer's thread, if still alive at the end)"
    )
    if result.cpu_time_s is not None:
        print(
            f"guest CPU per call over the run: {result.cpu_time_s / calls * 1e6:.0f} us (the "
            "program's process in the container: its own code and the guest side of the bridge)"
        )
    print(f"after: {_load()}")
    print(
        "goals: 64 concurrent .aio >= 3x the loop's calls/s (issue 17); round trip median "
        "<= 120 us on a loaded machine (issue 17), p99 <= 1000 us; >= 30,000 batched calls/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--round-trips", type=at_least(1), default=2000)
    parser.add_argument("--runs", type=at_least(1), default=RUNS)
    parser.add_argument("--image", default=os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE))
    parser.add_argument(
        "--busy", type=at_least(0), default=0, help="processes spinning beside it: a loaded machine"
    )
    parser.add_argument(
        "--audit",
        choices=AUDIT_STORES,
        default="sqlite",
        help="where the audit log goes: a durable SQLite file, or memory (no writer thread)",
    )
    args = parser.parse_args()
    with busy_processes(args.busy):
        asyncio.run(main(args.round_trips, args.image, args.runs, args.audit))
