"""The static check of programs that propose writes: proposals are listed apart from calls,
resolved against the write tools the contract makes proposable, never guessed."""

from __future__ import annotations

import pytest

from airlock.inventory import check_program
from airlock.policies import Principal
from examples.billing import build_billing_registry

REGISTRY = build_billing_registry("http://127.0.0.1:9", {})
ALICE = Principal(
    user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read", "billing.write"})
)
READER = Principal(user_id="eve", tenant_id="acme", scopes=frozenset({"billing.read"}))


def test_a_proposal_is_listed_apart_from_the_calls() -> None:
    report = check_program(
        'found = tools.billing_invoice_get(invoice_id="inv_1")\n'
        'tools.propose.billing_refund_create(invoice_id="inv_1", reason="duplicate")\n'
        "tools.propose.billing_refund_create.batch([])\n",
        REGISTRY,
        ALICE,
    )
    assert report.verdict == "complete"
    assert report.tools == ("billing_invoice_get",)
    assert report.proposals == ("billing_refund_create",)
    assert all(not e.startswith(("write(", "spend(")) for e in report.effects)


CASES: list[tuple[str, str, Principal, str, str]] = [
    ("a read proposed", 'tools.propose.billing_invoice_get(invoice_id="i")', ALICE,
     "unknown_tools", "billing_invoice_get"),
    ("a name of no tool", "tools.propose.billing_thing_make()", ALICE, "unknown_tools",
     "billing_thing_make"),
    ("a write the principal cannot see", 'tools.propose.billing_refund_create(invoice_id="i")',
     READER, "unknown_tools", "billing_refund_create"),
    ("the namespace taken as a value", "p = tools.propose\np.billing_refund_create()", ALICE,
     "unresolved", ""),
    ("a private attribute of it", "tools.propose._tools", ALICE, "unresolved", ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "program", "principal", "verdict", "unknown"), CASES, ids=[c[0] for c in CASES]
)
def test_what_cannot_be_proposed_is_reported(
    name: str, program: str, principal: Principal, verdict: str, unknown: str
) -> None:
    report = check_program(program, REGISTRY, principal)
    assert report.verdict == verdict
    assert report.proposals == ()
    assert [u.name for u in report.unknown] == ([unknown] if unknown else [])
