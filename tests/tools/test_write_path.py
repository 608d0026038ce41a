"""The write path in one process: prepare, approve, commit, the commit checks, tampering."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Grant,
    Principal,
    UsageError,
    read,
    spend,
    write,
)
from airlock.tools import (
    AmbiguousWriteError,
    ConflictError,
    DeniedError,
    NeedsApprovalError,
    Preview,
    Registry,
    SQLiteLedgerStore,
    ToolError,
    ToolSpec,
    WritePath,
    write_tool,
)
from airlock.tools.testing import Refund, SystemOfRecord, refund_tool
from tests.tools.stores import Backend

from .test_write_world import (
    ALICE,
    ALLOW,
    ASK,
    BOB,
    DENY,
    GRANT,
    INVOICES,
    MALLORY,
    TOOL,
    World,
    context,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(tmp_path: Path, backend: Backend) -> Iterator[World]:
    w = World(tmp_path, database=backend.url)
    yield w
    w.close()


# -- happy paths ------------------------------------------------------------------------


async def test_allow_rule_approves_by_policy_and_commit_returns_a_receipt(world: World) -> None:
    preview = await world.prepare("inv_1", approvals=ALLOW)

    assert preview.state == "approved"
    approval = world.ledger.approval(preview.id)
    assert approval is not None
    assert (approval.kind, approval.approver, approval.rule) == (
        "policy",
        "policy:refunds-auto",
        "refunds-auto",
    )
    receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert receipt.data["amount_minor"] == 1001  # computed from the invoice, not supplied
    assert receipt.resolved_by == "send"
    assert not receipt.replayed
    assert world.system.effects() == 1
    assert world.ledger.receipt(preview.key) == receipt
    stored = world.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "committed"
    assert [e.to_state for e in world.ledger.history(preview.id)] == [
        "prepared",
        "approved",
        "sending",
        "committed",
    ]


async def test_ask_rule_waits_for_a_person_then_commits(world: World) -> None:
    preview = await world.prepare("inv_2", approvals=ASK)
    assert preview.state == "prepared"
    with pytest.raises(NeedsApprovalError) as waiting:
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert waiting.value.preview_id == preview.id
    assert world.system.sends() == 0

    approval = world.writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
    receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert (approval.kind, approval.approver, approval.rule) == ("person", "bob", "refunds-ask")
    consumed = world.ledger.approval(preview.id)
    assert consumed is not None
    assert consumed.consumed_at is not None
    assert receipt.data["invoice_id"] == "inv_2"
    assert world.system.effects() == 1


async def test_direct_call_answers_needs_approval_with_summary_and_preview_id(
    world: World,
) -> None:
    ctx = world.ctx(approvals=ASK)
    with pytest.raises(NeedsApprovalError) as answer:
        await world.registry.call(TOOL, {"invoice_id": "inv_3", "reason": "duplicate"}, ctx)

    wire = answer.value.to_wire()
    assert wire["code"] == "needs_approval"
    assert wire["rule"] == "refunds-ask"
    assert isinstance(wire["preview_id"], str)
    assert wire["preview_id"].startswith("pv_")
    assert "refund 10.03 USD on inv_3 to cus_3" in str(wire["message"])
    assert world.system.sends() == 0
    final = [e for e in world.registry.audit.events() if e.final]
    assert [(e.stage, e.decision, e.rule, e.code) for e in final] == [
        ("execute", "ask", "refunds-ask", "needs_approval")
    ]
    assert final[0].effects == ("write(billing:refund/inv_3)", "spend(1003 USD)")


async def test_the_model_cannot_supply_the_amount(world: World) -> None:
    schema = world.registry.visible(ALICE, "direct")[0].parameters
    assert set(schema["properties"]) == {"invoice_id", "reason"}  # type: ignore[arg-type]
    with pytest.raises(ToolError) as refused:
        await world.registry.call(
            TOOL,
            {"invoice_id": "inv_1", "reason": "duplicate", "amount_minor": 1},
            world.ctx(),
        )
    assert refused.value.code == "invalid_input"


async def test_same_intent_in_a_run_reuses_one_preview_and_key(world: World) -> None:
    first = await world.prepare("inv_4", approvals=ASK)
    again = await world.prepare("inv_4", approvals=ASK)
    other_run = await world.prepare("inv_4", approvals=ASK, run_id="run_2")

    assert again.id == first.id
    assert other_run.key != first.key


SMALL_ALLOWED = ApprovalPolicy(
    (
        ApprovalRule(id="large-ask", action="ask", tools=("billing_*",), min_amount=10_000),
        ApprovalRule(id="small-auto", action="allow", tools=("billing_*",)),
    )
)


async def test_a_rule_approves_only_the_effect_it_judged(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large refund waits for a person; then its invoice changes, and the same intent is
    # asked again: the rules allow the small refund now computed, not the large one stored.
    monkeypatch.setitem(INVOICES["inv_6"], "amount_minor", 50_000)
    first = await world.prepare("inv_6", approvals=SMALL_ALLOWED)
    monkeypatch.setitem(INVOICES["inv_6"], "amount_minor", 5)
    again = await world.prepare("inv_6", approvals=SMALL_ALLOWED)

    assert again.id == first.id
    assert (again.state, again.effect["amount_minor"]) == ("prepared", 50_000)
    assert world.ledger.approval(first.id) is None
    with pytest.raises(NeedsApprovalError):
        await world.writes.commit(again.id, again.fingerprint, ALICE)
    assert world.system.sends() == 0


async def test_a_rule_that_allows_the_stored_effect_approves_it(world: World) -> None:
    first = await world.prepare("inv_7", approvals=ASK)
    again = await world.prepare("inv_7", approvals=ALLOW)

    assert (again.id, again.state) == (first.id, "approved")
    approval = world.ledger.approval(first.id)
    assert approval is not None
    assert approval.kind == "policy"


async def test_an_expired_unsent_preview_gives_way_when_prepared_again(world: World) -> None:
    first = await world.prepare("inv_5", approvals=ASK)
    world.clock.advance(world.writes.ttl + 1)
    second = await world.prepare("inv_5", approvals=ASK)

    assert second.id != first.id
    assert second.key == first.key
    old = world.ledger.preview(first.id)
    assert old is not None
    assert (old.state, old.error) == ("failed", "preview_expired")


@pytest.mark.parametrize(
    ("invoice", "approvals", "grant", "code", "reason"),
    [
        ("inv_1", DENY, GRANT, "denied", "policy"),
        ("inv_1", ALLOW, dataclasses.replace(GRANT, spend_limits={"USD": 10}), "denied", "spend"),
        (
            "inv_1",
            ALLOW,
            dataclasses.replace(GRANT, effects=(write("billing:x/*"),)),
            "denied",
            "effect",
        ),
        ("inv_globex", ALLOW, GRANT, "not_found", None),
        ("inv_nope", ALLOW, GRANT, "not_found", None),
    ],
    ids=["deny rule", "over spend limit", "outside grant", "other tenant", "missing"],
)
async def test_prepare_refusals_store_and_send_nothing(
    world: World,
    invoice: str,
    approvals: ApprovalPolicy,
    grant: Grant,
    code: str,
    reason: str | None,
) -> None:
    ctx = world.ctx(approvals=approvals, grant=grant)
    with pytest.raises(ToolError) as refused:
        await world.registry.call(TOOL, {"invoice_id": invoice, "reason": "duplicate"}, ctx)

    assert refused.value.code == code
    if reason is not None:
        assert isinstance(refused.value, DeniedError)
        assert refused.value.reason == reason
    assert world.ledger.previews() == []
    assert world.system.sends() == 0


# -- what the grant and the rules make of a prepared effect ---------------------------------
# Two tools whose prepared effect is what a rule must see whole: a purge of a segment's
# contacts (one write per contact; a segment may have none) and an order paid with a price
# and a fee (two spends in one call).


class SegmentArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    segment: Annotated[str, Field(max_length=16, pattern=r"^[a-z]+$")]


class Purge(BaseModel):
    segment: str
    contact_ids: list[str]


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    order_id: Annotated[str, Field(max_length=16, pattern=r"^o[0-9]+$")]


class Order(BaseModel):
    order_id: str
    price_minor: int
    fee_minor: int


class Done(BaseModel):
    ok: bool


SHOPPER = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"shop.write"}))
SHOP_GRANT = Grant(
    scopes=frozenset({"shop.write"}),
    effects=(write("crm:contact/*"), write("shop:order/*")),
    spend_limits={"USD": 100_000},
)
SEGMENTS: dict[str, list[str]] = {"empty": []}
ORDERS = {"o1": (9_999, 9_999)}  # each under 10,000 USD, together over it


def _shop(sent: list[object]) -> Registry:
    registry = Registry()
    registry.register(
        write_tool(
            name="crm_segment_purge",
            description="Delete every contact of a segment. Use it to purge a segment. "
            "It does not return the contacts.",
            input_model=SegmentArgs,
            effect_model=Purge,
            receipt_model=Done,
            prepare=lambda a, _: Purge(segment=a.segment, contact_ids=SEGMENTS[a.segment]),
            commit=lambda effect, key: sent.append(effect) or {"ok": True},
            effects=[write("crm:contact/{contact_ids[]}")],
            scope="shop.write",
        )
    )
    registry.register(
        write_tool(
            name="shop_order_buy",
            description="Pay for an order, its price and a fee. Use it to buy one order. "
            "It does not return card data.",
            input_model=OrderArgs,
            effect_model=Order,
            receipt_model=Done,
            prepare=lambda a, _: Order(
                order_id=a.order_id,
                price_minor=ORDERS[a.order_id][0],
                fee_minor=ORDERS[a.order_id][1],
            ),
            commit=lambda effect, key: sent.append(effect) or {"ok": True},
            effects=[write("shop:order/{order_id}"), spend("{price_minor}"), spend("{fee_minor}")],
            scope="shop.write",
        )
    )
    return registry


AUTO_SHOP = ApprovalRule(id="shop-auto", action="allow", tools=("shop_*",))
NO_WRITES = ApprovalRule(id="no-writes", action="deny", effect="write")
ASK_CRM = ApprovalRule(id="ask-crm", action="ask", tools=("crm_*",), effect="write")
BIG = ApprovalRule(id="big", action="ask", effect="spend", min_amount=10_000)
EUR_ONLY = ApprovalRule(id="eur-auto", action="allow", effect="spend", currency="EUR")

# tool, arguments, rules, grant, the preview's state or the refusal's code, rule or reason
PREPARED: list[tuple[str, str, dict[str, Any], tuple[ApprovalRule, ...], Grant, str, str]] = [
    # a write that resolves to no effect is still a write: never judged as read-only
    ("nothing to purge: the default for a write asks", "crm_segment_purge",
     {"segment": "empty"}, (), SHOP_GRANT, "prepared", "default"),
    ("nothing to purge: deny effect=write denies", "crm_segment_purge",
     {"segment": "empty"}, (NO_WRITES,), SHOP_GRANT, "denied", "policy"),
    ("nothing to purge: the strictest rule on writes", "crm_segment_purge",
     {"segment": "empty"}, (ASK_CRM, NO_WRITES), SHOP_GRANT, "denied", "policy"),
    # a call's spends add up per currency, for the grant's limit and for min_amount
    ("two spends over the limit together", "shop_order_buy", {"order_id": "o1"},
     (AUTO_SHOP,), dataclasses.replace(SHOP_GRANT, spend_limits={"USD": 10_000}),
     "denied", "spend"),
    ("two spends over min_amount together", "shop_order_buy", {"order_id": "o1"},
     (AUTO_SHOP, BIG), SHOP_GRANT, "prepared", "big"),
    # currency is a condition of its own
    ("a rule on another currency does not allow", "shop_order_buy", {"order_id": "o1"},
     (EUR_ONLY,), SHOP_GRANT, "prepared", "default"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "args", "rules", "grant", "outcome", "why"),
    [row[1:] for row in PREPARED],
    ids=[row[0] for row in PREPARED],
)
async def test_the_rules_judge_the_whole_prepared_effect(
    tmp_path: Path,
    tool: str,
    args: dict[str, Any],
    rules: tuple[ApprovalRule, ...],
    grant: Grant,
    outcome: str,
    why: str,
) -> None:
    sent: list[object] = []
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    writes = WritePath(_shop(sent), ledger)
    ctx = context(principal=SHOPPER, approvals=ApprovalPolicy(rules), grant=grant)
    try:
        if outcome == "denied":
            with pytest.raises(DeniedError) as refused:
                await writes.preview_call(tool, args, ctx)
            assert refused.value.reason == why
            assert ledger.previews() == []
        else:
            preview = await writes.preview_call(tool, args, ctx)
            assert (preview.state, preview.rule) == (outcome, why)
            with pytest.raises(NeedsApprovalError):
                await writes.commit(preview.id, preview.fingerprint, SHOPPER)
        assert sent == []
    finally:
        ledger.close()


async def test_write_tools_are_never_callable_from_code(world: World) -> None:
    ctx = dataclasses.replace(world.ctx(), caller="code")
    with pytest.raises(ToolError) as hidden:
        await world.registry.call(TOOL, {"invoice_id": "inv_1", "reason": "duplicate"}, ctx)
    assert hidden.value.code == "unknown_tool"
    assert TOOL not in [t.name for t in world.registry.visible(ALICE, "code")]


# -- the commit checks, in order ----------------------------------------------------------
# Each case passes every earlier check and fails exactly one; the table is in check order.


async def _expired_with_receipt(world: World, preview: Preview) -> str:
    await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    world.clock.advance(world.writes.ttl + 1)
    return "replayed"


CHECKS = ["exists", "same principal", "fingerprint", "receipt stored", "expiry"]


@pytest.mark.parametrize("check", CHECKS)
async def test_commit_checks_run_in_order(world: World, check: str) -> None:
    preview = await world.prepare("inv_6")
    other = await world.prepare("inv_7")
    preview_id, fingerprint, session = preview.id, preview.fingerprint, ALICE
    if check == "exists":
        # also wrong principal and fingerprint: existence is checked first
        preview_id, fingerprint, session = "pv_missing", other.fingerprint, BOB
        expected: str = "not_found"
    elif check == "same principal":
        fingerprint, session = other.fingerprint, BOB  # fingerprint wrong too: principal first
        expected = "denied"
    elif check == "fingerprint":
        world.clock.advance(world.writes.ttl + 1)  # expired too: fingerprint first
        fingerprint = other.fingerprint
        expected = "approval_mismatch"
    elif check == "receipt stored":
        expected = await _expired_with_receipt(world, preview)  # expired: the receipt wins
    else:
        world.clock.advance(world.writes.ttl + 1)
        expected = "preview_expired"
    sends_before = world.system.sends()

    if expected == "replayed":
        receipt = await world.writes.commit(preview_id, fingerprint, session)
        assert receipt.replayed
        assert receipt.data["invoice_id"] == "inv_6"
    else:
        with pytest.raises(ToolError) as refused:
            await world.writes.commit(preview_id, fingerprint, session)
        assert refused.value.code == expected
        assert refused.value.outcome == "error"
    assert world.system.sends() == sends_before


async def test_a_replayed_receipt_is_the_first_one(world: World) -> None:
    preview = await world.prepare("inv_8")
    first = await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    again = await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert again == dataclasses.replace(first, replayed=True)
    assert world.system.sends() == 1


@pytest.mark.parametrize(
    ("state", "code"),
    [("prepared", "needs_approval"), ("denied", "denied"), ("sending", "conflict")],
)
async def test_commit_refuses_a_step_that_is_not_ready(world: World, state: str, code: str) -> None:
    preview = await world.prepare("inv_9", approvals=ASK)
    if state == "denied":
        world.writes.deny(preview.id, approver="bob", reason="not this one")
    elif state == "sending":  # claimed by a sender on another host, inside its lease
        world.writes.approve(preview.id, approver="bob")
        world.ledger.transition(
            preview.id,
            expect={"approved"},
            to="sending",
            at=world.clock(),
            actor="elsewhere@1.000@:4242",
            how="t",
            owner="elsewhere@1.000@:4242",
            lease_until=world.clock() + 60,
        )
    with pytest.raises(ToolError) as refused:
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert refused.value.code == code
    assert world.system.sends() == 0


# -- tampering: each refused with its code, nothing sent -------------------------------------


def _tamper_effect(world: World, preview: Preview) -> None:
    effect = Refund.model_validate(preview.effect).model_copy(update={"amount_minor": 99_999})
    world.sql("UPDATE previews SET effect = ? WHERE id = ?", (effect.model_dump_json(), preview.id))


def _tamper_effect_and_fingerprint(world: World, preview: Preview) -> str:
    changed = dataclasses.replace(preview, effect={**preview.effect, "recipient": "cus_evil"})
    new = changed.computed_fingerprint()
    world.sql(
        "UPDATE previews SET effect = ?, fingerprint = ? WHERE id = ?",
        (Refund.model_validate(changed.effect).model_dump_json(), new, preview.id),
    )
    return new


@pytest.mark.parametrize(
    "attack",
    [
        "effect changed after approval",
        "effect and fingerprint changed after approval",
        "another principal's session",
        "another tenant's session",
        "expired preview",
        "approval replayed on a second preview",
    ],
)
async def test_tampering_is_refused_and_nothing_is_sent(world: World, attack: str) -> None:
    preview = await world.prepare("inv_10")
    target, fingerprint, session = preview.id, preview.fingerprint, ALICE
    if attack == "effect changed after approval":
        _tamper_effect(world, preview)
        expected = "approval_mismatch"
    elif attack == "effect and fingerprint changed after approval":
        fingerprint = _tamper_effect_and_fingerprint(world, preview)
        expected = "approval_mismatch"  # the approval still binds the old fingerprint
    elif attack == "another principal's session":
        session, expected = BOB, "denied"
    elif attack == "another tenant's session":
        session, expected = MALLORY, "denied"
    elif attack == "expired preview":
        world.clock.advance(world.writes.ttl)
        expected = "preview_expired"
    else:
        second = await world.prepare("inv_11", approvals=ASK)  # not approved by anyone
        target, expected = second.id, "approval_mismatch"
    with pytest.raises(ToolError) as refused:
        await world.writes.commit(target, fingerprint, session)
    assert refused.value.code == expected
    assert world.system.sends() == 0


async def test_approving_a_changed_preview_is_refused(world: World) -> None:
    preview = await world.prepare("inv_12", approvals=ASK)
    _tamper_effect(world, preview)
    with pytest.raises(ToolError) as refused:
        world.writes.approve(preview.id, approver="bob")
    assert refused.value.code == "approval_mismatch"
    stored = world.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "prepared"


@pytest.mark.parametrize(
    ("approver", "code"),
    [
        ("policy:refunds-auto", "invalid_input"),
        ("", "invalid_input"),
        ("bob smith", "invalid_input"),
        ("bob\n", "invalid_input"),
    ],
)
async def test_a_person_cannot_pose_as_a_policy(world: World, approver: str, code: str) -> None:
    preview = await world.prepare("inv_13", approvals=ASK)
    with pytest.raises(ToolError) as refused:
        world.writes.approve(preview.id, approver=approver)
    assert refused.value.code == code


async def test_an_approval_is_consumed_once(world: World) -> None:
    preview = await world.prepare("inv_14", approvals=ASK)
    world.writes.approve(preview.id, approver="bob")
    with pytest.raises(ConflictError):
        world.writes.approve(preview.id, approver="carol")
    await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    with pytest.raises(ConflictError):
        world.writes.deny(preview.id, approver="carol", reason="too late")


# -- faults -------------------------------------------------------------------------------


async def test_lost_reply_then_retry_with_the_same_key_returns_the_first_receipt(
    world: World,
) -> None:
    preview = await world.prepare("inv_15")
    world.system.inject("lose_reply")
    with pytest.raises(AmbiguousWriteError) as lost:
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert lost.value.outcome == "unknown"
    assert lost.value.idempotency_key == preview.key
    stored = world.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "unknown"
    assert world.system.effects() == 1  # the system did commit

    receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert receipt.resolved_by == "resend"
    assert receipt.data["id"] == world.system.query(preview.key)["id"]  # type: ignore[index]
    assert world.system.sends(preview.key) == 2
    assert world.system.effects(preview.key) == 1
    assert len(world.ledger.receipts()) == 1


async def test_a_refusal_from_the_system_marks_the_step_failed(world: World) -> None:
    preview = await world.prepare("inv_16")
    # Someone used the key with another request: the system refuses, nothing happens.
    world.system.send(preview.key, {"something": "else"})
    with pytest.raises(ConflictError):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    stored = world.ledger.preview(preview.id)
    assert stored is not None
    assert (stored.state, stored.error) == ("failed", "conflict")
    assert world.ledger.receipts() == []


async def test_without_a_write_path_a_write_tool_is_denied(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(refund_tool(SystemOfRecord(), {}))
    world = World(tmp_path)
    with pytest.raises(DeniedError):
        await registry.call(TOOL, {"invoice_id": "inv_1", "reason": "duplicate"}, world.ctx())
    world.close()


async def test_preview_call_of_a_read_tool_is_refused(world: World) -> None:
    with pytest.raises(ToolError) as refused:
        await world.writes.preview_call("billing_nothing_here", {}, world.ctx())
    assert refused.value.code == "unknown_tool"


# -- registration of write tools ------------------------------------------------------------


class RefundCode(BaseModel):
    """A refund whose currency field is not called 'currency'."""

    invoice_id: str
    amount_minor: int
    currency_code: str


class Money(BaseModel):
    amount_minor: int
    currency: str


class RefundNested(BaseModel):
    """A refund whose currency sits in a nested model, out of a spend's reach."""

    invoice_id: str
    amount_minor: int
    money: Money


class RefundTwoCurrencies(BaseModel):
    """A refund with two currency fields, one of them bound."""

    invoice_id: str
    amount_minor: int
    currency: str
    settlement_currency: str


REFUND_IN = write("billing:refund/{invoice_id}")


def _build(**change: object) -> ToolSpec:
    base = refund_tool(SystemOfRecord(), {})
    assert base.write is not None
    options: dict[str, object] = {
        "name": base.name,
        "description": base.description,
        "input_model": base.input_model,
        "effect_model": base.write.effect_model,
        "receipt_model": base.output_model,
        "prepare": base.write.prepare,
        "commit": base.write.commit,
        "effects": base.effects,
        "scope": base.scope,
        "intent": base.write.intent,
    } | change
    return write_tool(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"effects": [write("billing:refund/{nope}")]}, "not fields of the effect model"),
        ({"effects": [read("billing:invoice/{invoice_id}")]}, "write, spend or disclose"),
        ({"intent": ()}, "name the intent"),
        ({"intent": ("amount_minor",)}, "not input fields"),
        ({"effect_model": dict}, "pydantic model class"),
        ({"commit": "not callable"}, "commit must be callable"),
        # prepare computes the currency: a spend must be bound to it, not declared beside it
        (
            {"effects": [write("billing:refund/{invoice_id}"), spend("{amount_minor}")]},
            "has a field 'currency' that no spend effect is bound to",
        ),
        (
            {"effects": [write("billing:refund/{invoice_id}"), spend(5, currency="EUR")]},
            "has a field 'currency' that no spend effect is bound to",
        ),
        (
            {"effects": [write("billing:refund/{invoice_id}")]},
            "has a field 'currency' that no spend effect is bound to",
        ),
        # a currency field by another name, nested, or one of two left unbound
        (
            {"effect_model": RefundCode, "effects": [REFUND_IN, spend("{amount_minor}")]},
            "has a field 'currency_code' that no spend effect is bound to",
        ),
        (
            {"effect_model": RefundNested, "effects": [REFUND_IN, spend("{amount_minor}")]},
            r"\['money.currency'\] in a nested model",
        ),
        (
            {
                "effect_model": RefundTwoCurrencies,
                "effects": [REFUND_IN, spend("{amount_minor}", currency="{currency}")],
            },
            "has a field 'settlement_currency' that no spend effect is bound to",
        ),
    ],
    ids=[
        "effect field",
        "no side effect",
        "no intent",
        "intent field",
        "effect model",
        "commit",
        "spend in a fixed currency",
        "spend of a fixed amount in a fixed currency",
        "currency without a spend",
        "currency_code beside a spend in a fixed currency",
        "currency in a nested model",
        "one of two currency fields unbound",
    ],
)
def test_broken_write_contracts_are_refused_at_registration(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        Registry().register(_build(**change))


def test_a_write_tool_registers_direct_only_with_its_contract() -> None:
    spec = Registry().register(_build())
    assert spec.callers == frozenset({"direct"})
    assert spec.write is not None
    assert spec.write.intent == ("invoice_id",)
