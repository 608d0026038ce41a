"""The billing example's refund asked for again after its commit, through a harness session,
against the real service: its prepare would find no payment left to refund, and the answer
is ``already_committed`` with the first receipt, nothing sent again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock import Harness
from airlock.policies import parse_policy
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import Credential, MemoryAuditStore, SQLiteLedgerStore
from examples.billing import DEMO_POLICY, BillingServer, build_billing_registry, serve_billing
from tests.examples.billing.caller import ALICE

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def billing() -> Iterator[BillingServer]:
    with serve_billing() as server:
        yield server


@pytest.fixture
def harness(billing: BillingServer, tmp_path: Path) -> Iterator[Harness]:
    credentials = {
        t: Credential.from_value(v, name=f"BILLING_TOKEN_{t.upper()}")
        for t, v in billing.tokens.items()
    }
    policy = parse_policy(DEMO_POLICY.read_text(), source=str(DEMO_POLICY))
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    yield Harness(
        build_billing_registry(billing.base_url, credentials),
        policy,
        ScriptedBackend([]),
        ledger,
        audit=MemoryAuditStore(),
    )
    ledger.close()


def body(result: Any) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(result.content)
    return answer


@pytest.mark.parametrize(("payments", "reason"), [(2, "duplicate"), (1, "requested_by_customer")])
async def test_a_committed_refund_asked_for_again_is_already_committed(
    billing: BillingServer, harness: Harness, payments: int, reason: str
) -> None:
    invoices = billing.store.invoices("acme", after=None, limit=1000, status=None)
    invoice = next(i for i in invoices if len(i["payments"]) == payments and not i["refunds"])
    args = {"invoice_id": invoice["id"], "reason": reason}
    session = harness.session(ALICE)
    asked = body(await session.call("billing_refund_create", args))
    harness.writes.approve(asked["preview_id"], approver="bob", fingerprint=asked["fingerprint"])
    committed = await session.resume(asked["preview_id"])
    assert committed.code is None
    sent = billing.store.count("refunds")

    again = await session.call("billing_refund_create", args)

    assert (again.is_error, again.code) == (False, "already_committed")
    answer = body(again)
    assert answer["preview_id"] == asked["preview_id"]
    assert answer["receipt"] == body(committed)["receipt"]
    assert billing.store.count("refunds") == sent
    finals = [
        e.code
        for e in harness.audit.events(run_id=session.run_id)
        if e.final and e.tool == "billing_refund_create"
    ]
    assert finals[0] == "needs_approval"
    assert finals[-1] == "already_committed"
