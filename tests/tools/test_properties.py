"""Whatever the arguments and principals, no call outside the grant reaches a handler, and
every call leaves exactly one final audit event."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Effect,
    Grant,
    Principal,
    network,
    read,
    spend,
    write,
)
from airlock.tools import CallContext, Registry, ToolError

SCOPES = ["billing.read", "billing.write", "orders.read"]
Segment = Annotated[str, Field(max_length=40)]


class Out(BaseModel):
    ok: bool


Reached = list[tuple[str, CallContext, dict[str, Any]]]


def build(reached: Reached) -> Registry:
    registry = Registry()

    @registry.tool(
        effects=[read("billing:invoice/{invoice_id}")],
        scope="billing.read",
        callers={"direct", "code"},
    )
    async def billing_invoice_get(ctx: CallContext, invoice_id: Segment) -> Out:
        """Get an invoice. Use it to read one. It does not return payments."""
        reached.append(("billing_invoice_get", ctx, {"invoice_id": invoice_id}))
        return Out(ok=True)

    @registry.tool(
        effects=[read("orders:order/{order_id}"), network("api.orders.example")],
        scope="orders.read",
        callers={"direct", "code"},
    )
    def orders_order_get(ctx: CallContext, order_id: Segment) -> Out:
        """Get an order. Use it to read one. It does not return items."""
        reached.append(("orders_order_get", ctx, {"order_id": order_id}))
        return Out(ok=True)

    @registry.tool(
        effects=[write("billing:refund/{invoice_id}"), spend("{amount}")],
        scope="billing.write",
    )
    async def billing_refund_create(
        ctx: CallContext, invoice_id: Segment, amount: Annotated[int, Field(ge=0)]
    ) -> Out:
        """Refund an invoice. Use it when asked. It does not email anyone."""
        reached.append(("billing_refund_create", ctx, {"invoice_id": invoice_id, "amount": amount}))
        return Out(ok=True)

    return registry


ids = st.one_of(
    st.sampled_from(["inv_1", "inv_2", "ord_1"]),
    st.sampled_from(["inv_1", "inv_2", "ord_1"]),
    st.sampled_from(["../admin", "a/b", "*", "**", "x" * 41, "", "inv_1\n"]),
    st.text(max_size=12),
)
values = st.one_of(ids, st.integers(-5, 10**6), st.none(), st.booleans(), st.floats())
random_arguments = st.dictionaries(
    st.sampled_from(["invoice_id", "order_id", "amount", "tenant_id", "principal"]),
    values,
    max_size=4,
)
amounts = st.one_of(st.integers(0, 2000), values)
# Mostly well-formed calls, so that many reach the grant check and some a handler.
arguments = st.one_of(
    st.fixed_dictionaries({"invoice_id": ids}),
    st.fixed_dictionaries({"order_id": ids}),
    st.fixed_dictionaries({"invoice_id": ids, "amount": amounts}),
    random_arguments,
)
grant_effects = st.lists(
    st.sampled_from(
        [
            read("billing:invoice/*"),
            read("billing:invoice/inv_1"),
            read("billing:**"),
            read("orders:order/*"),
            network("api.orders.example"),
            write("billing:refund/*"),
        ]
    ),
    max_size=4,
)
grants = st.builds(
    Grant,
    scopes=st.frozensets(st.sampled_from(SCOPES)),
    effects=grant_effects.map(tuple),
    spend_limits=st.dictionaries(st.just("USD"), st.integers(0, 1000), max_size=1),
)
principals = st.builds(
    Principal,
    user_id=st.sampled_from(["alice", "bob"]),
    tenant_id=st.sampled_from(["acme", "globex"]),
    scopes=st.frozensets(st.sampled_from(SCOPES)),
)
tool_names = st.sampled_from(
    ["billing_invoice_get", "orders_order_get", "billing_refund_create", "billing_nope_get"]
)
ALLOW_ALL = ApprovalPolicy((ApprovalRule(id="allow-all", action="allow"),))
approvals = st.sampled_from([ApprovalPolicy(), ALLOW_ALL])
calls = st.lists(
    st.tuples(tool_names, arguments, st.sampled_from(["direct", "code"])), min_size=1, max_size=5
)


well_formed = st.one_of(
    st.fixed_dictionaries({"invoice_id": st.sampled_from(["inv_1", "inv_2"])}),
    st.fixed_dictionaries({"order_id": st.sampled_from(["ord_1", "ord_2"])}),
    st.fixed_dictionaries(
        {"invoice_id": st.sampled_from(["inv_1", "inv_2"]), "amount": st.integers(0, 1000)}
    ),
)
EVERY_SCOPE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset(SCOPES))
Batch = list[tuple[str, dict[str, Any], str]]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(principal=principals, grant=grants, policy=approvals, batch=calls)
def test_no_call_outside_the_grant_reaches_a_handler(
    principal: Principal, grant: Grant, policy: ApprovalPolicy, batch: Batch
) -> None:
    _run_and_check(principal, grant, policy, batch)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    grant=grants.map(
        lambda g: Grant(scopes=frozenset(SCOPES), effects=g.effects, spend_limits=g.spend_limits)
    ),
    policy=approvals,
    batch=st.lists(
        st.tuples(tool_names, well_formed, st.sampled_from(["direct", "code"])),
        min_size=1,
        max_size=5,
    ),
)
def test_only_effects_inside_the_grant_reach_a_handler(
    grant: Grant, policy: ApprovalPolicy, batch: Batch
) -> None:
    _run_and_check(EVERY_SCOPE, grant, policy, batch)


def _run_and_check(
    principal: Principal, grant: Grant, policy: ApprovalPolicy, batch: Batch
) -> None:
    reached: Reached = []
    registry = build(reached)

    async def run() -> None:
        for i, (name, args, caller) in enumerate(batch):
            ctx = CallContext(
                principal=principal,
                grant=grant,
                run_id="run",
                call_id=f"call{i}",
                caller=caller,  # type: ignore[arg-type]
                approvals=policy,
            )
            with contextlib.suppress(ToolError):
                await registry.call(name, args, ctx)

    anyio.run(run)

    for name, ctx, received in reached:
        spec = registry.get(name)
        assert spec is not None
        assert ctx.caller in spec.callers
        assert principal.has_scope(spec.scope)
        assert grant.allows_scope(spec.scope)
        effects: list[Effect] = [e.resolve(received) for e in spec.effects]
        assert grant.uncovered(effects) is None, (name, received, grant)
        if policy is not ALLOW_ALL:  # by default, side effects need approval first
            assert not any(e.is_side_effect for e in effects)

    events = registry.audit.events(run_id="run")
    final = [e for e in events if e.final]
    assert sorted(e.call_id for e in final) == [f"call{i}" for i in range(len(batch))]
    ok = [e for e in final if e.outcome == "ok"]
    assert len(ok) == len(reached)
