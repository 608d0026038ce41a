"""Admission overhead per call against calling the handler directly.

Run: ``.venv/bin/python bench/admission.py [--calls N]``. Three ways of making the same call:

* ``handler``: ``await handler(ctx, invoice_id=...)``, no admission at all;
* ``admission, memory audit``: ``Registry.call`` with the audit log kept in memory (validation,
  authorization, deadline, shaping and building the audit event; no disk write);
* ``admission, SQLite audit``: the same with the SQLite store (WAL, ``synchronous=FULL``),
  written in batches, with the final ``flush()`` counted in the throughput.

Goals (issue 3): <= 20 us median overhead without the audit write; >= 30,000 admitted calls/s
on one core with durable, batched audit writes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, read
from airlock.tools import AuditLog, CallContext, MemoryAuditStore, Registry, SQLiteAuditStore

InvoiceId = Annotated[str, Field(pattern=r"^inv_[a-z0-9]{1,32}$", max_length=36)]
RECORD = {"invoice_id": "inv_1", "tenant_id": "acme", "amount_minor": 1200, "note": "internal"}


class Invoice(BaseModel):
    invoice_id: str
    amount_minor: int


async def billing_invoice_get(ctx: CallContext, invoice_id: InvoiceId) -> dict[str, object]:
    """Fetch one invoice by id. Use it to check an amount. It does not return notes."""
    ctx.ensure_tenant("acme")
    return RECORD


def make_registry(audit: AuditLog) -> Registry:
    registry = Registry(audit=audit)
    registry.tool(
        effects=[read("billing:invoice/{invoice_id}")],
        scope="billing.read",
        callers={"direct", "code"},
        output=Invoice,
    )(billing_invoice_get)
    return registry


PRINCIPAL = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read"}))
GRANT = Grant(scopes=frozenset({"billing.read"}), effects=(read("billing:invoice/*"),))


def context(i: int) -> CallContext:
    return CallContext(
        principal=PRINCIPAL,
        grant=GRANT,
        run_id="bench",
        call_id=f"c{i}",
        caller="code",
        deadline=time.monotonic() + 3600,
    )


async def measure(
    call: Callable[[int], Awaitable[object]], n: int, finish: Callable[[], None]
) -> tuple[list[float], float]:
    for i in range(min(n // 10, 2000)):  # warm up
        await call(i)
    finish()
    samples = []
    started = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter_ns()
        await call(i)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    finish()
    return samples, time.perf_counter() - started


async def main(n: int) -> None:
    rows = []
    ctxs = [context(i) for i in range(n)]

    async def direct(i: int) -> object:
        return await billing_invoice_get(ctxs[i], invoice_id="inv_1")

    rows.append(("handler (no admission)", *await measure(direct, n, lambda: None)))

    memory = make_registry(AuditLog(MemoryAuditStore()))

    async def admitted_memory(i: int) -> object:
        return await memory.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctxs[i])

    rows.append(("admission, memory audit", *await measure(admitted_memory, n, lambda: None)))

    with tempfile.TemporaryDirectory() as tmp:
        log = AuditLog(SQLiteAuditStore(Path(tmp) / "audit.db"), batch_size=1024)
        durable = make_registry(log)

        async def admitted_sqlite(i: int) -> object:
            return await durable.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctxs[i])

        rows.append(("admission, SQLite audit", *await measure(admitted_sqlite, n, log.flush)))
        stored = len(log.events(run_id="bench"))
        log.close()

    base = statistics.median(rows[0][1])
    print(f"{n} calls per row; audit rows stored: {stored}")
    header = f"{'path':<26}{'median us':>11}{'p99 us':>10}{'overhead us':>13}{'ratio':>8}"
    print(header + f"{'calls/s':>11}")
    print("-" * (len(header) + 11))
    for name, samples, total in rows:
        median = statistics.median(samples)
        p99 = statistics.quantiles(samples, n=100)[98]
        print(
            f"{name:<26}{median:>11.2f}{p99:>10.2f}{median - base:>13.2f}"
            f"{median / base:>8.1f}{n / total:>11,.0f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50_000)
    anyio.run(main, parser.parse_args().calls)
