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

``--batch N`` (default 100; 0 skips it) adds batch commits against the real billing service
(``examples/billing``, on loopback) and a Docker sandbox: one program proposes N refunds
(``tools.propose.billing_refund_create.batch``), the host prepares each from the invoice
record, a person approves the batch once (``WritePath.approve_batch``), and the session
commits it (``Session.resume(batch_id)``). The baseline, in the same run and against the same
service, is N direct writes one by one (prepare, approve, commit). Every round checks the
service: exactly one refund per item, no duplicate. ``--rounds R`` repeats it (fresh
invoices each round).

``--databases N`` (default 300; 0 skips it) runs N writes per process with the ledger on
SQLite and on a throwaway PostgreSQL server, from 1 and from 4 processes sharing it, side by
side (``bench/_database_writes.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.policies import Principal
from airlock.tools import (
    AuditLog,
    Credential,
    MemoryAuditStore,
    Registry,
    SQLiteLedgerStore,
    WritePath,
)
from airlock.tools.testing import SystemOfRecord, refund_tool
from bench._args import at_least
from bench._table import print_table
from bench._write_world import ARGS, INVOICES, PRINCIPAL, write_context

Sync = Literal["FULL", "NORMAL", "OFF"]


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
        preview = await writes.preview_call("billing_refund_create", ARGS, write_context(i))
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


_PROPOSE = """
import datetime
began = datetime.datetime.now()
handles = tools.propose.billing_refund_create.batch(
    [{"invoice_id": i, "reason": "requested_by_customer"} for i in INVOICES]
)
{"proposed": len(handles), "seconds": (datetime.datetime.now() - began).total_seconds()}
"""


async def batch_main(n: int, rounds: int) -> None:
    """Batch commits against the real billing service (see the module's docstring)."""
    from airlock.harness import Budget, Harness
    from airlock.inventory import load_policy_document
    from airlock.sandbox import DockerBackend, SandboxError
    from examples.billing import DEMO_POLICY, build_billing_registry, serve_billing
    from examples.billing.story import DEMO_USER

    image = os.environ.get("AIRLOCK_IMAGE", "airlock-sandbox:latest")
    rates: dict[str, list[float]] = {"direct": [], "propose": [], "commit": []}
    with serve_billing(invoices_per_tenant=3 * n * rounds) as billing:
        credentials = {
            t: Credential.from_value(tok, name=f"BILLING_TOKEN_{t.upper()}")
            for t, tok in billing.tokens.items()
        }
        registry = build_billing_registry(billing.base_url, credentials)
        subject = load_policy_document(DEMO_POLICY).principal(DEMO_USER)
        tenant = subject.principal.tenant_id
        paid = [
            i["id"]
            for i in billing.store.invoices(tenant, after=None, limit=100_000, status=None)
            if i["payments"] and not i["refunds"]
        ]
        if len(paid) < 2 * n * rounds:
            raise AssertionError(f"only {len(paid)} paid invoices for {2 * n * rounds} refunds")
        with tempfile.TemporaryDirectory() as tmp:
            ledger = SQLiteLedgerStore(Path(tmp) / "ledger.db")
            try:
                async with DockerBackend(image=image, pool_size=1) as backend:
                    harness = Harness(
                        registry,
                        load_policy_document(DEMO_POLICY).policy,
                        backend,
                        ledger,
                        budget=Budget(calls=1000, result_bytes=200_000, bytes=5_000_000),
                    )
                    for r in range(rounds):
                        mine = paid[2 * n * r : 2 * n * (r + 1)]
                        direct, batch = mine[:n], mine[n:]
                        rates["direct"].append(
                            await _direct_writes(harness, subject.principal, direct)
                        )
                        propose_s, commit_s = await _batch_round(harness, subject.principal, batch)
                        rates["propose"].append(n / propose_s)
                        rates["commit"].append(n / commit_s)
                        held = billing.store.refunds(tenant)
                        per_invoice = {x["invoice_id"] for x in held}
                        if len(held) != 2 * n * (r + 1) or len(per_invoice) != len(held):
                            raise AssertionError(f"{len(held)} refunds: duplicates or missing")
            except SandboxError as exc:
                print(f"\nbatch commits skipped: the sandbox is unavailable ({exc})")
                return
            finally:
                ledger.close()
        total = billing.store.count("refunds")
    print(f"\nbatch of {n} proposals from one program, approved once ({rounds} rounds)")
    print(f"{'case':<44}{'median/s':>12}{'min/s':>10}{'max/s':>10}")
    for name, label in (
        ("direct", "direct writes one by one (baseline)"),
        ("propose", "previews proposed from one program"),
        ("commit", "batch items committed"),
    ):
        values = rates[name]
        print(
            f"{label:<44}{statistics.median(values):>12,.1f}{min(values):>10,.1f}"
            f"{max(values):>10,.1f}"
        )
    ratio = statistics.median(rates["commit"]) / statistics.median(rates["direct"])
    print(f"batch commits vs direct writes: {ratio:.2f}x")
    print(f"refunds held by the service: {total} ({2 * n * rounds} expected), duplicates: 0")


async def _direct_writes(harness: Any, principal: Principal, invoices: list[str]) -> float:
    """Writes per second, one by one, as the model makes them: a direct call (its preview),
    a person's approval, the session's commit."""
    session = harness.session(principal)
    began = time.perf_counter()
    for invoice in invoices:
        paused = await session.call(
            "billing_refund_create", {"invoice_id": invoice, "reason": "requested_by_customer"}
        )
        body = json.loads(paused.content)
        harness.writes.approve(
            body["preview_id"], approver="bench", fingerprint=body["fingerprint"]
        )
        done = await session.resume(body["preview_id"])
        if done.is_error:
            raise AssertionError(f"a direct write failed: {done.content[:300]}")
    return len(invoices) / (time.perf_counter() - began)


async def _batch_round(
    harness: Any, principal: Principal, invoices: list[str]
) -> tuple[float, float]:
    """Seconds to propose the batch (inside the program) and to approve and commit it."""
    session = harness.session(principal)
    code = f"INVOICES = {invoices!r}\n" + _PROPOSE
    result = await session.execute_code(code)
    body = json.loads(result.content)
    if result.is_error or body["value"]["proposed"] != len(invoices):
        raise AssertionError(f"the program did not propose the batch: {result.content[:500]}")
    batch = body["proposals"]
    began = time.perf_counter()
    harness.writes.approve_batch(
        batch["batch_id"], approver="bench", fingerprint=batch["fingerprint"]
    )
    done = await session.resume(batch["batch_id"])
    commit_s = time.perf_counter() - began
    if json.loads(done.content)["counts"] != {"committed": len(invoices)}:
        raise AssertionError(f"the batch did not commit: {done.content[:500]}")
    return float(body["value"]["seconds"]), commit_s


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
    parser.add_argument("--writes", type=at_least(0), default=1000)
    parser.add_argument(
        "--batch", type=at_least(0), default=100, help="proposals per batch; 0: skip"
    )
    parser.add_argument("--rounds", type=at_least(1), default=5)
    parser.add_argument(
        "--databases",
        type=at_least(0),
        default=300,
        help="writes per process, SQLite vs PostgreSQL",
    )
    arguments = parser.parse_args()
    if arguments.writes:
        anyio.run(main, arguments.writes)
    if arguments.batch:
        anyio.run(batch_main, arguments.batch, arguments.rounds)
    if arguments.databases:
        from bench._database_writes import databases_main  # (bench/_database_writes.py)

        databases_main(arguments.databases)
