"""The write path's cost: prepare + approve (by policy) + commit, and the price of durability.

Run: ``.venv/bin/python bench/writes.py [--writes N]``. Each write is a direct call of a
refund tool through the registry (admission, ``prepare``, grant and approval rule, preview
stored and approved by an ``allow`` rule), then ``WritePath.commit`` (the checks, the claim,
one send to an in-process system of record that honours Idempotency-Key, the receipt stored
with the step marked committed). Every write is a new intent (its own run id), so each one
really sends. The same loop runs with the ledger:

* in memory (SQLite ``:memory:``): the write path's own cost, no disk;
* on disk, ``synchronous=NORMAL``: survives a crash of the process, not of the machine;
* on disk, ``synchronous=FULL`` (the default): every step synced before it returns.

The system of record stays in memory throughout, so the rows differ only in the ledger.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import anyio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, write
from airlock.tools import (
    AuditLog,
    CallContext,
    MemoryAuditStore,
    Registry,
    SQLiteLedgerStore,
    WritePath,
)
from airlock.tools.testing import SystemOfRecord, refund_tool
from bench._table import print_table

PRINCIPAL = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.write"}))
GRANT = Grant(
    scopes=frozenset({"billing.write"}),
    effects=(write("billing:refund/*"),),
    spend_limits={"USD": 1_000_000},
)
POLICY = ApprovalPolicy((ApprovalRule(id="refunds-auto", action="allow"),))
INVOICES = {
    "inv_1": {"tenant_id": "acme", "amount_minor": 1200, "currency": "USD", "customer": "c"}
}
ARGS = {"invoice_id": "inv_1", "reason": "duplicate"}
Sync = Literal["FULL", "NORMAL", "OFF"]


def _context(i: int) -> CallContext:
    return CallContext(
        principal=PRINCIPAL, grant=GRANT, run_id=f"bench_{i}", caller="direct", approvals=POLICY
    )


async def _measure(ledger: SQLiteLedgerStore, n: int) -> tuple[list[float], list[float], float]:
    """Per write: (prepare+approve ms, commit ms); and the writes per second overall."""
    system = SystemOfRecord(":memory:")
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    registry.register(refund_tool(system, INVOICES))
    writes = WritePath(registry, ledger)
    warm = max(10, n // 10)
    prepare_ms: list[float] = []
    commit_ms: list[float] = []
    started = 0.0
    for i in range(warm + n):
        if i == warm:
            started = time.perf_counter()
        t0 = time.perf_counter()
        preview = await writes.preview_call("billing_refund_create", ARGS, _context(i))
        t1 = time.perf_counter()
        await writes.commit(preview.id, preview.fingerprint, PRINCIPAL)
        t2 = time.perf_counter()
        if i >= warm:
            prepare_ms.append((t1 - t0) * 1000)
            commit_ms.append((t2 - t1) * 1000)
    elapsed = time.perf_counter() - started
    if system.effects() != warm + n or len(ledger.receipts(limit=10 * n)) != warm + n:
        raise AssertionError("every write must have exactly one effect and one receipt")
    system.close()
    return prepare_ms, commit_ms, n / elapsed


async def main(n: int) -> None:
    cases: list[tuple[str, Callable[[Path], SQLiteLedgerStore]]] = [
        ("memory", lambda _: SQLiteLedgerStore(":memory:")),
        ("disk NORMAL", lambda d: SQLiteLedgerStore(d / "n.db", synchronous="NORMAL")),
        ("disk FULL", lambda d: SQLiteLedgerStore(d / "f.db", synchronous="FULL")),
    ]
    rows: list[tuple[str, list[float], str]] = []
    throughput: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, open_ledger in cases:
            ledger = open_ledger(Path(tmp))
            prepare_ms, commit_ms, per_s = await _measure(ledger, n)
            ledger.close()
            total = [p + c for p, c in zip(prepare_ms, commit_ms, strict=True)]
            base = "" if name == cases[0][0] else cases[0][0]
            rows.append((name, total, base))
            rows.append((f"  prepare+approve, {name}", prepare_ms, ""))
            rows.append((f"  commit, {name}", commit_ms, ""))
            throughput.append((name, per_s))
    title = f"one write (prepare + approve(policy) + commit) by ledger, {n} writes per case"
    print_table(title, rows, "ms")
    print("\nthroughput (one writer, sequential)")
    for name, per_s in throughput:
        print(f"ledger {name:<27}{per_s:>10,.0f} writes/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=1000)
    anyio.run(main, parser.parse_args().writes)
