"""Writes per second with the ledger on SQLite and on PostgreSQL, from 1 and from 4 processes.

Part of ``bench/writes.py`` (``--databases N``; 0 skips it). Each process runs the write loop
of ``bench/writes.py`` (a direct refund call: admission, prepare, policy approval, preview
stored; then commit: checks, claim, one send to an in-process system of record, receipt
stored) N times, every write a new intent, all processes on one ledger:

* SQLite: one file on this disk, ``synchronous=FULL`` (the default), WAL, ``BEGIN
  IMMEDIATE`` (one writer at a time across processes);
* PostgreSQL: a throwaway server on loopback started for the run (``initdb`` into a temporary
  folder, ``fsync`` on, default ``synchronous_commit``), the ledger's row locks.

Processes start together (a barrier); the rate is all their writes over the time from the
barrier to the last one done. The baseline is SQLite with one process, in the same run.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

SPAWN = multiprocessing.get_context("spawn")


def _ledger(location: str) -> Any:
    if location.startswith("postgresql://"):
        from airlock.tools.postgres import PostgresLedgerStore

        return PostgresLedgerStore(location)
    from airlock.tools import SQLiteLedgerStore

    return SQLiteLedgerStore(location, synchronous="FULL")


def _worker(location: str, worker: int, n: int, barrier: Any, out: Any) -> None:
    import anyio

    from airlock.tools import AuditLog, MemoryAuditStore, Registry, WritePath
    from airlock.tools.testing import SystemOfRecord, refund_tool
    from bench._write_world import ARGS, INVOICES, PRINCIPAL, write_context

    ledger = _ledger(location)
    system = SystemOfRecord(":memory:")
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    registry.register(refund_tool(system, INVOICES))
    writes = WritePath(registry, ledger)

    async def write(i: int) -> float:
        t0 = time.perf_counter()
        preview = await writes.preview_call(
            "billing_refund_create", ARGS, write_context(worker * 1_000_000 + i)
        )
        await writes.commit(preview.id, preview.fingerprint, PRINCIPAL)
        return (time.perf_counter() - t0) * 1000

    async def loop() -> list[float]:
        for i in range(max(5, n // 20)):  # warm: connections, caches, compiled statements
            await write(n + i)
        barrier.wait(timeout=120)
        return [await write(i) for i in range(n)]

    samples = anyio.run(loop)
    done = time.time()
    if system.effects() != len(samples) + max(5, n // 20):
        raise AssertionError("every write must have exactly one effect")
    ledger.close()
    out.put((samples, done))


def _run(location: str, processes: int, n: int) -> tuple[list[float], float]:
    """Per-write milliseconds of every process, and writes per second overall."""
    barrier = SPAWN.Barrier(processes + 1)
    out = SPAWN.Queue()
    children = [
        SPAWN.Process(target=_worker, args=(location, w, n, barrier, out)) for w in range(processes)
    ]
    for child in children:
        child.start()
    barrier.wait(timeout=120)
    began = time.time()
    results = [out.get(timeout=600) for _ in children]
    for child in children:
        child.join(timeout=60)
        if child.exitcode != 0:
            raise AssertionError(f"a writer process failed ({child.exitcode})")
    samples = [s for own, _ in results for s in own]
    last = max(done for _, done in results)
    return samples, len(samples) / (last - began)


def databases_main(n: int) -> None:
    """Print the table (see the module's docstring) for ``n`` writes per process."""
    from bench._table import print_table
    from tests.postgres import ThrowawayPostgres, fresh_schema

    server = ThrowawayPostgres(durable=True).start()
    rows: list[tuple[str, list[float], str]] = []
    rates: list[tuple[str, float]] = []
    base = "sqlite FULL, 1 process"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for processes in (1, 4):
                for name in ("sqlite FULL", "postgresql"):
                    location = (
                        str(Path(tmp) / f"ledger-{processes}.db")
                        if name.startswith("sqlite")
                        else fresh_schema(server.url, f"bench{processes}")
                    )
                    label = f"{name}, {processes} process{'es' if processes > 1 else ''}"
                    samples, per_s = _run(location, processes, n)
                    rows.append((label, samples, "" if label == base else base))
                    rates.append((label, per_s))
    finally:
        server.stop()
    print_table(
        f"one write (prepare + approve(policy) + commit), ledger by database, {n} writes "
        "per process",
        rows,
        "ms",
    )
    print("\nthroughput, all processes together")
    baseline = dict(rates)[base]
    for label, per_s in rates:
        print(f"{label:<38}{per_s:>10,.0f} writes/s  {per_s / baseline:.2f}x {base}")
