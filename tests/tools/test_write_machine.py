"""A state machine over prepare / approve / deny / commit / faults / crash / restart /
reconcile. Invariants: no effect without an approval, no key with two effects, ``committed``
exactly when the step's receipt is stored, and after reconciliation every effect has exactly
one receipt and no step is left undecided."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from airlock.policies import ApprovalPolicy
from airlock.tools import Registry, SQLiteLedgerStore, ToolError, WritePath
from airlock.tools.testing import SystemOfRecord, refund_tool

from .test_write_world import ALICE, ALLOW, ASK, INVOICES, TOOL, Clock, context

INVOICE_IDS = sorted(INVOICES)[:4]
TTL = 600.0
TIMEOUT = 5.0
LEASE = TIMEOUT + 30.0


class Crash(BaseException):
    """The process dies: nothing after this reaches the ledger."""


class CrashableLedger:
    """A ledger whose writes stop when the process 'dies' (as if killed after the send)."""

    def __init__(self, store: SQLiteLedgerStore) -> None:
        self.store = store
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def add_preview(self, preview: Any) -> Any:
        if self.dead:
            raise Crash
        return self.store.add_preview(preview)

    def transition(self, preview_id: str, **kwargs: Any) -> Any:
        if self.dead:
            raise RuntimeError("the process is gone")
        return self.store.transition(preview_id, **kwargs)


class WritePathMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="airlock-machine-"))
        self.clock = Clock(start=1_000_000.0)
        self.system = SystemOfRecord(self.root / "system.db")
        self.ids: list[str] = []
        self.fingerprints: dict[str, str] = {}
        self.run = 0
        self._start()

    def _start(self) -> None:
        """Start (or restart) the harness process over the same files."""
        self.ledger = CrashableLedger(SQLiteLedgerStore(self.root / "ledger.db", synchronous="OFF"))
        registry = Registry()
        registry.register(refund_tool(self.system, INVOICES, timeout=TIMEOUT))
        self.writes = WritePath(registry, self.ledger, clock=self.clock, ttl=TTL)  # type: ignore[arg-type]
        self.registry = registry

    def _commit(self, index: int) -> None:
        preview_id = self.ids[index % len(self.ids)]
        with contextlib.suppress(ToolError):
            anyio.run(self.writes.commit, preview_id, self.fingerprints[preview_id], ALICE)

    # -- rules ----------------------------------------------------------------------------

    @rule(invoice=st.sampled_from(INVOICE_IDS), ask=st.booleans(), new_run=st.booleans())
    def prepare(self, invoice: str, ask: bool, new_run: bool) -> None:
        if new_run:
            self.run += 1
        approvals: ApprovalPolicy = ASK if ask else ALLOW
        ctx = context(approvals=approvals, run_id=f"run_{self.run}")
        args = {"invoice_id": invoice, "reason": "duplicate"}
        try:
            preview = anyio.run(self.writes.preview_call, TOOL, args, ctx)
        except ToolError:
            return
        if preview.id not in self.fingerprints:
            self.ids.append(preview.id)
            self.fingerprints[preview.id] = preview.fingerprint

    @precondition(lambda self: self.ids)
    @rule(index=st.integers(0, 50))
    def approve(self, index: int) -> None:
        with contextlib.suppress(ToolError):
            self.writes.approve(self.ids[index % len(self.ids)], approver="bob")

    @precondition(lambda self: self.ids)
    @rule(index=st.integers(0, 50))
    def deny(self, index: int) -> None:
        with contextlib.suppress(ToolError):
            self.writes.deny(self.ids[index % len(self.ids)], approver="bob", reason="no")

    @precondition(lambda self: self.ids)
    @rule(index=st.integers(0, 50))
    def commit(self, index: int) -> None:
        self._commit(index)

    @precondition(lambda self: self.ids)
    @rule(index=st.integers(0, 50), fault=st.sampled_from(["lose_reply", "fail_before"]))
    def commit_with_fault(self, index: int, fault: Any) -> None:
        self.system.inject(fault)
        self._commit(index)
        self.system.clear_faults()

    @precondition(lambda self: self.ids)
    @rule(index=st.integers(0, 50))
    def crash_after_send_then_restart(self, index: int) -> None:
        def die(key: str) -> None:
            self.ledger.dead = True
            raise Crash

        self.system.after_commit = die
        try:
            self._commit(index)
        except Crash:
            pass
        finally:
            self.system.after_commit = None
        self.ledger.store.close()
        self._start()

    @rule(seconds=st.sampled_from([1.0, LEASE + 1, TTL + 1]))
    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def reconcile(self) -> None:
        anyio.run(self.writes.reconcile)

    # -- invariants -------------------------------------------------------------------------

    def _approved_keys(self) -> Collection[str]:
        keys = set()
        for preview in self.ledger.previews(limit=10_000):
            approval = self.ledger.approval(preview.id)
            if approval is not None and approval.fingerprint == preview.fingerprint:
                keys.add(preview.key)
        return keys

    @invariant()
    def no_effect_without_approval(self) -> None:
        assert set(self.system.effect_keys()) <= self._approved_keys()

    @invariant()
    def no_duplicate_effect(self) -> None:
        counts = Counter(self.system.effect_keys())
        assert all(n == 1 for n in counts.values()), counts

    @invariant()
    def committed_exactly_when_its_receipt_is_stored(self) -> None:
        for preview in self.ledger.previews(limit=10_000):
            receipt = self.ledger.receipt(preview.key)
            mine = receipt is not None and receipt.preview_id == preview.id
            assert (preview.state == "committed") == mine, preview

    def teardown(self) -> None:
        try:
            self.system.clear_faults()
            self.clock.advance(LEASE + 1)
            anyio.run(self.writes.reconcile)
            undecided = self.ledger.previews(states={"unknown", "sending"})
            assert undecided == [], undecided
            effects = Counter(self.system.effect_keys())
            receipts = Counter(r.key for r in self.ledger.receipts(limit=10_000))
            assert effects == receipts, (effects, receipts)
        finally:
            self.ledger.store.close()
            self.system.close()
            shutil.rmtree(self.root, ignore_errors=True)


WritePathMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_write_path_state_machine = WritePathMachine.TestCase
