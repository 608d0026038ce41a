"""One harness process of the shared-database test (spawned: it rebuilds everything from the
plain values it is given): the billing tools over the real service, the ledger and the audit
log in one PostgreSQL database, and a burst of commits once every process is ready."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from airlock.policies import Principal
from airlock.tools import AuditLog, Credential, ToolError, WritePath
from airlock.tools.postgres import PostgresAuditStore, PostgresLedgerStore
from examples.billing.tools import build_billing_registry

ALICE = Principal(
    user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read", "billing.write"})
)


@dataclass(frozen=True, slots=True)
class Shared:
    """What every harness process of the test is configured with."""

    url: str
    base_url: str
    tokens: dict[str, str]
    key_file: Path

    def open(self) -> tuple[WritePath, AuditLog]:
        """This process's write path and audit log, on the shared database."""
        credentials = {
            t: Credential.from_value(v, name=f"BILLING_TOKEN_{t.upper()}")
            for t, v in self.tokens.items()
        }
        audit = AuditLog(PostgresAuditStore(self.url, key_file=self.key_file))
        registry = build_billing_registry(self.base_url, credentials, audit=audit, timeout=20.0)
        return WritePath(registry, PostgresLedgerStore(self.url)), audit


Outcome = tuple[str, str, str, bool]
"""(which: ``shared`` or ``distinct``, preview id, ``receipt`` or an error code, replayed)."""


def commit_burst(
    shared: Shared,
    one: tuple[str, str],
    many: list[tuple[str, str]],
    tasks: int,
    barrier: Any,
    out: Any,
) -> None:
    """Commit ``one`` approved preview from ``tasks`` concurrent tasks and every preview of
    ``many`` (in an order of this process's own, 8 at a time), once every process is ready;
    put what each commit answered on ``out``."""
    writes, audit = shared.open()
    order = list(many)
    random.shuffle(order)

    async def burst() -> list[Outcome]:
        results: list[Outcome] = []
        limit = anyio.Semaphore(8)

        async def commit(which: str, preview_id: str, fingerprint: str) -> None:
            try:
                receipt = await writes.commit(preview_id, fingerprint, ALICE)
            except ToolError as exc:
                results.append((which, preview_id, exc.code, False))
            else:
                results.append((which, preview_id, "receipt", receipt.replayed))

        async def limited(preview_id: str, fingerprint: str) -> None:
            async with limit:
                await commit("distinct", preview_id, fingerprint)

        async with anyio.create_task_group() as group:
            for _ in range(tasks):
                group.start_soon(commit, "shared", *one)
            for preview_id, fingerprint in order:
                group.start_soon(limited, preview_id, fingerprint)
        await audit.wait_durable()
        return results

    barrier.wait(timeout=120)
    out.put(anyio.run(burst))
    audit.close()
