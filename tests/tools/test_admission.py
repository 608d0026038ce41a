"""Every admission step, as a table of calls and the codes they must answer."""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, Field

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, read
from airlock.tools import (
    CallContext,
    MemoryAuditStore,
    Observations,
    Registry,
    Secret,
    ToolError,
    UnknownToolError,
)
from tests.tools.billing import ALICE, FULL_GRANT, Handled, build_registry, context

ADMIN = ALICE.model_copy(update={"scopes": ALICE.scopes | {"billing.admin"}})
READ_ONLY_ORDERS = Grant(
    scopes=frozenset({"billing.read", "orders.read"}), effects=(read("orders:order/*"),)
)
NO_BILLING_SCOPE = Grant(scopes=frozenset({"orders.read"}), effects=FULL_GRANT.effects)
DENY_EXPORTS = ApprovalPolicy(
    (ApprovalRule(id="no-exports", action="deny", tools=("billing_export_*",)),)
)
DENY_SECRETS = ApprovalPolicy(
    (
        ApprovalRule(
            id="no-secrets", action="deny", effect="read", targets=("billing:invoice/secret_*",)
        ),
    )
)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


# name, arguments, context options, expected code (None: success), handler reached
CASES: list[tuple[str, str, Any, dict[str, Any], str | None, bool]] = [
    ("ok", "billing_invoice_get", {"invoice_id": "inv_1"}, {}, None, True),
    (
        "ok from code",
        "billing_invoice_get",
        {"invoice_id": "inv_1"},
        {"caller": "code"},
        None,
        True,
    ),
    ("missing tool", "billing_invoice_gone", {"invoice_id": "inv_1"}, {}, "unknown_tool", False),
    ("hidden tool", "billing_invoice_audit", {"invoice_id": "inv_1"}, {}, "unknown_tool", False),
    (
        "direct-only tool from code",
        "billing_invoice_void",
        {"invoice_id": "inv_1"},
        {"caller": "code"},
        "unknown_tool",
        False,
    ),
    (
        "extra field",
        "billing_invoice_get",
        {"invoice_id": "inv_1", "tenant_id": "globex"},
        {},
        "invalid_input",
        False,
    ),
    (
        "principal in arguments",
        "billing_invoice_get",
        {"invoice_id": "inv_1", "principal": {"user_id": "root"}},
        {},
        "invalid_input",
        False,
    ),
    ("wrong type", "billing_invoice_get", {"invoice_id": 1}, {}, "invalid_input", False),
    ("string for an integer", "billing_export_make", {"size": "5"}, {}, "invalid_input", False),
    ("missing field", "billing_invoice_get", {}, {}, "invalid_input", False),
    (
        "path traversal id",
        "billing_invoice_get",
        {"invoice_id": "../admin"},
        {},
        "invalid_input",
        False,
    ),
    (
        "10 MB string",
        "billing_invoice_get",
        {"invoice_id": "inv_" + "a" * 10_000_000},
        {},
        "invalid_input",
        False,
    ),
    ("not an object", "billing_invoice_get", ["inv_1"], {}, "invalid_input", False),
    (
        "100,000 unknown names",
        "billing_invoice_get",
        {"invoice_id": "inv_1"} | {f"k{n}": 0 for n in range(100_000)},
        {},
        "invalid_input",
        False,
    ),
    (
        "nested 1,000 deep",
        "billing_invoice_get",
        {"invoice_id": _nested(1_000)},
        {},
        "invalid_input",
        False,
    ),
    (
        "nested 100,000 deep",
        "billing_invoice_get",
        {"invoice_id": _nested(100_000)},
        {},
        "invalid_input",
        False,
    ),
    (
        "names that do not sort",
        "billing_invoice_get",
        {1: 2, "invoice_id": "inv_1"},
        {},
        "invalid_input",
        False,
    ),
    ("NaN", "billing_export_make", {"size": math.nan}, {}, "invalid_input", False),
    (
        "record of another tenant",
        "billing_invoice_get",
        {"invoice_id": "inv_9"},
        {},
        "not_found",
        True,
    ),
    ("missing record", "billing_invoice_get", {"invoice_id": "inv_404"}, {}, "not_found", True),
    (
        "effect outside the grant",
        "billing_invoice_get",
        {"invoice_id": "inv_1"},
        {"grant": READ_ONLY_ORDERS},
        "denied",
        False,
    ),
    (
        "scope outside the grant",
        "billing_invoice_get",
        {"invoice_id": "inv_1"},
        {"grant": NO_BILLING_SCOPE},
        "denied",
        False,
    ),
    (
        "approval rule denies",
        "billing_export_make",
        {"size": 1},
        {"approvals": DENY_EXPORTS},
        "denied",
        False,
    ),
    (
        "deny on targets a pattern may reach",  # billing_invoice_audit reads billing:invoice/*
        "billing_invoice_audit",
        {"invoice_id": "inv_1"},
        {"principal": ADMIN, "approvals": DENY_SECRETS},
        "denied",
        False,
    ),
    (
        "write needs approval",
        "billing_invoice_void",
        {"invoice_id": "inv_1"},
        {},
        "needs_approval",
        False,
    ),
    ("missing evidence", "orders_order_inspect", {"order_id": "ord_1"}, {}, "conflict", False),
    ("handler raises", "billing_broken_get", {"n": 1}, {}, "upstream", True),
    ("handler times out", "billing_slow_wait", {"seconds": 5}, {}, "timeout", True),
    (
        "run budget used up",
        "billing_invoice_get",
        {"invoice_id": "inv_1"},
        {"budget": -1.0},
        "timeout",
        False,
    ),
    ("oversized result", "billing_export_make", {"size": 5_000}, {}, "result_too_large", True),
]


def _ctx(options: dict[str, Any]) -> CallContext:
    options = dict(options)
    approvals = options.pop("approvals", None)
    ctx = context(**options)
    if approvals is not None:
        ctx = CallContext(
            principal=ctx.principal,
            grant=ctx.grant,
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            caller=ctx.caller,
            deadline=ctx.deadline,
            approvals=approvals,
        )
    return ctx


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "args", "options", "code", "reached"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_admission_table(
    registry: Registry,
    handled: Handled,
    tool: str,
    args: Any,
    options: dict[str, Any],
    code: str | None,
    reached: bool,
) -> None:
    ctx = _ctx(options)
    if code is None:
        result = await registry.call(tool, args, ctx)
        assert isinstance(result, dict)
    else:
        with pytest.raises(ToolError) as info:
            await registry.call(tool, args, ctx)
        assert info.value.code == code
        wire = info.value.to_wire()
        assert wire["code"] == code
        assert "detail" not in wire
        assert len(str(wire)) < 2_000  # never echoes a 10 MB argument
    assert (handled.calls != []) is reached
    events = registry.audit.events(run_id=ctx.run_id)
    assert len(events) == 1
    event = events[0]
    assert (event.call_id, event.tool, event.code) == (ctx.call_id, tool, code)
    assert event.outcome == ("ok" if code is None else info.value.outcome)


@pytest.mark.anyio
async def test_missing_hidden_and_wrong_caller_answer_identically(registry: Registry) -> None:
    name = "billing_invoice_void"
    answers = []
    for reg, ctx in [
        (Registry(), context()),  # missing
        (registry, context(principal=ALICE.model_copy(update={"scopes": frozenset()}))),
        (registry, context(caller="code")),  # wrong caller
    ]:
        with pytest.raises(UnknownToolError) as info:
            await reg.call(name, {"invoice_id": "inv_1"}, ctx)
        answers.append((info.value.to_wire(), str(info.value), info.value.outcome))
    assert answers[0] == answers[1] == answers[2]


@pytest.mark.anyio
async def test_another_tenants_record_reads_exactly_like_a_missing_one(
    registry: Registry,
) -> None:
    wires = []
    for invoice_id in ("inv_9", "inv_404"):
        with pytest.raises(ToolError) as info:
            await registry.call("billing_invoice_get", {"invoice_id": invoice_id}, context())
        wires.append(info.value.to_wire())
    assert wires[0] == wires[1]
    details = [e.detail for e in registry.audit.events()]
    assert details == ["record belongs to tenant 'globex'", "no invoice inv_404"]


@pytest.mark.anyio
async def test_result_is_projected_onto_the_output_allow_list(registry: Registry) -> None:
    result = await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, context())
    assert result == {"invoice_id": "inv_1", "amount_minor": 1200}


@pytest.mark.anyio
async def test_sync_handler_returning_a_dict_is_projected(registry: Registry) -> None:
    ctx = context(principal=ADMIN)
    result = await registry.call("billing_invoice_audit", {"invoice_id": "inv_9"}, ctx)
    assert result == {"invoice_id": "inv_9", "amount_minor": 7}


@pytest.mark.anyio
async def test_invalid_input_names_the_field_and_what_to_do(registry: Registry) -> None:
    args = {"invoice_id": "inv_1", "tenant_id": "globex"}
    with pytest.raises(ToolError) as info:
        await registry.call("billing_invoice_get", args, context())
    assert info.value.to_wire()["issues"] == [
        {"field": "tenant_id", "reason": "is not a parameter of this tool; remove it"}
    ]


@pytest.mark.anyio
async def test_many_unknown_names_are_counted_and_the_first_named(registry: Registry) -> None:
    args = {"invoice_id": "inv_1"} | {f"k{n}": 0 for n in range(100_000)}
    with pytest.raises(ToolError) as info:
        await registry.call("billing_invoice_get", args, context())
    wire = info.value.to_wire()
    assert "100001 given; this tool takes at most 1" in wire["message"]
    assert [issue["field"] for issue in wire["issues"]] == [f"k{n}" for n in range(20)]


@pytest.mark.anyio
@pytest.mark.parametrize(("wrong", "listed"), [(3, 3), (10_000, 1)])
async def test_many_problems_inside_one_argument_are_counted(wrong: int, listed: int) -> None:
    registry = Registry()

    @registry.tool(effects=[read("ledger:line/*")], scope="ledger.read")
    async def ledger_lines_sum(amounts: Annotated[list[int], Field(max_length=100_000)]) -> Token:
        """Add up amounts. Use it to total lines. It does not store them."""
        return Token(ok=True)

    principal = Principal(user_id="u", tenant_id="t", scopes=frozenset({"ledger.read"}))
    grant = Grant(scopes=frozenset({"ledger.read"}), effects=(read("ledger:**"),))
    ctx = CallContext(principal=principal, grant=grant, run_id="r", caller="direct")
    with pytest.raises(ToolError) as info:
        await registry.call("ledger_lines_sum", {"amounts": ["1"] * wrong}, ctx)
    issues = info.value.to_wire()["issues"]
    assert len(issues) == listed
    if wrong > listed:
        assert issues[0]["reason"].startswith(f"{wrong} problems")
    else:
        assert [i["field"] for i in issues] == [f"amounts.{n}" for n in range(wrong)]


@pytest.mark.anyio
async def test_unexpected_exception_is_unknown_and_hides_its_detail(registry: Registry) -> None:
    with pytest.raises(ToolError) as info:
        await registry.call("billing_broken_get", {"n": 1}, context())
    assert info.value.outcome == "unknown"
    assert "password" not in str(info.value.to_wire())
    assert isinstance(info.value.__cause__, RuntimeError)
    (event,) = registry.audit.events()
    assert event.detail is not None
    assert "password" in event.detail  # the operator sees it


@pytest.mark.anyio
async def test_deadline_is_the_smaller_of_tool_timeout_and_run_budget(
    registry: Registry,
) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        await registry.call("billing_slow_wait", {"seconds": 5}, context(budget=0.02))
    assert time.monotonic() - started < 0.5
    assert info.value.to_wire()["seconds"] == pytest.approx(0.02, abs=0.01)


@pytest.mark.anyio
async def test_preconditions_need_evidence_for_the_same_record(registry: Registry) -> None:
    observations = Observations()
    with pytest.raises(ToolError, match="orders_status_get"):
        await registry.call("orders_order_inspect", {"order_id": "ord_1"}, context())
    await registry.call(
        "orders_status_get", {"order_id": "ord_1"}, context(observations=observations)
    )
    ctx = context(observations=observations)
    result = await registry.call("orders_order_inspect", {"order_id": "ord_1"}, ctx)
    assert result["status"] == "inspected"
    with pytest.raises(ToolError) as info:
        await registry.call("orders_order_inspect", {"order_id": "ord_2"}, ctx)
    assert info.value.code == "conflict"


@pytest.mark.anyio
async def test_failed_calls_are_no_evidence(registry: Registry) -> None:
    observations = Observations()
    ctx = context(observations=observations, grant=Grant(scopes=frozenset({"orders.read"})))
    with pytest.raises(ToolError):
        await registry.call("orders_status_get", {"order_id": "ord_1"}, ctx)
    assert not observations.has("orders_status_get", {"order_id": "ord_1"})


@pytest.mark.anyio
async def test_cancellation_from_outside_is_recorded_as_unknown(registry: Registry) -> None:
    with anyio.move_on_after(0.01) as scope:
        await registry.call("billing_slow_wait", {"seconds": 1}, context(budget=10))
    assert scope.cancelled_caught  # the caller's cancellation propagated
    (event,) = registry.audit.events()
    assert (event.stage, event.outcome, event.code) == ("execute", "unknown", None)
    assert event.detail is not None


@pytest.mark.anyio
async def test_audit_event_records_the_admission_trail(registry: Registry) -> None:
    ctx = context(caller="code", call_id="c9")
    await registry.call("billing_invoice_get", {"invoice_id": "inv_1"}, ctx)
    (event,) = registry.audit.events()
    assert (event.run_id, event.call_id, event.caller) == ("run_1", "c9", "code")
    assert (event.user_id, event.tenant_id) == ("alice", "acme")
    assert (event.stage, event.decision, event.rule, event.outcome) == (
        "done",
        "allow",
        "default",
        "ok",
    )
    assert event.effects == ("read(billing:invoice/inv_1)",)
    assert len(event.args_hash) == 32
    assert event.duration_s > 0


class Token(BaseModel):
    ok: bool


@pytest.mark.anyio
async def test_secret_fields_do_not_enter_the_argument_hash() -> None:
    registry = Registry()

    @registry.tool(effects=[read("vault:item/{item}")], scope="vault.read")
    async def vault_item_open(
        item: Annotated[str, Field(max_length=20)],
        passphrase: Annotated[str, Secret(), Field(max_length=200)],
    ) -> Token:
        """Open a vault item. Use it when asked to. It does not return the item."""
        return Token(ok=True)

    principal = Principal(user_id="u", tenant_id="t", scopes=frozenset({"vault.read"}))
    grant = Grant(scopes=frozenset({"vault.read"}), effects=(read("vault:**"),))
    for secret in ("hunter2", "correct horse"):
        ctx = CallContext(principal=principal, grant=grant, run_id="r", caller="direct")
        await registry.call("vault_item_open", {"item": "a", "passphrase": secret}, ctx)
    hashes = {e.args_hash for e in registry.audit.events()}
    assert len(hashes) == 1


def test_the_table_covers_every_admission_step() -> None:
    codes = {case[4] for case in CASES}
    assert codes >= {
        None,
        "unknown_tool",
        "invalid_input",
        "denied",
        "not_found",
        "conflict",
        "needs_approval",
        "upstream",
        "timeout",
        "result_too_large",
    }


def test_memory_store_is_the_default() -> None:
    assert isinstance(build_registry(Handled()).audit.store, MemoryAuditStore)
