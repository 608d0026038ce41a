"""Proposals from code and their batches, in one process: who may propose what, one
fingerprint for a batch, one commit per approved item, and nothing sent otherwise."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from airlock.policies import Grant, Principal, UsageError, read
from airlock.tools import (
    BATCH_PREFIX,
    ApprovalMismatchError,
    AuditLog,
    Batch,
    CallContext,
    ConflictError,
    MemoryAuditStore,
    Preview,
    Registry,
    SQLiteLedgerStore,
    ToolError,
    WritePath,
    _batch_writes,
    approve_batch,
    approve_preview,
    batch_fingerprint,
    batch_items,
    deny_preview,
)
from airlock.tools.testing import SystemOfRecord, refund_tool

from .billing import InvoiceId
from .stores import Backend
from .test_write_world import ALICE, ASK, GRANT, INVOICES, MALLORY, Clock

pytestmark = pytest.mark.anyio


class Peek(BaseModel):
    invoice_id: str


PROPOSING = dataclasses.replace(GRANT, propose=frozenset({"billing_refund_create"}))
OTHER = "billing_credit_create"  # a write tool whose contract does not allow proposals


class ProposalWorld:
    """A registry with a proposable refund, a non-proposable write and a read tool."""

    def __init__(self, root: Path, *, ttl: float = 900.0) -> None:
        self.system = SystemOfRecord(root / "system.db")
        self.ledger = SQLiteLedgerStore(root / "ledger.db", synchronous="NORMAL")
        self.audit = MemoryAuditStore()
        self.registry = Registry(audit=AuditLog(self.audit))
        self.registry.register(refund_tool(self.system, INVOICES, proposable=True))
        self.registry.register(refund_tool(self.system, INVOICES, name=OTHER))

        @self.registry.tool(
            effects=[read("billing:invoice/{invoice_id}")],
            scope="billing.write",
            callers={"direct", "code"},
        )
        def billing_invoice_peek(invoice_id: InvoiceId) -> Peek:
            """Read one invoice id back. Use it in tests of proposals.
            It does not return anything else."""
            return Peek(invoice_id=invoice_id)

        self.clock = Clock()
        self.writes = WritePath(self.registry, self.ledger, clock=self.clock, ttl=ttl)

    def code(self, *, grant: Grant = PROPOSING, principal: Principal = ALICE) -> CallContext:
        return CallContext(
            principal=principal, grant=grant, run_id="run_p", caller="code", approvals=ASK
        )

    async def propose(self, *invoices: str, **kw: Any) -> list[Preview]:
        return [
            await self.writes.propose_from_code(
                "billing_refund_create", {"invoice_id": i, "reason": "duplicate"}, self.code(**kw)
            )
            for i in invoices
        ]

    def close(self) -> None:
        self.ledger.close()
        self.system.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ProposalWorld]:
    w = ProposalWorld(tmp_path)
    yield w
    w.close()


# -- who may propose what: a table of hostile and edge inputs --------------------------

NO_PROPOSE = GRANT  # the same grant without a propose list
NO_SCOPE = dataclasses.replace(PROPOSING, scopes=frozenset())
WIDE = dataclasses.replace(PROPOSING, propose=frozenset({"billing_*"}))
HIDDEN = Principal(user_id="alice", tenant_id="acme", scopes=frozenset())

REFUSALS: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    ("a read tool", "billing_invoice_peek", {"invoice_id": "inv_1"}, {}, "unknown_tool"),
    ("a write whose contract forbids it", OTHER, {"invoice_id": "inv_1", "reason": "duplicate"},
     {"grant": WIDE}, "unknown_tool"),
    ("no such tool", "billing_nothing_here", {}, {}, "unknown_tool"),
    ("a tool hidden from the principal", "billing_refund_create",
     {"invoice_id": "inv_1", "reason": "duplicate"}, {"principal": HIDDEN}, "unknown_tool"),
    ("a grant without a propose list", "billing_refund_create",
     {"invoice_id": "inv_1", "reason": "duplicate"}, {"grant": NO_PROPOSE}, "denied"),
    ("a grant without the scope", "billing_refund_create",
     {"invoice_id": "inv_1", "reason": "duplicate"}, {"grant": NO_SCOPE}, "denied"),
    ("bad arguments", "billing_refund_create", {"invoice_id": "inv_1; drop", "reason": "x"}, {},
     "invalid_input"),
    ("an extra argument (an amount)", "billing_refund_create",
     {"invoice_id": "inv_1", "reason": "duplicate", "amount_minor": 1}, {}, "invalid_input"),
    ("another tenant's record", "billing_refund_create",
     {"invoice_id": "inv_globex", "reason": "duplicate"}, {}, "not_found"),
    ("another tenant's principal", "billing_refund_create",
     {"invoice_id": "inv_1", "reason": "duplicate"}, {"principal": MALLORY}, "not_found"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "tool", "args", "where", "code"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
async def test_a_proposal_outside_what_the_run_may_propose_is_refused_and_audited(
    world: ProposalWorld,
    name: str,
    tool: str,
    args: dict[str, Any],
    where: dict[str, Any],
    code: str,
) -> None:
    with pytest.raises(ToolError) as refused:
        await world.writes.propose_from_code(tool, args, world.code(**where))
    assert refused.value.code == code
    assert world.ledger.previews(limit=10) == []  # nothing stored, nothing to approve
    assert world.system.sends() == 0
    events = world.audit.query(run_id="run_p")
    assert [(e.tool, e.caller, e.code) for e in events] == [(tool, "code", code)]


async def test_a_direct_context_cannot_propose(world: ProposalWorld) -> None:
    direct = dataclasses.replace(world.code(), caller="direct")
    with pytest.raises(UsageError, match="proposals come from code"):
        await world.writes.propose_from_code(
            "billing_refund_create", {"invoice_id": "inv_1", "reason": "duplicate"}, direct
        )


async def test_a_proposal_is_prepared_by_the_host_and_audited_as_a_preview(
    world: ProposalWorld,
) -> None:
    (preview,) = await world.propose("inv_7")
    assert preview.state == "prepared"
    assert preview.effect["amount_minor"] == 1007  # from the record, not from the program
    assert world.system.sends() == 0
    (event,) = world.audit.query(run_id="run_p")
    assert (event.caller, event.outcome, event.code) == ("code", "preview", "needs_approval")


# -- batches ----------------------------------------------------------------------------


async def test_one_approval_of_the_batch_commits_every_item_once(world: ProposalWorld) -> None:
    previews = await world.propose("inv_1", "inv_2", "inv_3")
    batch = world.writes.store_batch(previews)
    assert batch.id.startswith(BATCH_PREFIX)
    assert batch.fingerprint == batch_fingerprint([p.fingerprint for p in previews])

    approved = world.writes.approve_batch(batch.id, approver="bob", fingerprint=batch.fingerprint)
    assert [i.state for i in approved] == ["approved"] * 3
    items = await world.writes.commit_batch(batch.id, ALICE)
    again = await world.writes.commit_batch(batch.id, ALICE)

    assert [i.state for i in items] == ["committed"] * 3
    assert [i.receipt for i in again] == [i.receipt for i in items]  # the same receipts
    assert world.system.effects() == 3
    assert sorted(world.system.effect_keys()) == sorted(p.key for p in previews)
    assert world.system.sends() == 3  # asking again sent nothing


async def test_items_can_be_approved_and_denied_one_by_one(world: ProposalWorld) -> None:
    first, second, third = await world.propose("inv_4", "inv_5", "inv_6")
    batch = world.writes.store_batch([first, second, third])
    world.writes.approve(first.id, approver="bob", fingerprint=first.fingerprint)
    world.writes.deny(second.id, approver="bob", reason="not a duplicate")

    items = await world.writes.commit_batch(batch.id, ALICE)

    assert [(i.state, i.code) for i in items] == [
        ("committed", None),
        ("denied", "denied"),
        ("waiting", "needs_approval"),
    ]
    assert world.system.effects() == 1


def _forged(fingerprint: str) -> str:
    return fingerprint[:-1] + ("0" if fingerprint[-1] != "0" else "1")


BATCH_REFUSALS: list[tuple[str, Callable[[str], str], str]] = [
    ("another batch's fingerprint", lambda f: batch_fingerprint([f]), "approval_mismatch"),
    ("one character changed", _forged, "approval_mismatch"),
    ("empty", lambda f: "", "approval_mismatch"),
    ("non-ASCII", lambda f: "é" * 64, "approval_mismatch"),
]


@pytest.mark.parametrize(
    ("name", "shown", "code"), BATCH_REFUSALS, ids=[r[0] for r in BATCH_REFUSALS]
)
async def test_a_batch_fingerprint_that_does_not_match_approves_nothing(
    world: ProposalWorld, name: str, shown: Callable[[str], str], code: str
) -> None:
    batch = world.writes.store_batch(await world.propose("inv_8", "inv_9"))
    with pytest.raises(ToolError) as refused:
        world.writes.approve_batch(batch.id, approver="bob", fingerprint=shown(batch.fingerprint))
    assert refused.value.code == code
    assert {p.state for p in world.ledger.previews(limit=10)} == {"prepared"}
    assert [i.state for i in await world.writes.commit_batch(batch.id, ALICE)] == ["waiting"] * 2
    assert world.system.sends() == 0


async def test_a_batch_whose_items_were_changed_in_the_ledger_is_refused(
    world: ProposalWorld,
) -> None:
    previews = await world.propose("inv_10", "inv_11")
    batch = world.writes.store_batch(previews)
    _tamper(world, previews[0].id)
    with pytest.raises(ApprovalMismatchError):
        world.writes.approve_batch(batch.id, approver="bob", fingerprint=batch.fingerprint)
    assert world.system.sends() == 0


def _tamper(world: ProposalWorld, preview_id: str) -> None:
    conn = sqlite3.connect(world.ledger.path)
    with conn:
        conn.execute(
            "UPDATE previews SET effect = ? WHERE id = ?", ('{"amount_minor": 999999}', preview_id)
        )
    conn.close()


async def test_approving_an_item_already_committed_is_a_conflict(world: ProposalWorld) -> None:
    previews = await world.propose("inv_12")
    batch = world.writes.store_batch(previews)
    world.writes.approve_batch(batch.id, approver="bob", fingerprint=batch.fingerprint)
    await world.writes.commit_batch(batch.id, ALICE)

    with pytest.raises(ConflictError):
        approve_preview(
            world.ledger, previews[0].id, approver="carol", now=world.clock(),
            fingerprint=previews[0].fingerprint,
        )  # fmt: skip
    again = approve_batch(
        world.ledger, batch.id, approver="carol", now=world.clock(), fingerprint=batch.fingerprint
    )
    assert [i.state for i in again] == ["committed"]  # reported as it stands, unchanged
    assert world.system.effects() == 1


async def test_an_expired_item_is_reported_expired_and_never_sent(tmp_path: Path) -> None:
    world = ProposalWorld(tmp_path, ttl=60.0)
    try:
        early = await world.propose("inv_13")
        world.clock.advance(50)
        late = await world.propose("inv_14")
        batch = world.writes.store_batch(early + late)
        world.clock.advance(20)  # the first item is past its expiry, the second is not

        approved = world.writes.approve_batch(
            batch.id, approver="bob", fingerprint=batch.fingerprint
        )
        items = await world.writes.commit_batch(batch.id, ALICE)
        sent = world.system.effect_keys()
    finally:
        world.close()
    assert [(i.state, i.code) for i in approved] == [
        ("expired", "preview_expired"),
        ("approved", None),
    ]
    assert [i.state for i in items] == ["expired", "committed"]
    assert sent == [late[0].key]


async def test_another_principal_cannot_commit_a_batch(world: ProposalWorld) -> None:
    batch = world.writes.store_batch(await world.propose("inv_15"))
    world.writes.approve_batch(batch.id, approver="bob", fingerprint=batch.fingerprint)
    with pytest.raises(ToolError) as refused:
        await world.writes.commit_batch(batch.id, MALLORY)
    assert refused.value.code == "not_found"
    assert world.system.sends() == 0


async def test_a_denied_batch_item_and_the_rest_are_reported_by_batch_items(
    world: ProposalWorld,
) -> None:
    first, second = await world.propose("inv_16", "inv_17")
    batch = world.writes.store_batch([first, second])
    deny_preview(world.ledger, first.id, approver="bob", reason="no", now=world.clock())
    items = batch_items(world.ledger, batch.id, now=world.clock())
    assert [i.state for i in items] == ["denied", "waiting"]


def _by_write_path(world: ProposalWorld, batch: Batch, approver: str, own: bool) -> Any:
    return world.writes.approve_batch(
        batch.id, approver=approver, fingerprint=batch.fingerprint, self_approval=own
    )


def _by_function(world: ProposalWorld, batch: Batch, approver: str, own: bool) -> Any:
    return approve_batch(
        world.ledger,
        batch.id,
        approver=approver,
        now=world.clock(),
        fingerprint=batch.fingerprint,
        self_approval=own,
    )


SELF_APPROVALS: list[tuple[str, str, bool, str | None]] = [
    ("the requester by user id", "alice", False, "denied"),
    ("the requester as USER@TENANT", "alice@acme", False, "denied"),
    ("the requester with self-approval on", "alice@acme", True, None),
    ("another person", "bob", False, None),
    ("the same user id in another tenant", "alice@globex", False, None),
]


@pytest.mark.parametrize("approve", [_by_write_path, _by_function], ids=["WritePath", "function"])
@pytest.mark.parametrize(
    ("name", "approver", "own", "code"), SELF_APPROVALS, ids=[c[0] for c in SELF_APPROVALS]
)
async def test_the_requester_cannot_approve_their_own_batch(
    world: ProposalWorld,
    approve: Callable[[ProposalWorld, Batch, str, bool], Any],
    name: str,
    approver: str,
    own: bool,
    code: str | None,
) -> None:
    batch = world.writes.store_batch(await world.propose("inv_18", "inv_19"))
    if code is None:
        items = approve(world, batch, approver, own)
        assert [(i.state, i.approved_now) for i in items] == [("approved", True)] * 2
        return
    with pytest.raises(ToolError) as refused:  # up front, as for a single preview
        approve(world, batch, approver, own)
    assert refused.value.code == code
    assert "self_approval = true" in refused.value.message
    assert {world.ledger.preview(i).state for i in batch.items} == {"prepared"}  # type: ignore[union-attr]


async def test_a_batch_approval_audits_only_the_approvals_it_recorded(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = await world.propose("inv_20", "inv_21")
    batch = world.writes.store_batch([first, second])
    real = _batch_writes.approve_batch

    def carol_first(ledger: Any, batch_id: str, **kw: Any) -> Any:
        # Carol approves one item herself while dave's batch approval is under way.
        approve_preview(ledger, first.id, approver="carol", now=kw["now"])
        return real(ledger, batch_id, **kw)

    monkeypatch.setattr(_batch_writes, "approve_batch", carol_first)
    items = world.writes.approve_batch(batch.id, approver="dave", fingerprint=batch.fingerprint)

    assert [(i.state, i.approved_now) for i in items] == [("approved", False), ("approved", True)]
    credited = [
        (e.call_id, e.approver)
        for e in world.audit.query(run_id="run_p")
        if e.stage == "authorize" and e.approver is not None
    ]
    assert credited == [(second.id, "dave")]  # carol's approval is not dave's


async def test_an_unknown_batch_is_not_found(world: ProposalWorld) -> None:
    with pytest.raises(ToolError) as refused:
        world.writes.approve_batch("pb_nothing", approver="bob", fingerprint="f" * 64)
    assert refused.value.code == "not_found"


async def test_every_ledger_store_keeps_a_batch_as_written_and_once(
    backend: Backend, tmp_path: Path
) -> None:
    system = SystemOfRecord(tmp_path / "system.db")
    registry = Registry()
    registry.register(refund_tool(system, INVOICES, proposable=True))
    ledger = backend.ledger()
    try:
        writes = WritePath(registry, ledger)
        ctx = CallContext(
            principal=ALICE, grant=PROPOSING, run_id="run_s", caller="code", approvals=ASK
        )
        previews = [
            await writes.propose_from_code(
                "billing_refund_create", {"invoice_id": i, "reason": "duplicate"}, ctx
            )
            for i in ("inv_1", "inv_2")
        ]
        batch = writes.store_batch(previews)
        assert ledger.batch(batch.id) == batch
        assert ledger.batches(run_id="run_s") == [batch]
        assert ledger.batches(run_id="run_other") == []
        with pytest.raises(ValueError, match="exists already"):
            ledger.add_batch(batch)  # written once, never changed
        with pytest.raises(ValueError, match="names previews the ledger does not hold"):
            ledger.add_batch(dataclasses.replace(batch, id="pb_other", items=("pv_missing",)))
        assert ledger.batch("pb_other") is None
    finally:
        ledger.close()
        system.close()
