"""Asking again for an intent of the run, whatever became of its earlier preview, with a tool
whose ``prepare`` refuses once the system of record changed (a refunded invoice has nothing
left to refund): a committed intent answers with its preview and receipt without preparing
again; every other state answers as it always has, ``prepare`` first."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, spend, write
from airlock.tools import (
    CallContext,
    ConflictError,
    MemoryAuditStore,
    Preview,
    Registry,
    ToolError,
    WritePath,
    write_tool,
)
from airlock.tools._audit_log import AuditLog
from tests.tools.stores import Backend, open_ledger

from .billing import InvoiceId

pytestmark = pytest.mark.anyio

TOOL = "books_refund_create"
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"books.write"}))
BOB = Principal(user_id="bob", tenant_id="acme", scopes=frozenset({"books.write"}))
GRANT = Grant(
    scopes=frozenset({"books.write"}),
    effects=(write("books:refund/*"),),
    spend_limits={"USD": 10_000},
)
ASK = ApprovalPolicy((ApprovalRule(id="refunds-ask", action="ask", tools=("books_*",)),))


class RefundArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    invoice_id: InvoiceId


class Refund(BaseModel):
    invoice_id: str
    amount_minor: int
    currency: str


class Refunded(BaseModel):
    id: str
    invoice_id: str


class Books:
    """A system of record that counts what the tool asked of it."""

    def __init__(self) -> None:
        self.refunded: set[str] = set()
        self.prepared = 0
        self.sent = 0

    def prepare(self, args: RefundArgs, principal: Principal) -> Refund:
        self.prepared += 1
        if args.invoice_id in self.refunded:
            raise ConflictError(f"invoice {args.invoice_id} has no payment left to refund")
        return Refund(invoice_id=args.invoice_id, amount_minor=500, currency="USD")

    def commit(self, effect: Refund, key: str) -> dict[str, Any]:
        self.refunded.add(effect.invoice_id)
        self.sent += 1
        return {"id": f"re_{self.sent}", "invoice_id": effect.invoice_id}


class World:
    def __init__(self, location: str) -> None:
        self.books = Books()
        self.audit = MemoryAuditStore()
        self.registry = Registry(audit=AuditLog(self.audit))
        self.registry.register(
            write_tool(
                name=TOOL,
                description=(
                    "Refund an invoice in full. Use it when a customer paid by mistake. It "
                    "does not return card details."
                ),
                input_model=RefundArgs,
                effect_model=Refund,
                receipt_model=Refunded,
                prepare=self.books.prepare,
                commit=self.books.commit,
                effects=[
                    write("books:refund/{invoice_id}"),
                    spend("{amount_minor}", currency="{currency}"),
                ],
                scope="books.write",
            )
        )
        self.ledger = open_ledger(location)
        self.writes = WritePath(self.registry, self.ledger)

    def ctx(self, *, principal: Principal = ALICE, grant: Grant = GRANT) -> CallContext:
        return CallContext(
            principal=principal, grant=grant, run_id="run_1", caller="direct", approvals=ASK
        )

    async def call(self, invoice: str = "inv_1", **kw: Any) -> Preview:
        return await self.writes.preview_call(TOOL, {"invoice_id": invoice}, self.ctx(**kw))

    async def move_to(self, preview: Preview, state: str) -> None:
        """Take a fresh preview to ``state`` the way the write path would."""
        now = self.writes.clock()
        if state == "denied":
            self.writes.deny(preview.id, approver="bob", reason="not this one")
            return
        if state == "prepared":
            return
        self.writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
        if state == "committed":
            await self.writes.commit(preview.id, preview.fingerprint, ALICE)
            return
        if state == "approved":
            return
        self.ledger.transition(
            preview.id, expect={"approved"}, to="sending", at=now, actor="t", how="sending"
        )
        if state in ("unknown", "failed"):
            self.ledger.transition(
                preview.id, expect={"sending"}, to=state, at=now, actor="t", how=state, error="x"
            )

    def final_codes(self) -> list[str | None]:
        return [e.code for e in self.registry.audit.events() if e.final and e.tool == TOOL]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(str(tmp_path))
    yield w
    w.ledger.close()


# (the earlier preview's state, refunded upstream when asked again, the answer, the final
# audit code of the second call, whether it prepared again)
AGAIN: list[tuple[str, bool, str, str, bool]] = [
    ("prepared", False, "same prepared", "needs_approval", True),
    ("prepared", True, "conflict", "conflict", True),
    ("approved", False, "same approved", "needs_approval", True),
    ("approved", True, "conflict", "conflict", True),
    ("sending", False, "same sending", "needs_approval", True),
    ("sending", True, "conflict", "conflict", True),
    ("unknown", False, "same unknown", "needs_approval", True),
    ("unknown", True, "conflict", "conflict", True),
    ("denied", False, "new prepared", "needs_approval", True),
    ("denied", True, "conflict", "conflict", True),
    ("failed", False, "new prepared", "needs_approval", True),
    ("failed", True, "conflict", "conflict", True),
    # Committed: its preview and receipt, prepare not asked (it would refuse: conflict).
    ("committed", False, "same committed", "already_committed", False),
    ("committed", True, "same committed", "already_committed", False),
]


@pytest.mark.parametrize(
    ("state", "refunded", "answer", "code", "prepared_again"),
    AGAIN,
    ids=[f"{s}-{'refunded' if r else 'open'}" for s, r, *_ in AGAIN],
)
async def test_asking_again_answers_by_the_earlier_previews_state(
    world: World, state: str, refunded: bool, answer: str, code: str, prepared_again: bool
) -> None:
    first = await world.call()
    await world.move_to(first, state)
    (world.books.refunded.add if refunded else world.books.refunded.discard)("inv_1")
    prepared, sent = world.books.prepared, world.books.sent
    try:
        again = await world.call()
    except ToolError as exc:
        got = exc.code
    else:
        got = f"{'same' if again.id == first.id else 'new'} {again.state}"
    assert got == answer
    assert world.final_codes()[-1] == code
    assert world.books.prepared == prepared + prepared_again
    assert world.books.sent == sent  # asking again never sends
    if state == "committed":
        assert world.writes.receipt(again) == world.writes.receipt(first)
        assert world.writes.receipt(again) is not None


async def test_a_committed_intent_found_on_each_store(tmp_path: Path, backend: Backend) -> None:
    w = World(backend.url or str(tmp_path))
    try:
        first = await w.call()
        await w.move_to(first, "committed")
        again = await w.call()
        assert (again.id, again.state, w.books.prepared, w.books.sent) == (
            first.id,
            "committed",
            1,
            1,
        )
    finally:
        w.ledger.close()


async def test_another_intent_after_a_commit_is_prepared(world: World) -> None:
    first = await world.call("inv_1")
    await world.move_to(first, "committed")
    other = await world.call("inv_2")
    assert (other.state, other.id != first.id, world.books.prepared) == ("prepared", True, 2)


async def test_another_principal_asking_for_a_committed_intent_of_the_run_is_a_conflict(
    world: World,
) -> None:
    first = await world.call()
    await world.move_to(first, "committed")
    world.books.refunded.discard("inv_1")  # prepare would succeed: the run id is what refuses
    with pytest.raises(ConflictError, match="another principal"):
        await world.call(principal=BOB)
    assert world.books.prepared == 2


async def test_a_committed_intent_outside_the_grant_now_is_denied(world: World) -> None:
    first = await world.call()
    await world.move_to(first, "committed")
    narrower = dataclasses.replace(GRANT, spend_limits={"USD": 100})
    with pytest.raises(ToolError) as refused:
        await world.call(grant=narrower)
    assert refused.value.code == "denied"
    assert world.final_codes()[-1] == "denied"
