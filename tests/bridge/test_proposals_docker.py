"""Programs in real containers proposing writes through the bridge, judged from the host:
what a program may propose becomes a preview and nothing else; every other attempt is refused
with its code, audited, and reaches neither the ledger nor the system of record."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, ToolSession
from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, write
from airlock.tools import (
    AuditLog,
    MemoryAuditStore,
    Registry,
    SQLiteLedgerStore,
    WritePath,
)
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.write"}))
INVOICES = {
    f"inv_{n}": {"tenant_id": "acme", "amount_minor": 100 * n, "currency": "USD", "customer": "c"}
    for n in range(1, 30)
}
GRANT = Grant(
    scopes=frozenset({"billing.write"}),
    effects=(write("billing:refund/*"),),
    spend_limits={"USD": 1_000_000},
    propose=frozenset({"billing_refund_create"}),
)
ASK = ApprovalPolicy((ApprovalRule(id="ask", action="ask", tools=("billing_*",)),))
OTHER = "billing_credit_create"


class World:
    """A write path over a fake system of record, and a session per program."""

    def __init__(self, root: Path) -> None:
        self.system = SystemOfRecord(root / "system.db")
        self.ledger = SQLiteLedgerStore(root / "ledger.db", synchronous="NORMAL")
        self.audit = MemoryAuditStore()
        self.registry = Registry(audit=AuditLog(self.audit))
        self.registry.register(refund_tool(self.system, INVOICES, proposable=True))
        self.registry.register(refund_tool(self.system, INVOICES, name=OTHER))
        self.writes = WritePath(self.registry, self.ledger)

    def session(self, **overrides: Any) -> ToolSession:
        base = ToolSession(
            registry=self.registry,
            principal=ALICE,
            grant=GRANT,
            approvals=ASK,
            writes=self.writes,
            proposable=frozenset({"billing_refund_create"}),
        )
        return dataclasses.replace(base, **overrides)

    def close(self) -> None:
        self.ledger.close()
        self.system.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def test_a_program_proposes_and_the_host_prepares_each_from_the_record(
    sandbox: Sandbox, world: World
) -> None:
    tools = world.session()
    program = textwrap.dedent("""
        first = tools.propose.billing_refund_create(invoice_id="inv_3", reason="duplicate")
        more = tools.propose.billing_refund_create.batch(
            [{"invoice_id": f"inv_{n}", "reason": "duplicate"} for n in (4, 5)]
        )
        again = tools.propose.billing_refund_create(invoice_id="inv_3", reason="duplicate")
        import asyncio
        last = await asyncio.gather(
            tools.propose.billing_refund_create.aio(invoice_id="inv_6", reason="duplicate")
        )
        [first["summary"], [m["state"] for m in more], again["preview_id"] == first["preview_id"],
         last[0]["tool"]]
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    assert result.value == [
        "refund 3.00 USD on inv_3 to c",
        ["prepared", "prepared"],
        True,
        "billing_refund_create",
    ]
    proposed = tools.proposed_previews()  # in the order proposed, the same intent once
    assert [p.effect["invoice_id"] for p in proposed] == ["inv_3", "inv_4", "inv_5", "inv_6"]
    assert [p.effect["amount_minor"] for p in proposed] == [300, 400, 500, 600]  # the record's
    assert world.system.sends() == 0  # nothing reached the system of record
    assert {p.state for p in world.ledger.previews(limit=10)} == {"prepared"}


# What a program may try, and what the host answers. Each is sent as the program's own frame
# (a program in full mode can reach the connection), so the host, not the guest, decides.
FORGED: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("a name of no tool", {}, "unknown_tool",
     {"tool": "billing_refund_list", "args": {}}),
    ("a write whose contract forbids proposals", {}, "unknown_tool",
     {"tool": OTHER, "args": {"invoice_id": "inv_1", "reason": "duplicate"}}),
    ("a program of a run that takes no proposals", {"writes": None}, "unknown_tool",
     {"tool": "billing_refund_create", "args": {"invoice_id": "inv_1", "reason": "duplicate"}}),
    ("a grant without a propose list", {"grant": dataclasses.replace(GRANT, propose=frozenset())},
     "denied",
     {"tool": "billing_refund_create", "args": {"invoice_id": "inv_1", "reason": "duplicate"}}),
    ("an amount the program chose", {}, "invalid_input",
     {"tool": "billing_refund_create",
      "args": {"invoice_id": "inv_1", "reason": "duplicate", "amount_minor": 99}}),
    ("a malformed invoice id", {}, "invalid_input",
     {"tool": "billing_refund_create", "args": {"invoice_id": "../1", "reason": "duplicate"}}),
    ("a record that does not exist", {}, "not_found",
     {"tool": "billing_refund_create", "args": {"invoice_id": "inv_404", "reason": "duplicate"}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "overrides", "code", "frame"), FORGED, ids=[f[0] for f in FORGED])
def test_a_forged_proposal_frame_is_refused_by_the_host_and_changes_nothing(
    sandbox: Sandbox,
    world: World,
    name: str,
    overrides: dict[str, Any],
    code: str,
    frame: dict[str, Any],
) -> None:
    tools = world.session(**overrides)
    program = textwrap.dedent(f"""
        connection = tools._connection
        future = connection.submit({{"type": "propose", **{frame!r}}})
        try:
            connection.wait(future)
            outcome = "accepted"
        except tools.ToolError as error:
            outcome = error.code
        outcome
    """)
    result = sandbox.run(program, tools=tools, language_mode="full")
    assert result.ok, result.error
    assert result.value == code
    assert tools.proposed_previews() == []
    assert world.ledger.previews(limit=10) == []  # nothing to approve
    assert world.system.sends() == 0
    refused = [e for e in world.audit.query(run_id=tools.run_id) if e.caller == "code"]
    assert [(e.tool, e.code) for e in refused] == [(frame["tool"], code)]


def test_the_guest_refuses_a_name_it_was_not_offered_and_the_host_records_it(
    sandbox: Sandbox, world: World
) -> None:
    tools = world.session(proposable=frozenset())
    program = textwrap.dedent("""
        try:
            tools.propose.billing_refund_create(invoice_id="inv_1", reason="duplicate")
            outcome = "proposed"
        except tools.UnknownTool as error:
            outcome = error.code
        outcome
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    assert result.value == "unknown_tool"
    assert world.ledger.previews(limit=10) == []
    events = world.audit.query(run_id=tools.run_id)
    assert [(e.tool, e.code) for e in events] == [("propose.billing_refund_create", "unknown_tool")]


def test_proposals_over_the_limit_are_refused_with_the_limit_and_the_amount(
    sandbox: Sandbox, world: World
) -> None:
    tools = world.session(limits=BridgeLimits(max_proposals=3))
    program = textwrap.dedent("""
        out = tools.propose.billing_refund_create.batch(
            [{"invoice_id": f"inv_{n}", "reason": "duplicate"} for n in range(1, 6)],
            return_errors=True,
        )
        [o["state"] if isinstance(o, dict) else [o.code, o.limit, o.message] for o in out]
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    states, refused = result.value[:3], result.value[3:]
    assert states == ["prepared"] * 3
    assert [r[:2] for r in refused] == [["limit_exceeded", "proposals"]] * 2
    assert "proposed 4 writes; the limit is 3" in refused[0][2]
    assert len(world.ledger.previews(limit=10)) == 3
    assert world.system.sends() == 0


def test_a_batch_of_more_proposals_than_calls_in_flight_stays_inside_the_limit(
    sandbox: Sandbox, world: World
) -> None:
    tools = world.session(limits=BridgeLimits(max_proposals=300, max_in_flight=100))
    program = textwrap.dedent("""
        out = tools.propose.billing_refund_create.batch(
            [{"invoice_id": f"inv_{n % 29 + 1}", "reason": "duplicate"} for n in range(261)]
        )
        len(out)
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    assert result.value == 261
    assert len(tools.proposed_previews()) == 29  # each intent (invoice) once, however often
    assert world.system.sends() == 0
