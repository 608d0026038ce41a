"""A small world for the write-path tests: a refund tool over a fake system of record, a
ledger (SQLite in the world's directory, or PostgreSQL at a URL) and a clock the tests move.
Several processes can open the same world by its directory and ledger location (the crash and
concurrency tests do)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, write
from airlock.tools import CallContext, Preview, Registry, ToolError, WritePath
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.tools.stores import open_ledger, run_sql

TOOL = "billing_refund_create"
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.write"}))
BOB = Principal(user_id="bob", tenant_id="acme", scopes=frozenset({"billing.write"}))
MALLORY = Principal(user_id="mallory", tenant_id="globex", scopes=frozenset({"billing.write"}))
INVOICES: dict[str, dict[str, Any]] = {
    f"inv_{n}": {
        "tenant_id": "acme",
        "amount_minor": 1000 + n,
        "currency": "USD",
        "customer": f"cus_{n}",
    }
    for n in range(1, 40)
} | {"inv_globex": {"tenant_id": "globex", "amount_minor": 7, "currency": "USD", "customer": "c"}}
GRANT = Grant(
    scopes=frozenset({"billing.write"}),
    effects=(write("billing:refund/*"),),
    spend_limits={"USD": 100_000},
)
ALLOW = ApprovalPolicy((ApprovalRule(id="refunds-auto", action="allow", tools=("billing_*",)),))
ASK = ApprovalPolicy((ApprovalRule(id="refunds-ask", action="ask", tools=("billing_*",)),))
DENY = ApprovalPolicy((ApprovalRule(id="no-refunds", action="deny", tools=("billing_*",)),))


def context(
    *,
    principal: Principal = ALICE,
    approvals: ApprovalPolicy = ALLOW,
    run_id: str = "run_1",
    grant: Grant = GRANT,
) -> CallContext:
    """The context of a direct call in ``run_id``."""
    return CallContext(
        principal=principal, grant=grant, run_id=run_id, caller="direct", approvals=approvals
    )


class Clock:
    """Wall-clock time that a test can move forward."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class World:
    """One harness process: registry, ledger and write path over shared files in ``root``."""

    def __init__(
        self,
        root: Path,
        *,
        clock: Clock | None = None,
        with_lookup: bool = True,
        timeout: float = 5.0,
        latency: float = 0.0,
        ttl: float = 900.0,
        database: str | None = None,
    ) -> None:
        self.root = root
        self.database = database
        self.system = SystemOfRecord(root / "system.db", latency=latency)
        self.ledger = open_ledger(database or str(root))
        self.registry = Registry()
        self.registry.register(
            refund_tool(self.system, INVOICES, with_lookup=with_lookup, timeout=timeout)
        )
        self.clock = clock or Clock()
        self.writes = WritePath(self.registry, self.ledger, clock=self.clock, ttl=ttl)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement (``?`` placeholders) on the ledger's database, as an intruder."""
        return run_sql(self.database or str(self.root / "ledger.db"), statement, params)

    def ctx(
        self,
        *,
        principal: Principal = ALICE,
        approvals: ApprovalPolicy = ALLOW,
        run_id: str = "run_1",
        grant: Grant = GRANT,
    ) -> CallContext:
        return context(principal=principal, approvals=approvals, run_id=run_id, grant=grant)

    async def prepare(
        self,
        invoice: str = "inv_1",
        *,
        approvals: ApprovalPolicy = ALLOW,
        principal: Principal = ALICE,
        run_id: str = "run_1",
    ) -> Preview:
        args = {"invoice_id": invoice, "reason": "duplicate"}
        ctx = self.ctx(principal=principal, approvals=approvals, run_id=run_id)
        return await self.writes.preview_call(TOOL, args, ctx)

    def close(self) -> None:
        self.ledger.close()
        self.system.close()


def run(coro_fn: Any, *args: Any) -> Any:
    """Run an async function to completion (for child processes and sync tests)."""
    return anyio.run(coro_fn, *args)


# -- child processes (spawned: they import this module and rebuild the world by its path) --


def crash_after_send(
    root: str, preview_id: str, fingerprint: str, sent: Any, database: str | None = None
) -> None:
    """Commit, and hang between the system's commit and its reply until killed."""
    world = World(Path(root), database=database)

    def hang(key: str) -> None:
        sent.set()
        time.sleep(120)

    world.system.after_commit = hang
    run(world.writes.commit, preview_id, fingerprint, ALICE)


def commit_many(
    root: str,
    preview_id: str,
    fingerprint: str,
    tasks: int,
    barrier: Any,
    out: Any,
    database: str | None = None,
) -> None:
    """Commit the same preview from ``tasks`` concurrent tasks once every process is ready."""
    world = World(Path(root), latency=0.05, database=database)

    async def one() -> tuple[str, str, bool]:
        try:
            receipt = await world.writes.commit(preview_id, fingerprint, ALICE)
        except ToolError as exc:
            return (exc.code, "", False)
        return ("receipt", str(receipt.data["id"]), receipt.replayed)

    async def all_at_once() -> list[tuple[str, str, bool]]:
        results: list[tuple[str, str, bool]] = []

        async def keep() -> None:
            results.append(await one())

        async with anyio.create_task_group() as group:
            for _ in range(tasks):
                group.start_soon(keep)
        return results

    barrier.wait(timeout=60)
    out.put(run(all_at_once))
