"""Admission overhead per call against calling the handler directly.

Run: ``.venv/bin/python bench/admission.py [--calls N]``. Four ways of making the same call:

* ``handler``: ``await handler(ctx, invoice_id=...)``, no admission at all;
* ``admission, checks off``: ``Registry.call`` with the audit log in memory, but without the
  runtime checks of declarations: the per-call check is a shared one that never refuses, and
  neither the context variable nor the audit hook is set (patched out for this row only:
  there is no switch to turn the checks off);
* ``admission, memory audit``: ``Registry.call`` with the audit log kept in memory (validation,
  authorization, the runtime checks, deadline, shaping and building the audit event; no disk
  write);
* ``admission, SQLite audit``: the same with the SQLite store (WAL, ``synchronous=FULL``),
  written in batches, with the final ``flush()`` counted in the throughput.

The call makes no connection, so what the checks cost is their per-call part (a check made,
set as the current call, cleared, looked at); the two admission rows with and without it run
in alternating blocks, and a second table times that part alone (``per-call check``). It
also gives what the audit hook costs every audit event in the process while no call is
current: ``sys.audit`` of an event the hook ignores and of one it watches, before and after
the hook is installed; the run ends by counting the audit events one admitted call raises.

Instruction counts do not depend on what else the machine runs: ``--loop N`` makes only N
admitted calls (memory audit, runtime checks on, after 200 to warm up) and prints nothing, so
``valgrind --tool=callgrind`` of ``--loop N`` and of ``--loop 0`` gives the instructions of
one call as the difference over N (with ``PYTHONHASHSEED=0``; run it once before, so that
both find the bytecode caches written).

Goals: <= 20 us median admission overhead a call, ``admission, checks off`` and ``admission,
memory audit`` (issue 17; issue 3 set the same bound without the runtime checks); >= 30,000
admitted calls/s on one core with durable, batched audit writes (issue 3); <= 5 us median for
the runtime checks on a call that makes no connection (issue 15).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import anyio
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, read
from airlock.tools import (
    AuditLog,
    CallContext,
    MemoryAuditStore,
    Registry,
    SQLiteAuditStore,
    _egress_hook,
)
from airlock.tools import _execute as execute_module
from airlock.tools._egress import CallCheck
from bench._args import at_least
from bench._table import print_table

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


async def measure_pair(
    off: Callable[[int], Awaitable[object]],
    on: Callable[[int], Awaitable[object]],
    n: int,
    block: int = 500,
) -> tuple[tuple[list[float], float], tuple[list[float], float]]:
    """``off`` (with the runtime checks patched out) and ``on``, in alternating blocks of
    ``block`` calls, so that drift on a shared machine falls on both alike."""
    samples: tuple[list[float], list[float]] = ([], [])
    totals = [0.0, 0.0]
    for start in range(0, n, block):
        for which, call in enumerate((off, on)):
            with runtime_checks_off() if which == 0 else nullcontext():
                if start == 0:
                    for i in range(min(n // 10, 2000)):  # warm up
                        await call(i)
                began = time.perf_counter()
                for i in range(start, min(start + block, n)):
                    t0 = time.perf_counter_ns()
                    await call(i)
                    samples[which].append((time.perf_counter_ns() - t0) / 1000)
                totals[which] += time.perf_counter() - began
    return (samples[0], totals[0]), (samples[1], totals[1])


def audit_events_per_call(call: Callable[[], Awaitable[object]]) -> float:
    """How many audit events one call raises (each costs the hook's check; see the table)."""
    seen = [0]

    def count(event: str, args: tuple[object, ...]) -> None:
        seen[0] += 1

    sys.addaudithook(count)  # last thing the run does: this hook stays

    async def hundred() -> None:
        for _ in range(100):
            await call()

    before = seen[0]
    anyio.run(hundred)
    return (seen[0] - before) / 100


@contextmanager
def runtime_checks_off() -> Iterator[None]:
    """The runtime checks patched out: one shared check per tool that never refuses (its
    slots are still set for the call), no context variable set (the hook, once installed,
    stays: it costs a call only per audit event the call raises, counted by
    :func:`audit_events_per_call`)."""
    saved: dict[str, Any] = {
        "new": execute_module._new_object,
        "current": execute_module.CURRENT,
    }
    shared: list[CallCheck] = []

    def new(cls: type) -> object:
        if not shared:
            shared.append(saved["new"](cls))
        return shared[0]

    execute_module._new_object = new  # type: ignore[assignment]
    # set() and reset() that do nothing, in C as ContextVar's are (bool() of the check).
    execute_module.CURRENT = types.SimpleNamespace(set=bool, reset=bool)  # type: ignore[assignment]
    try:
        yield
    finally:
        execute_module._new_object = saved["new"]
        execute_module.CURRENT = saved["current"]


def audit_event_cost(n: int) -> list[tuple[str, list[float], str]]:
    """What one audit event costs with no call current, before and after the hook exists."""

    def per_event(event: str, args: tuple[object, ...]) -> list[float]:
        samples = []
        for _ in range(200):
            t0 = time.perf_counter_ns()
            for _ in range(n // 200):
                sys.audit(event, *args)
            samples.append((time.perf_counter_ns() - t0) / (n // 200) / 1000)
        return samples

    lookup = ("api.example.com", 443, 0, 0, 0)
    before = [
        ("ignored event, no hook", per_event("airlock.bench.probe", ()), ""),
        ("watched event, no hook", per_event("socket.getaddrinfo", lookup), ""),
    ]
    _egress_hook.install()
    return [
        *before,
        ("ignored event, hook", per_event("airlock.bench.probe", ()), "ignored event, no hook"),
        ("watched event, hook", per_event("socket.getaddrinfo", lookup), "watched event, no hook"),
    ]


def check_cost(registry: Registry, n: int) -> list[float]:
    """The per-call part of the runtime checks alone: a check made for the call, set as the
    current call, cleared, and looked at for violations (what ``Registry._execute`` adds)."""
    from airlock.tools._egress import enter, leave

    reach = registry._tools["billing_invoice_get"].reach
    values = {"invoice_id": "inv_1"}
    samples = []
    for _ in range(200):
        t0 = time.perf_counter_ns()
        for _ in range(n // 200):
            check = reach.check(phase="handler", tenant="acme", values=values)
            leave(enter(check), check)
            check.denial(None)
        samples.append((time.perf_counter_ns() - t0) / (n // 200) / 1000)
    return samples


async def main(n: int) -> tuple[Registry, CallContext]:
    rows = []
    ctxs = [context(i) for i in range(n)]

    async def direct(i: int) -> object:
        return await billing_invoice_get(ctxs[i], invoice_id="inv_1")

    rows.append(("handler (no admission)", *await measure(direct, n, lambda: None)))

    events = audit_event_cost(n)
    unchecked = make_registry(AuditLog(MemoryAuditStore()))
    memory = make_registry(AuditLog(MemoryAuditStore()))

    async def admitted_unchecked(i: int) -> object:
        return await unchecked.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctxs[i])

    async def admitted_memory(i: int) -> object:
        return await memory.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctxs[i])

    events.append(("per-call check, no connection", check_cost(memory, n), ""))
    off, on = await measure_pair(admitted_unchecked, admitted_memory, n)
    rows.append(("admission, checks off", *off))
    rows.append(("admission, memory audit", *on))

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
    checks = statistics.median(rows[2][1]) - statistics.median(rows[1][1])
    print(f"runtime checks of declarations: {checks:+.2f} us a call at the median (goal <= 5 us)")
    title = f"one audit event with no call current, and the per-call check, {n} each (us)"
    print_table(title, events, "us")
    return memory, ctxs[0]


async def loop(n: int) -> None:
    """``n`` admitted calls and nothing else, for instruction counts (see the docstring)."""
    registry = make_registry(AuditLog(MemoryAuditStore()))
    ctxs = [context(i) for i in range(200)]  # as many whatever n is, so the difference is calls
    for i in range(200 + n):
        await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctxs[i % 200])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=at_least(200), default=50_000)
    parser.add_argument("--loop", type=at_least(1), default=None, metavar="N")
    options = parser.parse_args()
    if options.loop is not None:
        anyio.run(loop, options.loop)
        sys.exit(0)
    registry, ctx = anyio.run(main, options.calls)
    per_call = audit_events_per_call(
        lambda: registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctx)
    )
    print(
        "audit events per admitted call (100 calls, the event loop's start and stop "
        f"included): {per_call:g}"
    )
