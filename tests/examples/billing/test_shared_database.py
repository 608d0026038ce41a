"""Four harness processes share one PostgreSQL database against the real billing service: 64
concurrent commits of one approved refund and 200 distinct refunds, each tried by every
process; one process is killed (SIGKILL) while a refund it sent is held in the service; a
reconcile from another harness leaves exactly one refund per invoice, one receipt each,
nothing undecided, and one audit chain that verifies."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import Counter
from pathlib import Path

import anyio

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, read, write
from airlock.tools import CallContext, Preview
from examples.billing.server import serve_billing
from tests.postgres import fresh_schema

from .shared_harness import ALICE, Shared, commit_burst

SPAWN = multiprocessing.get_context("spawn")
PROCESSES = 4
SHARED_TASKS = 16  # per process: 64 concurrent commits of the same preview
DISTINCT = 200
HOLD_S = 3.0  # how long the service holds the refund the victim sent

GRANT = Grant(
    scopes=frozenset({"billing.read", "billing.write"}),
    effects=(read("billing:invoice/*"), write("billing:refund/*")),
    spend_limits={"USD": 100_000_000},
)
ASK = ApprovalPolicy((ApprovalRule(id="refunds-ask", action="ask", tools=("billing_refund_*",)),))


def _wait_for(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_four_processes_one_database_one_refund_per_invoice_after_a_kill(
    postgres_url: str, tmp_path: Path
) -> None:
    url = fresh_schema(postgres_url, "shared")
    with serve_billing(invoices_per_tenant=320) as billing:
        shared = Shared(url, billing.base_url, dict(billing.tokens), tmp_path / "audit.key")
        writes, audit = shared.open()
        paid = [
            i["id"]
            for i in billing.store.invoices("acme", after=None, limit=1000, status="paid")
            if not i["refunds"]
        ][: DISTINCT + 1]
        assert len(paid) == DISTINCT + 1, "the seed holds too few paid invoices"
        refunds_before = billing.store.count("refunds")

        async def prepare_all() -> list[Preview]:
            made = []
            for n, invoice in enumerate(paid):
                ctx = CallContext(
                    principal=ALICE, grant=GRANT, run_id=f"run_{n}", caller="direct", approvals=ASK
                )
                preview = await writes.preview_call(
                    "billing_refund_create",
                    {"invoice_id": invoice, "reason": "requested_by_customer"},
                    ctx,
                )
                writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
                made.append(preview)
            return made

        previews = anyio.run(prepare_all)
        one = (previews[0].id, previews[0].fingerprint)
        many = [(p.id, p.fingerprint) for p in previews[1:]]

        # The first refund to reach the service is held there, its key in flight.
        billing.faults.delay(HOLD_S, phase="commit", path="/v1/refunds", method="POST")
        barrier = SPAWN.Barrier(PROCESSES)
        out = SPAWN.Queue()
        children = [
            SPAWN.Process(target=commit_burst, args=(shared, one, many, SHARED_TASKS, barrier, out))
            for _ in range(PROCESSES)
        ]
        for child in children:
            child.start()
        try:
            _wait_for("the held refund", lambda: billing.faults.fired["delay"] >= 1, 120)
            held_at = time.monotonic()
            pids = {child.pid: child for child in children}

            # The held key is the one still in flight half a second later: the others are
            # answered in milliseconds, and the held one waits HOLD_S with its key claimed.
            def in_flight() -> set[str]:
                with billing.store.transaction() as db:
                    rows = db.execute("SELECT key FROM idempotency_keys WHERE state = 'in_flight'")
                    return {row["key"] for row in rows}

            held_keys: set[str] = set()

            def the_held_key_is_known() -> bool:
                before = in_flight()
                time.sleep(0.5)
                held_keys.clear()
                held_keys.update(before & in_flight())
                return len(held_keys) == 1

            _wait_for("the held refund's key", the_held_key_is_known, HOLD_S - 1)
            (held,) = [
                p
                for p in writes.ledger.previews(states={"sending"}, limit=1000)
                if p.key in held_keys
            ]
            assert held.owner is not None
            victim = pids[int(held.owner.rpartition(":")[2])]
            os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
            victim.join(timeout=30)
            assert victim.exitcode == -signal.SIGKILL
            survivors = [c for c in children if c is not victim]
            results = [item for _ in survivors for item in out.get(timeout=240)]
            for child in survivors:
                child.join(timeout=30)
                assert child.exitcode == 0
        finally:
            for child in children:
                if child.is_alive():
                    child.kill()

        # The held refund commits in the service meanwhile; then reconcile from this process.
        time.sleep(max(0.0, held_at + HOLD_S + 0.5 - time.monotonic()))
        stuck = writes.ledger.previews(states={"sending", "unknown"}, limit=1000)
        assert held.id in {p.id for p in stuck}
        resolutions = anyio.run(writes.reconcile)
        assert {r.preview_id for r in resolutions} == {p.id for p in stuck}
        assert {r.outcome for r in resolutions} == {"committed"}, resolutions

        # Exactly one refund per invoice, one receipt each, nothing undecided.
        assert billing.store.count("refunds") - refunds_before == DISTINCT + 1
        for invoice in paid:
            assert len(billing.store.refunds("acme", invoice_id=invoice)) == 1, invoice
        ledger = writes.ledger
        assert Counter(p.state for p in ledger.previews(limit=1000)) == {"committed": DISTINCT + 1}
        receipts = ledger.receipts(limit=1000)
        assert sorted(r.key for r in receipts) == sorted(p.key for p in previews)

        # What the survivors saw: each preview sent once at most, the rest replayed or refused.
        assert len(results) == (PROCESSES - 1) * (SHARED_TASKS + DISTINCT)
        assert {code for _, _, code, _ in results} <= {"receipt", "conflict"}
        fresh = Counter(
            pid for _, pid, code, replayed in results if code == "receipt" and not replayed
        )
        assert max(fresh.values()) == 1
        assert fresh[previews[0].id] <= 1

        report = audit.store.verify()  # type: ignore[attr-defined]
        assert report.ok, report
        audit.close()
        ledger.close()
