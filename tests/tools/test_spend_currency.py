"""A spend is judged in the currency the tool spends: a refund of an invoice in euros is
judged by the grant and the rules, shown to the person who approves it, and audited as a
spend in euros, never in the currency a declaration would have fixed."""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, read, spend, write
from airlock.tools import DeniedError, Preview, Registry, WritePath
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.tools.stores import Backend

from .test_write_world import ALICE, ALLOW, ASK, GRANT, TOOL, World, context

pytestmark = pytest.mark.anyio

EUR_INVOICE = {"tenant_id": "acme", "amount_minor": 90_000, "currency": "EUR", "customer": "cus_eu"}
ARGS = {"invoice_id": "inv_eur", "reason": "duplicate"}
JUDGED = ("write(billing:refund/inv_eur)", "spend(90000 EUR)")
EUROS = Grant(
    scopes=frozenset({"billing.write"}),
    effects=(write("billing:refund/*"),),
    spend_limits={"USD": 100_000, "EUR": 100_000},
)
NO_EUR = ApprovalPolicy(
    (
        ApprovalRule(id="refunds-auto", action="allow", tools=("billing_*",)),
        ApprovalRule(id="no-eur", action="deny", effect="spend", currency="EUR", min_amount=1),
    )
)


class EuroWorld:
    """The write-path world's ledger and system, with a refund tool over one EUR invoice."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.registry = Registry()
        self.registry.register(refund_tool(world.system, {"inv_eur": EUR_INVOICE}))
        self.writes = WritePath(self.registry, world.ledger, clock=world.clock)

    async def prepare(self, *, grant: Grant, approvals: ApprovalPolicy, run_id: str) -> Preview:
        ctx = self.world.ctx(grant=grant, approvals=approvals, run_id=run_id)
        return await self.writes.preview_call(TOOL, ARGS, ctx)

    def final_events(self) -> list[Any]:
        return [e for e in self.registry.audit.events() if e.final]


@pytest.fixture
def euros(tmp_path: Path, backend: Backend) -> Iterator[EuroWorld]:
    world = World(tmp_path, database=backend.url)
    yield EuroWorld(world)
    world.close()


def test_the_refund_tool_declares_the_currency_it_computes() -> None:
    spec = refund_tool(SystemOfRecord(), {})
    assert spend("{amount_minor}", currency="{currency}") in spec.effects


async def test_a_grant_in_dollars_refuses_a_refund_in_euros(euros: EuroWorld) -> None:
    assert "EUR" not in GRANT.spend_limits
    with pytest.raises(DeniedError) as refused:
        await euros.prepare(grant=GRANT, approvals=ALLOW, run_id="run_usd")
    assert refused.value.reason == "spend"
    assert "spend(90000 EUR)" in str(refused.value)
    (event,) = euros.final_events()
    assert (event.decision, event.code, event.effects) == ("deny", "denied", JUDGED)
    assert euros.world.system.sends() == 0
    assert euros.world.ledger.previews() == []


async def test_a_rule_on_euros_decides_a_refund_in_euros(euros: EuroWorld) -> None:
    with pytest.raises(DeniedError) as refused:
        await euros.prepare(grant=EUROS, approvals=NO_EUR, run_id="run_rule")
    assert refused.value.reason == "policy"
    (event,) = euros.final_events()
    assert (event.rule, event.effects) == ("no-eur", JUDGED)
    assert euros.world.system.sends() == 0


async def test_a_refund_in_euros_is_shown_audited_and_committed_in_euros(
    euros: EuroWorld,
) -> None:
    preview = await euros.prepare(grant=EUROS, approvals=ASK, run_id="run_eur")
    assert preview.state == "prepared"
    assert preview.effects == JUDGED
    assert "900.00 EUR" in preview.summary
    (event,) = euros.final_events()
    assert (event.decision, event.code, event.effects) == ("ask", "needs_approval", JUDGED)
    euros.writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
    receipt = await euros.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert (receipt.data["amount_minor"], receipt.data["currency"]) == (90_000, "EUR")
    assert euros.world.system.sends() == 1


class Currency(StrEnum):
    USD = "USD"
    EUR = "EUR"


class Charged(BaseModel):
    ok: bool


def charge_registry() -> Registry:
    """A direct tool whose input types its currency as an enum: a call's value is a member."""
    registry = Registry()

    @registry.tool(
        effects=[read("shop:order/{order_id}"), spend("{amount_minor}", currency="{currency}")],
        scope="billing.write",
    )
    async def shop_order_charge(
        order_id: Annotated[str, Field(max_length=20)],
        amount_minor: Annotated[int, Field(ge=0)],
        currency: Currency,
    ) -> Charged:
        """Charge an order. Use it once the order is confirmed. It does not return card data."""
        return Charged(ok=True)

    return registry


BOTH = Grant(
    scopes=frozenset({"billing.write"}),
    effects=(read("shop:order/*"),),
    spend_limits={"USD": 100_000, "EUR": 100_000},
)
SHOP = ApprovalPolicy(
    (
        ApprovalRule(id="shop-auto", action="allow", tools=("shop_*",)),
        ApprovalRule(id="no-eur", action="deny", effect="spend", currency="EUR"),
    )
)

# (currency sent, the outcome): an enum-typed currency is judged by its code
ENUM_CURRENCY: list[tuple[str, dict[str, object]]] = [
    ("USD", {"ok": True}),
    ("EUR", {"denied": "policy"}),
]


@pytest.mark.parametrize(("currency", "outcome"), ENUM_CURRENCY)
async def test_a_currency_typed_as_an_enum_is_judged_by_its_code(
    currency: str, outcome: dict[str, object]
) -> None:
    registry = charge_registry()
    ctx = context(principal=ALICE, approvals=SHOP, run_id="run_enum", grant=BOTH)
    args = {"order_id": "o_1", "amount_minor": 500, "currency": currency}
    try:
        result = await registry.call("shop_order_charge", args, ctx)
    except DeniedError as refused:
        result = {"denied": refused.reason}
    assert result == outcome
