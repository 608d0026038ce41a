"""The one admission seam: ``Registry.admit`` for steps 1–4, ``call`` = admit + run + shape,
the write path on the same seam with its preview as a value, and one ``authorize`` for both."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.policies import ApprovalPolicy, ApprovalRule, Effect, Grant, read, spend, write
from airlock.tools import (
    Admission,
    AuditLog,
    DeniedError,
    NeedsApprovalError,
    Preview,
    Registry,
    SQLiteAuditStore,
    SQLiteLedgerStore,
    ToolError,
    WritePath,
)
from airlock.tools._admission import authorize
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.tools import billing
from tests.tools.billing import FULL_GRANT, Handled

from .test_write_world import ALICE, ALLOW, ASK, GRANT, INVOICES, TOOL, World, context

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


# -- admit: steps 1–4 --------------------------------------------------------------------


async def test_admit_returns_what_it_decided_and_leaves_the_record_to_the_runner(
    registry: Registry, handled: Handled
) -> None:
    admission = registry.admit("billing_invoice_get", {"invoice_id": "inv_1"}, billing.context())

    assert isinstance(admission, Admission)
    assert admission.spec.name == "billing_invoice_get"
    assert dict(admission.values) == {"invoice_id": "inv_1"}
    assert admission.input.model_dump() == {"invoice_id": "inv_1"}
    assert [str(e) for e in admission.effects] == ["read(billing:invoice/inv_1)"]
    assert handled.calls == []  # nothing ran
    assert registry.audit.events() == []  # the caller records how the call ends


@pytest.mark.parametrize(
    ("name", "args", "grant", "code", "stage"),
    [
        ("billing_invoice_gone", {"invoice_id": "inv_1"}, FULL_GRANT, "unknown_tool", "lookup"),
        ("billing_invoice_get", {"invoice_id": 1}, FULL_GRANT, "invalid_input", "validate"),
        (
            "billing_invoice_get",
            {"invoice_id": "inv_1"},
            Grant(scopes=frozenset({"billing.read"})),
            "denied",
            "authorize",
        ),
    ],
    ids=["lookup", "validate", "authorize"],
)
async def test_admit_records_its_refusal_once_at_the_step_that_refused(
    registry: Registry, name: str, args: dict[str, Any], grant: Grant, code: str, stage: str
) -> None:
    with pytest.raises(ToolError) as refused:
        registry.admit(name, args, billing.context(grant=grant))

    assert refused.value.code == code
    [event] = registry.audit.events()
    assert (event.final, event.stage, event.outcome, event.code) == (True, stage, "error", code)


async def test_call_is_admit_run_and_shape_with_one_final_event(
    registry: Registry, handled: Handled
) -> None:
    result = await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, billing.context())

    assert result == {"invoice_id": "inv_1", "amount_minor": 1200}
    assert handled.calls == ["billing_invoice_get"]
    [event] = registry.audit.events()
    assert (event.stage, event.decision, event.outcome) == ("done", "allow", "ok")


# -- the write path on the same seam -----------------------------------------------------


async def test_a_write_call_returns_its_preview_as_a_value(world: World) -> None:
    args = {"invoice_id": "inv_3", "reason": "duplicate"}
    admission = world.registry.admit(TOOL, args, world.ctx(approvals=ASK))
    assert admission.effects == ()  # known once prepare computed them

    preview = await world.writes.propose(admission, world.ctx(approvals=ASK))

    assert isinstance(preview, Preview)
    assert (preview.state, preview.tool) == ("prepared", TOOL)
    assert preview.effects == ("write(billing:refund/inv_3)", "spend(1003 USD)")
    assert world.system.sends() == 0


@pytest.mark.parametrize(
    ("approvals", "state", "decision"),
    [(ASK, "prepared", "ask"), (ALLOW, "approved", "allow")],
    ids=["waits-for-a-person", "approved-by-policy"],
)
async def test_a_preview_is_audited_as_a_preview_not_an_error(
    world: World, approvals: ApprovalPolicy, state: str, decision: str
) -> None:
    preview = await world.prepare("inv_4", approvals=approvals)

    assert preview.state == state
    [event] = [e for e in world.registry.audit.events() if e.final]
    assert (event.stage, event.decision, event.outcome, event.code) == (
        "execute",
        decision,
        "preview",
        "needs_approval",
    )
    [summary] = world.registry.audit.runs()
    assert (summary.calls, summary.previews, summary.ok, summary.error) == (1, 1, 0, 0)


async def test_run_summaries_count_previews_apart_in_the_sqlite_store(tmp_path: Path) -> None:
    system = SystemOfRecord(tmp_path / "system.db")
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    registry = Registry(audit=AuditLog(SQLiteAuditStore(tmp_path / "audit.db")))
    registry.register(refund_tool(system, INVOICES))
    writes = WritePath(registry, ledger)
    try:
        await writes.preview_call(TOOL, {"invoice_id": "inv_5", "reason": "duplicate"}, context())
        with pytest.raises(ToolError):  # no such invoice: prepare refuses
            await writes.preview_call(
                TOOL, {"invoice_id": "inv_404", "reason": "duplicate"}, context()
            )
        [summary] = registry.audit.runs()
    finally:
        registry.audit.close()
        ledger.close()
        system.close()

    assert (summary.calls, summary.previews, summary.error, summary.ok) == (2, 1, 1, 0)


async def test_a_generic_call_of_a_write_still_answers_needs_approval(world: World) -> None:
    with pytest.raises(NeedsApprovalError) as answer:
        await world.registry.call(TOOL, {"invoice_id": "inv_6", "reason": "duplicate"}, world.ctx())

    preview = world.ledger.preview(str(answer.value.preview_id))
    assert preview is not None
    assert preview.state == "approved"  # ALLOW: approved by policy, not yet sent
    [event] = [e for e in world.registry.audit.events() if e.final]
    assert event.outcome == "preview"


async def test_a_write_without_a_write_path_is_denied_once_at_execute(tmp_path: Path) -> None:
    system = SystemOfRecord(tmp_path / "system.db")
    registry = Registry()
    registry.register(refund_tool(system, INVOICES))
    try:
        with pytest.raises(DeniedError):
            await registry.call(TOOL, {"invoice_id": "inv_7", "reason": "duplicate"}, context())
        assert system.sends() == 0
    finally:
        system.close()

    [event] = registry.audit.events()
    assert (event.stage, event.outcome, event.code) == ("execute", "error", "denied")


# -- one authorize for both paths --------------------------------------------------------

LIMIT_50 = Grant(
    scopes=frozenset({"billing.write"}),
    effects=(write("billing:refund/*"), read("billing:invoice/*")),
    spend_limits={"USD": 50_000},
)
RULES = ApprovalPolicy(
    (
        ApprovalRule(id="big", action="ask", effect="spend", min_amount=10_000),
        ApprovalRule(id="huge", action="deny", effect="spend", min_amount=40_000),
        ApprovalRule(id="reads", action="allow", effect="read"),
    )
)

# effects of the call, expected (decision, rule, denial reason or None)
AUTHORIZE_CASES: dict[str, tuple[tuple[Effect, ...], tuple[str, str, str | None]]] = {
    # A write tool's call that resolved only a read is judged with the writes it declares: the
    # rule on reads decides its read, and its write is left to the default (ask).
    "read inside the grant": ((read("billing:invoice/inv_1"),), ("ask", "default", None)),
    "read outside the grant": ((read("crm:customer/c_1"),), ("deny", "grant", "effect")),
    "write, small refund": (
        (write("billing:refund/inv_1"), spend(900, currency="USD")),
        ("ask", "default", None),
    ),
    "write, refund a rule asks about": (
        (write("billing:refund/inv_1"), spend(20_000, currency="USD")),
        ("ask", "big", None),
    ),
    "write, refund a rule forbids": (
        (write("billing:refund/inv_1"), spend(45_000, currency="USD")),
        ("deny", "huge", "policy"),
    ),
    "write, refund over the grant's limit": (
        (write("billing:refund/inv_1"), spend(100_000, currency="USD")),
        ("deny", "spend", "spend"),
    ),
    "write, refund in a currency without a limit": (
        (write("billing:refund/inv_1"), spend(1, currency="EUR")),
        ("deny", "spend", "spend"),
    ),
    "write outside the grant": (
        (write("billing:invoice/inv_1"),),
        ("deny", "grant", "effect"),
    ),
}


@pytest.mark.parametrize("case", list(AUTHORIZE_CASES), ids=list(AUTHORIZE_CASES))
async def test_one_authorize_judges_reads_and_prepared_writes(world: World, case: str) -> None:
    effects, (decision, rule, reason) = AUTHORIZE_CASES[case]
    spec = world.registry.get(TOOL)
    assert spec is not None
    ctx = world.ctx(grant=LIMIT_50, approvals=RULES)

    verdict = authorize(spec, effects, ctx)

    assert (verdict.decision, verdict.rule) == (decision, rule)
    assert (None if verdict.refusal is None else verdict.refusal.reason) == reason


async def test_the_write_path_refuses_a_prepared_effect_with_the_same_rule(world: World) -> None:
    # inv_39 refunds 1039 USD: under a 1,000 USD limit the grant refuses what prepare computed.
    tight = dataclasses.replace(GRANT, spend_limits={"USD": 1_000})
    with pytest.raises(DeniedError) as refused:
        await world.writes.preview_call(
            TOOL, {"invoice_id": "inv_39", "reason": "duplicate"}, world.ctx(grant=tight)
        )

    assert refused.value.reason == "spend"
    [event] = [e for e in world.registry.audit.events() if e.final]
    assert (event.stage, event.decision, event.rule, event.outcome) == (
        "execute",
        "deny",
        "spend",
        "error",
    )
    assert ALICE.user_id == event.user_id
