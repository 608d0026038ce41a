"""A session offers exactly the tools the effect inventory says the principal can reach: one
rule (``airlock.policies.refusal``) decides both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.harness import EXECUTE_CODE, Harness
from airlock.inventory import Subject, subject_inventory
from airlock.policies import spend, write
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import Registry, SQLiteLedgerStore, write_tool
from airlock.tools.testing import SystemOfRecord
from tests.airlock.session_world import ALICE, CAROL, policy, registry

# The refunder role of the test policy may spend up to 100,000 USD per call.
OVER_LIMIT = 150_000
WITHIN_LIMIT = 50_000


class _Credit(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    customer_id: Annotated[str, Field(pattern=r"^cus_[0-9]{1,6}$", max_length=10)]


class _Receipt(BaseModel):
    id: str


def _credit_tool(name: str, amount: int) -> Any:
    def prepare(args: _Credit, principal: Any) -> _Credit:
        return args

    def commit(effect: _Credit, idempotency_key: str) -> dict[str, str]:
        raise AssertionError("the test never commits")

    return write_tool(
        name=name,
        description=(
            "Credit a customer a fixed goodwill amount. Use it when a customer was let "
            "down. It does not return card details."
        ),
        input_model=_Credit,
        effect_model=_Credit,
        receipt_model=_Receipt,
        prepare=prepare,
        commit=commit,
        effects=[write("billing:refund/{customer_id}"), spend(amount, currency="USD")],
        scope="billing.write",
    )


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[Registry]:
    system = SystemOfRecord(tmp_path / "system.db")
    found = registry(system)
    found.register(_credit_tool("billing_bonus_issue", OVER_LIMIT))
    found.register(_credit_tool("billing_credit_issue", WITHIN_LIMIT))
    yield found
    system.close()


@pytest.mark.parametrize("principal", [ALICE, CAROL], ids=["alice", "carol"])
def test_the_session_offers_what_the_inventory_says_is_reachable(
    tools: Registry, tmp_path: Path, principal: Any
) -> None:
    rules = policy()
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    try:
        session = Harness(tools, rules, ScriptedBackend([]), ledger).session(principal)
        offered = {t.name for t in session.tools()} - {EXECUTE_CODE}
    finally:
        ledger.close()
    subject = Subject(
        kind="principal",
        name=principal.user_id,
        principal=principal,
        grant=rules.grant_for(principal),
        approvals=rules.approvals_for(principal),
    )
    listed = {t.name: t for t in subject_inventory(tools, subject).tools}
    assert offered == {name for name, tool in listed.items() if tool.reach}
    assert offered  # the comparison is about something


def test_a_fixed_spend_over_the_limit_is_neither_offered_nor_reachable(
    tools: Registry, tmp_path: Path
) -> None:
    rules = policy()
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    try:
        session = Harness(tools, rules, ScriptedBackend([]), ledger).session(ALICE)
        offered = {t.name for t in session.tools()}
    finally:
        ledger.close()
    assert "billing_bonus_issue" not in offered
    assert {"billing_credit_issue", "billing_refund_create"} <= offered

    subject = Subject(
        kind="principal",
        name="alice",
        principal=ALICE,
        grant=rules.grant_for(ALICE),
        approvals=rules.approvals_for(ALICE),
    )
    listed = {t.name: t for t in subject_inventory(tools, subject).tools}
    over = listed["billing_bonus_issue"]
    assert [e.grant for e in over.effects if e.kind == "spend"] == ["none"]
    assert over.reach == ()
    assert over.denied_because == f"the grant covers no target of spend({OVER_LIMIT} USD)"
    within = listed["billing_credit_issue"]
    assert [e.grant for e in within.effects if e.kind == "spend"] == ["full"]
    assert within.reach
