"""The audit log: queries of a large log, and what writing it costs the event loop.

Run: ``.venv/bin/python bench/audit.py [--sizes 100000,1000000] [--runs 5]
[--part all|loop|writer|scale]``.

**Scale.** For each size, a log of that many events spread over 30 days (reads of 100,000
invoices by id, listings, network fetches, programs, refunds with their commits) is written
straight into a SQLite audit store, chained and indexed as a harness writes it. Then each
command is run as a user would (a new ``airlock`` process), timed, with its peak memory
(``ru_maxrss`` of the child): ``audit effects --since 1h``, ``audit find --resource
'billing:invoice/inv_1*' --since 7d``, ``audit find --caller code --effect write,network
--since 7d``, ``audit list``. The baseline is ``audit effects --since 1h`` on an empty log in
the same run: a process start, the registry and the policy, no events. One in-process row,
``full scan``, reads every event as ``--since`` used to (measured once per size).

**Loop stall.** An event loop makes registry calls while a probe task sleeps 1 ms at a time
and records how late it wakes; the worst lateness is how long writing the audit log held
the loop. Cases: the memory store (no disk; the floor), the SQLite store written inline on
the loop every 1,024 events (what the log did before: the baseline), and the SQLite store
written by the log's writer thread (now). Then calls that each wait until their events are
durable (``wait_durable``, as ``Session.call`` does), 1, 8 and 64 at a time: group commit
puts concurrent calls' events in one transaction.

**Writer CPU.** What the log's writer thread costs the process per stored event (CPU time of
that thread, ``time.thread_time_ns``: serializing, chaining, the SQL, the commit and waking
the waiters), in batches of 1, 80 and 500 events (each batch recorded, then flushed) to a
new SQLite store with ``synchronous=FULL``; batches of 80 to one already holding 100,000
events (its effect index has outgrown a batch: each read of another record changes another
page), and to PostgreSQL (``fsync`` on; the server's CPU is not counted) when a server can be
started. The floor is the same log writing batches of 80 to a store in memory through its
writer thread (the log's own machinery). Then the writer's CPU per event, and the whole
process's CPU per call, while 64 calls at a time each wait until their events are durable
(as ``Session.call`` does).

Goals (issue 16): ``audit effects --since 1h`` and ``audit find`` at 10^6 events <= 1 s and
<= 200 MB; the loop never waits for the disk.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.tools import (
    AuditEvent,
    AuditLog,
    AuditStore,
    MemoryAuditStore,
    RunAuthority,
    SQLiteAuditStore,
    program_hash,
)
from bench._args import at_least, counts
from bench._table import print_table
from bench.admission import GRANT, PRINCIPAL, make_registry

REPO = Path(__file__).resolve().parents[1]
POLICY = [
    "--registry",
    "examples.billing:demo_registry",
    "--policy",
    "examples/billing/demo_policy.toml",
]
SPAN_S = 30 * 86400
COMMANDS: list[tuple[str, list[str]]] = [
    ("audit effects --since 1h", ["effects", "--since", "1h", *POLICY]),
    (
        "audit find --resource inv_1* --since 7d",
        ["find", "--resource", "billing:invoice/inv_1*", "--since", "7d", "--json"],
    ),
    (
        "audit find --caller code --effect w,n",
        ["find", "--caller", "code", "--effect", "write,network", "--since", "7d", "--json"],
    ),
    ("audit list", ["list"]),
]


def generated(start: int, count: int, total: int, now: float) -> list[AuditEvent]:
    """Events ``start`` to ``start + count`` of ``total`` spread over the last 30 days: 20
    per run, each run one of three users, in the order a harness would write them."""
    rng = random.Random(start)
    events = []
    for i in range(start, start + count):
        run = f"run_{i // 20:08d}"
        user, tenant = (("alice", "acme"), ("bob", "acme"), ("carol", "globex"))[(i // 20) % 3]
        kind = rng.random()
        fields: dict[str, object] = {
            "ts": now - SPAN_S + SPAN_S * i / total,
            "run_id": run,
            "call_id": f"{run}:m1-abcdef:{i % 20}",
            "user_id": user,
            "tenant_id": tenant,
            "args_hash": f"{rng.getrandbits(128):032x}",
            "decision": "allow",
            "rule": "default",
            "outcome": "ok",
            "code": None,
            "duration_s": 0.002,
            "stage": "done",
            "caller": "code",
        }
        if kind < 0.80:
            fields["tool"] = "billing_invoice_get"
            fields["effects"] = (f"read(billing:invoice/inv_{rng.randrange(100_000)})",)
        elif kind < 0.88:
            fields["tool"] = "billing_invoice_list"
            fields["effects"] = ("read(billing:invoice/*)",)
        elif kind < 0.93:
            fields["tool"] = "web_page_fetch"
            fields["effects"] = ("network(docs.example.com)",)
        elif kind < 0.98:
            # A program's own record: its args_hash names the text fill() stores with it.
            text = _program_text(start)
            fields |= {"tool": "execute_code", "caller": "direct", "effects": ()}
            fields["args_hash"] = program_hash(text)
        else:
            invoice = rng.randrange(100_000)
            fields |= {
                "tool": "billing_refund_create",
                "caller": "direct",
                "effects": (f"write(billing:refund/inv_{invoice})", "spend(500 USD)"),
                "final": False,
                "approver": "bob",
            }
        events.append(AuditEvent(**fields))  # type: ignore[arg-type]
    return events


def _program_text(start: int) -> str:
    """The one program the events from ``start`` on (a part :func:`fill` writes) ran."""
    return f"# a program\n{start}\n"


def fill(path: Path, n: int, now: float) -> float:
    """Write ``n`` generated events to a new store at ``path``; seconds it took."""
    store = SQLiteAuditStore(path, synchronous="OFF")
    began = time.perf_counter()
    step = 20_000
    for start in range(0, n, step):
        program = _program_text(start)
        store.append(
            generated(start, min(step, n - start), n, now), {program_hash(program): program}
        )
    store.close()
    return time.perf_counter() - began


LAUNCH = """
import atexit, os, re, sys
def peak():
    with open("/proc/self/status") as status:
        kib = re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1)
    os.write(2, f"\\nairlock-bench-peak-kib {kib}\\n".encode())
atexit.register(peak)
from airlock.cli import main
sys.argv = ["airlock", *sys.argv[1:]]
main()
"""
"""What the ``airlock`` script runs, plus a report of the process's peak resident memory
(``VmHWM``: its own, from exec on; ``ru_maxrss`` of a child also counts the parent it was
forked from)."""


def measured(args: list[str], db: Path, runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock ms and peak MiB of ``runs`` runs of ``airlock audit ARGS --db DB``."""
    seconds, peaks = [], []
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", LAUNCH, "audit", *args, "--db", str(db)],
            cwd=REPO,
            capture_output=True,
            env={**os.environ, "COLUMNS": "200"},
            check=False,
        )
        seconds.append((time.perf_counter() - began) * 1000)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"airlock audit {' '.join(args)}: {done.stderr.decode()[-500:]}")
        found = re.search(rb"airlock-bench-peak-kib (\d+)", done.stderr)
        peaks.append(int(found.group(1)) / 1024 if found else float("nan"))
    return seconds, peaks


def scale(sizes: Sequence[int], runs: int) -> None:
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.db"
        SQLiteAuditStore(empty).close()
        measured(COMMANDS[0][1], empty, 1)  # warm the file cache
        base_ms, base_mib = measured(COMMANDS[0][1], empty, runs)
        for n in sizes:
            db = Path(tmp) / f"audit-{n}.db"
            seconds = fill(db, n, now)
            size_mib = sum(p.stat().st_size for p in Path(tmp).glob(f"audit-{n}.db*")) / 2**20
            rows: list[tuple[str, Sequence[float], str]] = [
                ("baseline: effects, empty log", base_ms, "")
            ]
            peaks: dict[str, float] = {"baseline: effects, empty log": max(base_mib)}
            for name, args in COMMANDS:
                ms, mib = measured(args, db, runs)
                rows.append((name, ms, "baseline: effects, empty log"))
                peaks[name] = max(mib)
            store = SQLiteAuditStore(db, readonly=True)
            began = time.perf_counter()
            everything = store.query()
            cutoff = now - 3600
            recent = [e for e in everything if e.ts >= cutoff]
            full_ms = (time.perf_counter() - began) * 1000
            del everything, recent
            began = time.perf_counter()
            report = store.verify()
            verify_ms = (time.perf_counter() - began) * 1000
            store.close()
            if not report.ok:  # else the figure is of a verify that found a fault
                raise SystemExit(f"the generated log does not verify: {report.detail}")
            rows.append(
                (
                    "full scan (what --since did), in process",
                    [full_ms],
                    "baseline: effects, empty log",
                )
            )
            rows.append(
                (
                    "audit verify (whole chain), in process",
                    [verify_ms],
                    "baseline: effects, empty log",
                )
            )
            print_table(
                f"audit queries at {n:,} events ({size_mib:,.0f} MiB on disk, written in "
                f"{seconds:.1f} s), {runs} runs each (ms)",
                rows,
                "ms",
            )
            print(f"{'peak memory of each command (MiB)':<38}")
            for name, peak in peaks.items():
                print(f"  {name:<44}{peak:>8.1f}")
            print(f"  verify: {report.records:,} records, ok={report.ok}")


# -- the event loop -----------------------------------------------------------------------


class InlineFlushLog(AuditLog):
    """The log as it was: events buffered, and every 1,024 written by the caller, on the
    event loop (the baseline)."""

    def __init__(self, store: SQLiteAuditStore) -> None:
        super().__init__(MemoryAuditStore())
        self.disk = store
        self.buffer: list[AuditEvent] = []

    def record(self, event: AuditEvent) -> None:
        self.buffer.append(event)
        if len(self.buffer) >= 1024:
            self.disk.append(self.buffer)
            self.buffer = []


async def stall(log: AuditLog, calls: int) -> tuple[list[float], list[float], float]:
    """While ``calls`` registry calls run on the loop: how long each ``record()`` held the
    loop (ms), how late a 1 ms probe woke (ms), and calls per second."""
    registry = make_registry(log)
    authority = RunAuthority(principal=PRINCIPAL, grant=GRANT, run_id="bench")
    held: list[float] = []
    late: list[float] = []
    done = False
    record = log.record

    def timed(event: AuditEvent) -> None:
        began = time.perf_counter()
        record(event)
        held.append((time.perf_counter() - began) * 1000)

    log.record = timed  # type: ignore[method-assign]

    async def probe() -> None:
        while not done:
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append((time.perf_counter() - began - 0.001) * 1000)

    async def work() -> float:
        began = time.perf_counter()
        for i in range(calls):
            ctx = authority.context("code", f"c{i}")
            await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctx)
            if i % 16 == 0:
                await asyncio.sleep(0)  # let the probe in, as concurrent traffic would
        return calls / (time.perf_counter() - began)

    watcher = asyncio.create_task(probe())
    rate = await work()
    done = True
    await watcher
    log.flush()
    return held, late, rate


class CountingStore(SQLiteAuditStore):
    """Counts transactions, to show how many calls share one."""

    transactions = 0

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        CountingStore.transactions += 1
        super().append(events, programs)


async def durable_calls(path: Path, calls: int, concurrency: int) -> tuple[list[float], int]:
    """Per-call ms of calls that each wait until durable, ``concurrency`` at a time."""
    CountingStore.transactions = 0
    log = AuditLog(CountingStore(path))
    registry = make_registry(log)
    authority = RunAuthority(principal=PRINCIPAL, grant=GRANT, run_id="bench")
    times: list[float] = []

    async def caller(k: int) -> None:
        for i in range(calls // concurrency):
            began = time.perf_counter()
            ctx = authority.context("direct", f"c{k}:{i}")
            await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctx)
            await log.wait_durable()
            times.append((time.perf_counter() - began) * 1000)

    await asyncio.gather(*(caller(k) for k in range(concurrency)))
    log.close()
    return times, CountingStore.transactions


def loop(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        held_rows: list[tuple[str, Sequence[float], str]] = []
        late_rows: list[tuple[str, Sequence[float], str]] = []
        notes = []
        cases: list[tuple[str, Callable[[], AuditLog]]] = [
            ("memory store (floor)", lambda: AuditLog(MemoryAuditStore())),
            (
                "SQLite, inline every 1,024 (before)",
                lambda: InlineFlushLog(SQLiteAuditStore(Path(tmp) / "inline.db")),
            ),
            (
                "SQLite, writer thread (now)",
                lambda: AuditLog(SQLiteAuditStore(Path(tmp) / "thread.db")),
            ),
        ]
        for name, build in cases:
            held, late, rate = asyncio.run(stall(build(), calls))
            baseline = "SQLite, writer thread (now)" if "before" in name else ""
            # The worst record() of each 1,024 calls: the inline flush is one call in 1,024.
            worst = [max(held[i : i + 1024]) for i in range(0, len(held), 1024)]
            held_rows.append((name, worst, baseline))
            late_rows.append((name, late, baseline))
            notes.append(
                f"  {name:<38}{rate:>9,.0f} calls/s  longest record() {max(held):6.2f} ms  "
                f"probe woke >5 ms late {sum(x > 5 for x in late)} of {len(late)} times"
            )
        print_table(
            f"longest record() of each 1,024 calls on the event loop, {calls:,} calls (ms)",
            held_rows,
            "ms",
        )
        print_table("how late a 1 ms sleep on the same loop woke (ms)", late_rows, "ms")
        print("\n".join(notes))
        durable: list[tuple[str, Sequence[float], str]] = []
        for concurrency in (1, 8, 64):
            path = Path(tmp) / f"durable-{concurrency}.db"
            times, transactions = asyncio.run(durable_calls(path, 2048, concurrency))
            name = f"durable call, {concurrency} at a time"
            durable.append((name, times, "" if concurrency == 1 else "durable call, 1 at a time"))
            notes.append(
                f"  {name}: {len(times) / transactions:.1f} calls per transaction, "
                f"{len(times) / (sum(times) / 1000 / concurrency):,.0f} calls/s"
            )
        print_table("a call that waits until its events are durable (ms per call)", durable, "ms")
        print("\n".join(notes[len(cases) :]))


# -- the writer's CPU ---------------------------------------------------------------------


class TimedLog(AuditLog):
    """An audit log that adds up the CPU time of its writer threads."""

    def __init__(self, store: AuditStore) -> None:
        super().__init__(store)
        self.cpu_ns = 0
        self._clock = threading.Lock()

    def _run(self) -> None:
        began = time.thread_time_ns()
        try:
            super()._run()
        finally:
            with self._clock:
                self.cpu_ns += time.thread_time_ns() - began


class ThreadedMemoryStore(MemoryAuditStore):
    """A store in memory that the log writes through its writer thread (the floor)."""


def writer_cpu(store: AuditStore, events: list[AuditEvent], size: int) -> tuple[float, float]:
    """Writer CPU µs per stored event, and the mean batch, recording ``events`` in batches
    of ``size``, each flushed before the next is recorded."""
    log = TimedLog(store)
    log._inline = False  # a memory store too goes through the writer thread here
    transactions = 0
    append = store.append

    def counted(batch: Sequence[AuditEvent], programs: Mapping[str, str] | None = None) -> None:
        nonlocal transactions
        transactions += 1
        append(batch, programs)

    store.append = counted  # type: ignore[method-assign]
    for start in range(0, len(events), size):
        for event in events[start : start + size]:
            log.record(event)
        log.flush()
    log.close()
    return log.cpu_ns / 1000 / len(events), len(events) / max(1, transactions)


async def concurrent_cpu(path: Path, calls: int, concurrency: int) -> tuple[float, float, float]:
    """Writer CPU µs per stored event, process CPU µs per call and the mean batch while
    ``concurrency`` callers each make calls that wait until durable."""
    CountingStore.transactions = 0
    log = TimedLog(CountingStore(path))
    registry = make_registry(log)
    authority = RunAuthority(principal=PRINCIPAL, grant=GRANT, run_id="bench")

    async def caller(k: int) -> None:
        for i in range(calls // concurrency):
            ctx = authority.context("direct", f"c{k}:{i}")
            await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctx)
            await log.wait_durable()

    began = time.process_time_ns()
    await asyncio.gather(*(caller(k) for k in range(concurrency)))
    log.close()
    process = (time.process_time_ns() - began) / 1000 / calls
    # One event per call: a read that runs records only its final event.
    return log.cpu_ns / 1000 / calls, process, calls / max(1, CountingStore.transactions)


GROWN = 100_000
"""Events a grown store holds before the writer is measured on it: the effect index is
then larger than a batch, so each read of another record changes another page of it."""


def grown(tmp: Path, r: int, now: float) -> SQLiteAuditStore:
    """A copy (for round ``r``) of a store already holding :data:`GROWN` events."""
    template = tmp / "grown.db"
    if not template.exists():
        fill(template, GROWN, now)
        store = SQLiteAuditStore(template)
        store.read(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
        store.close()
    copy = tmp / f"grown-{r}.db"
    shutil.copyfile(template, copy)
    shutil.copyfile(f"{template}.key", f"{copy}.key")
    return SQLiteAuditStore(copy)


def postgres() -> Any:
    """A throwaway PostgreSQL server (fsync on), started; None when none can be."""
    from tests.postgres import ThrowawayPostgres, postgres_bin

    if postgres_bin() is None:
        return None
    try:
        return ThrowawayPostgres(durable=True).start()
    except Exception as exc:  # no server here: the SQLite rows still stand
        print(f"  PostgreSQL could not start: {exc}")
        return None


def writer(rounds: int) -> None:
    now = time.time()
    rows: list[tuple[str, Sequence[float], str]] = []
    batches: dict[str, list[float]] = {}
    floor = "memory store, batches of 80 (floor)"
    with tempfile.TemporaryDirectory() as tmp:
        cases: list[tuple[str, int, int, Callable[[int], AuditStore]]] = [
            (floor, 80, 4000, lambda r: ThreadedMemoryStore()),
            *(
                (
                    f"SQLite, batches of {size}",
                    size,
                    count,
                    lambda r, size=size: SQLiteAuditStore(Path(tmp) / f"w{size}-{r}.db"),
                )
                for size, count in ((1, 400), (80, 4000), (500, 10000))
            ),
            (
                f"SQLite, batches of 80, {GROWN:,} before",
                80,
                4000,
                lambda r: grown(Path(tmp), r, now),
            ),
        ]
        server = postgres()
        if server is not None:
            from airlock.tools.postgres import PostgresAuditStore
            from tests.postgres import fresh_schema

            cases.append(
                (
                    "PostgreSQL, batches of 80",
                    80,
                    4000,
                    lambda r: PostgresAuditStore(
                        fresh_schema(server.url, f"w{r}"), key_file=Path(tmp) / f"pg-{r}.key"
                    ),
                )
            )
        try:
            for name, size, count, build in cases:
                samples: list[float] = []
                for r in range(rounds):
                    # Numbered after a grown store's events: runs and calls of their own.
                    events = generated(GROWN + r * count, count, GROWN + count * rounds, now)
                    cpu, batch = writer_cpu(build(r), events, size)
                    samples.append(cpu)
                    batches.setdefault(name, []).append(batch)
                rows.append((name, samples, "" if name == floor else floor))
        finally:
            if server is not None:
                server.stop()
        print_table(
            f"writer thread CPU per stored event, {rounds} rounds (µs per event)", rows, "µs"
        )
        if server is None:
            print("  (no PostgreSQL row: no server could be started here)")
        for name, sizes in batches.items():
            print(f"  {name:<38}mean batch {statistics.mean(sizes):7.1f} events")
        writer_us: list[float] = []
        process: list[float] = []
        mean: list[float] = []
        for r in range(rounds):
            cpu, per_call, batch = asyncio.run(
                concurrent_cpu(Path(tmp) / f"concurrent-{r}.db", 2048, 64)
            )
            writer_us.append(cpu)
            process.append(per_call)
            mean.append(batch)
        print_table(
            f"64 durable calls at a time, 2,048 calls, {rounds} rounds (µs)",
            [("writer CPU per stored event", writer_us, ""), ("process CPU per call", process, "")],
            "µs",
        )
        print(f"  mean batch {statistics.mean(mean):.1f} events")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=counts(1), default="100000,1000000")
    parser.add_argument("--runs", type=at_least(1), default=5)
    parser.add_argument("--calls", type=at_least(1024), default=20_000)
    parser.add_argument("--part", choices=("all", "loop", "writer", "scale"), default="all")
    parser.add_argument("--rounds", type=at_least(1), default=5, help="rounds of the writer part")
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f}"
    )
    if args.part in ("all", "loop"):
        loop(args.calls)
    if args.part in ("all", "writer"):
        writer(args.rounds)
    if args.part in ("all", "scale"):
        scale(args.sizes, args.runs)
    print("\ngoals: effects --since 1h and find at 10^6 events <= 1000 ms and <= 200 MiB")


if __name__ == "__main__":
    main()
