"""The billing task tools against the real billing service on loopback: reads, the output
allow-list, tenant isolation, and a refund through preview, approval, commit and receipt,
including a response lost after the service committed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.inventory import (
    credential_names,
    destinations,
    load_policy_document,
    subject_inventory,
)
from airlock.policies import Principal
from airlock.tools import (
    AmbiguousWriteError,
    CallContext,
    ConflictError,
    Credential,
    DeniedError,
    InvalidInputError,
    NotFoundError,
    Preview,
    Registry,
    ResultTooLargeError,
    SQLiteLedgerStore,
    UnknownToolError,
    UpstreamError,
    WritePath,
)
from examples.billing.server import BillingServer, serve_billing
from examples.billing.tools import build_billing_registry
from tests.airlock.inventory_registry import POLICY
from tests.examples.billing.caller import ALICE, ASK, GRANT

pytestmark = pytest.mark.anyio

SENSITIVE = ("last4", "card", "billing_address", "internal_note", "email", "line1", "name")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def billing() -> Iterator[BillingServer]:
    with serve_billing() as server:
        yield server


@pytest.fixture
def registry(billing: BillingServer) -> Registry:
    billing.faults.clear()
    credentials = {
        t: Credential.from_value(v, name=f"BILLING_TOKEN_{t.upper()}")
        for t, v in billing.tokens.items()
    }
    return build_billing_registry(billing.base_url, credentials, timeout=2.0)


def ctx(
    *, principal: Principal = ALICE, caller: str = "direct", run_id: str = "run_1"
) -> CallContext:
    return CallContext(
        principal=principal,
        grant=GRANT,
        run_id=run_id,
        caller=caller,  # type: ignore[arg-type]
        deadline=time.monotonic() + 30,
        approvals=ASK,
    )


def tenant_invoices(billing: BillingServer, tenant: str) -> list[dict[str, Any]]:
    return billing.store.invoices(tenant, after=None, limit=1000, status=None)


def duplicates(billing: BillingServer, tenant: str) -> list[dict[str, Any]]:
    return [
        i for i in tenant_invoices(billing, tenant) if len(i["payments"]) > 1 and not i["refunds"]
    ]


# -- reads ---------------------------------------------------------------------------------


async def test_get_returns_the_invoice_without_sensitive_fields(
    billing: BillingServer, registry: Registry
) -> None:
    record = duplicates(billing, "acme")[0]
    result = await registry.call("billing_invoice_get", {"invoice_id": record["id"]}, ctx())
    assert result["invoice_id"] == record["id"]
    assert result["amount_minor"] == record["amount_minor"]
    assert [p["payment_id"] for p in result["payments"]] == [p["id"] for p in record["payments"]]
    text = json.dumps(result)
    for field in SENSITIVE:
        assert f'"{field}"' not in text
    assert record["payments"][0]["card"]["last4"] not in text
    assert record["customer"]["email"] not in text


async def test_list_reads_every_invoice_of_the_tenant_from_code(
    billing: BillingServer, registry: Registry
) -> None:
    result = await registry.call("billing_invoice_list", {"status": "any"}, ctx(caller="code"))
    expected = {i["id"] for i in tenant_invoices(billing, "acme")}
    assert result["count"] == len(expected) == 80
    assert {i["invoice_id"] for i in result["invoices"]} == expected
    assert not any(f'"{f}"' in json.dumps(result) for f in SENSITIVE)
    paid = await registry.call("billing_invoice_list", {"status": "paid"}, ctx(caller="code"))
    assert 0 < paid["count"] < 80
    assert {i["status"] for i in paid["invoices"]} == {"paid"}


async def test_another_tenants_invoice_is_not_found_like_a_missing_one(
    billing: BillingServer, registry: Registry
) -> None:
    theirs = tenant_invoices(billing, "globex")[0]["id"]
    with pytest.raises(NotFoundError) as other:
        await registry.call("billing_invoice_get", {"invoice_id": theirs}, ctx())
    with pytest.raises(NotFoundError) as missing:
        await registry.call("billing_invoice_get", {"invoice_id": "inv_000000000000"}, ctx())
    assert other.value.to_wire() == missing.value.to_wire()


async def test_a_tenant_without_a_credential_is_denied(billing: BillingServer) -> None:
    registry = build_billing_registry(
        billing.base_url, {"acme": Credential.from_value("tok_wrong", name="T")}
    )
    stranger = Principal(user_id="eve", tenant_id="hooli", scopes=ALICE.scopes)
    with pytest.raises(DeniedError):
        await registry.call("billing_invoice_list", {"status": "any"}, ctx(principal=stranger))
    with pytest.raises(DeniedError):  # a wrong token: the service answers 401
        await registry.call("billing_invoice_list", {"status": "any"}, ctx())


async def test_refund_is_direct_only_and_destinations_and_credentials_are_declared(
    billing: BillingServer, registry: Registry
) -> None:
    with pytest.raises(UnknownToolError):
        await registry.call(
            "billing_refund_create",
            {"invoice_id": "inv_1", "reason": "duplicate"},
            ctx(caller="code"),
        )
    names = tuple(sorted(f"BILLING_TOKEN_{t.upper()}" for t in billing.tokens))
    for spec in registry.specs():
        assert destinations(spec) == (billing.base_url,)
        assert spec.credentials == credential_names(spec) == names
    assert billing.tokens["acme"] not in repr(registry.specs())


# -- the refund write path -------------------------------------------------------------------


@pytest.fixture
def writes(registry: Registry, tmp_path: Path) -> Iterator[WritePath]:
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    yield WritePath(registry, ledger)
    ledger.close()


async def test_preview_computes_the_amount_then_approve_commit_receipt(
    billing: BillingServer, writes: WritePath
) -> None:
    record = duplicates(billing, "acme")[0]
    before = billing.store.count("refunds")
    preview = await writes.preview_call(
        "billing_refund_create", {"invoice_id": record["id"], "reason": "duplicate"}, ctx()
    )
    duplicate = record["payments"][-1]
    assert preview.state == "prepared"
    assert preview.effect["amount_minor"] == duplicate["amount_minor"]
    assert preview.effect["payment_id"] == duplicate["id"]
    assert f"spend({duplicate['amount_minor']} USD)" in preview.effects
    assert billing.store.count("refunds") == before  # nothing sent before approval
    writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
    receipt = await writes.commit(preview.id, preview.fingerprint, ALICE)
    assert receipt.data == {
        "id": receipt.data["id"],
        "status": "succeeded",
        "invoice_id": record["id"],
        "payment_id": duplicate["id"],
        "amount_minor": duplicate["amount_minor"],
        "currency": "USD",
    }
    assert billing.store.count("refunds") == before + 1
    again = await writes.commit(preview.id, preview.fingerprint, ALICE)
    assert again.replayed
    assert again.data == receipt.data
    assert billing.store.count("refunds") == before + 1


async def test_a_refund_of_an_invoice_in_euros_is_judged_shown_and_sent_in_euros(
    billing: BillingServer, writes: WritePath
) -> None:
    record = duplicates(billing, "acme")[-1]
    amount = record["payments"][-1]["amount_minor"]
    args = {"invoice_id": record["id"], "reason": "duplicate"}
    with billing.store.transaction() as conn:
        conn.execute("UPDATE invoices SET currency = 'EUR' WHERE id = ?", (record["id"],))
    try:
        with pytest.raises(DeniedError) as refused:  # the grant limits spends in dollars only
            await writes.preview_call("billing_refund_create", args, ctx(run_id="run_eur"))
        assert refused.value.reason == "spend"
        euros = replace(
            ctx(run_id="run_eur"),
            grant=replace(GRANT, spend_limits={**GRANT.spend_limits, "EUR": 1_000_000}),
        )
        preview = await writes.preview_call("billing_refund_create", args, euros)
        assert f"spend({amount} EUR)" in preview.effects
        assert f"{amount / 100:.2f} EUR" in preview.summary
        writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
        receipt = await writes.commit(preview.id, preview.fingerprint, ALICE)
        assert (receipt.data["amount_minor"], receipt.data["currency"]) == (amount, "EUR")
    finally:
        with billing.store.transaction() as conn:
            conn.execute("UPDATE invoices SET currency = 'USD' WHERE id = ?", (record["id"],))


# (invoice currency, its ISO 4217 decimals): the summary a person approves shows the amount
# in the currency's unit, never divided by 100 whatever the currency.
DECIMALS = [("JPY", 0), ("KRW", 0), ("EUR", 2), ("KWD", 3)]


@pytest.mark.parametrize(("currency", "decimals"), DECIMALS, ids=[d[0] for d in DECIMALS])
async def test_a_refunds_summary_shows_the_amount_in_its_currencys_unit(
    billing: BillingServer, writes: WritePath, currency: str, decimals: int
) -> None:
    record = duplicates(billing, "acme")[-1]
    amount = record["payments"][-1]["amount_minor"]
    whole, part = divmod(amount, 10**decimals)
    shown = f"{whole}.{part:0{decimals}d}" if decimals else str(whole)
    args = {"invoice_id": record["id"], "reason": "duplicate"}
    run = f"run_{currency.lower()}"
    grant = replace(GRANT, spend_limits={**GRANT.spend_limits, currency: 10**9})
    with billing.store.transaction() as conn:
        conn.execute("UPDATE invoices SET currency = ? WHERE id = ?", (currency, record["id"]))
    try:
        preview = await writes.preview_call(
            "billing_refund_create", args, replace(ctx(run_id=run), grant=grant)
        )
    finally:
        with billing.store.transaction() as conn:
            conn.execute("UPDATE invoices SET currency = 'USD' WHERE id = ?", (record["id"],))
    assert f"refund {shown} {currency} of payment" in preview.summary
    assert f"spend({amount} {currency})" in preview.effects


async def test_a_duplicate_refund_of_an_invoice_paid_once_is_a_conflict(
    billing: BillingServer, writes: WritePath
) -> None:
    once = next(i for i in tenant_invoices(billing, "acme") if len(i["payments"]) == 1)
    with pytest.raises(ConflictError):
        await writes.preview_call(
            "billing_refund_create", {"invoice_id": once["id"], "reason": "duplicate"}, ctx()
        )


async def test_another_tenants_invoice_cannot_be_previewed(
    billing: BillingServer, writes: WritePath
) -> None:
    theirs = duplicates(billing, "globex")[0]["id"]
    with pytest.raises(NotFoundError):
        await writes.preview_call(
            "billing_refund_create", {"invoice_id": theirs, "reason": "duplicate"}, ctx()
        )


async def test_a_key_in_flight_whose_invoice_cannot_be_read_is_left_unknown(
    billing: BillingServer, tmp_path: Path
) -> None:
    # A send times out while the service still works on it; the resend meets "key in use"
    # (409) and the invoice that would tell why cannot be read. The first send then commits:
    # the step must be unknown, for reconcile, never failed.
    credentials = {
        t: Credential.from_value(v, name=f"BILLING_TOKEN_{t.upper()}")
        for t, v in billing.tokens.items()
    }
    registry = build_billing_registry(billing.base_url, credentials, timeout=1.0)
    writes = WritePath(registry, SQLiteLedgerStore(tmp_path / "ledger.db"))
    record = duplicates(billing, "acme")[0]
    args = {"invoice_id": record["id"], "reason": "duplicate"}
    preview = await writes.preview_call("billing_refund_create", args, ctx(run_id="run_flight"))
    writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
    try:
        billing.faults.delay(3.0, phase="commit", path="/v1/refunds", method="POST")
        with pytest.raises(AmbiguousWriteError):
            await writes.commit(preview.id, preview.fingerprint, ALICE)
        billing.faults.unavailable(status=503, times=None, path="/v1/invoices")
        with pytest.raises(AmbiguousWriteError):  # was: upstream, and the step failed
            await writes.commit(preview.id, preview.fingerprint, ALICE)
        assert writes.ledger.preview(preview.id).state == "unknown"  # type: ignore[union-attr]
    finally:
        billing.faults.clear()
    deadline = time.monotonic() + 10
    while not billing.store.refunds("acme", key=preview.key) and time.monotonic() < deadline:
        await anyio.sleep(0.1)  # the first send commits at the service
    receipt = await writes.commit(preview.id, preview.fingerprint, ALICE)
    assert receipt.resolved_by == "resend"
    assert len(billing.store.refunds("acme", key=preview.key)) == 1
    writes.ledger.close()


async def lose_a_refund(
    billing: BillingServer, writes: WritePath, run_id: str
) -> tuple[dict[str, Any], Preview]:
    """Preview and approve a refund, then commit it with its answer dropped after the
    service committed it."""
    record = duplicates(billing, "acme")[0]
    preview = await writes.preview_call(
        "billing_refund_create",
        {"invoice_id": record["id"], "reason": "duplicate"},
        ctx(run_id=run_id),
    )
    writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
    billing.faults.drop_after_commit()
    with pytest.raises(AmbiguousWriteError) as lost:
        await writes.commit(preview.id, preview.fingerprint, ALICE)
    assert lost.value.idempotency_key == preview.key
    return record, preview


async def test_lost_response_retry_returns_the_same_receipt_and_one_refund(
    billing: BillingServer, writes: WritePath
) -> None:
    record, preview = await lose_a_refund(billing, writes, "run_lost")
    assert len(billing.store.refunds("acme", invoice_id=record["id"])) == 1  # it did commit
    receipt = await writes.commit(preview.id, preview.fingerprint, ALICE)  # same key, resent
    assert receipt.resolved_by == "resend"
    stored = billing.store.refunds("acme", invoice_id=record["id"])
    assert len(stored) == 1
    assert receipt.data["id"] == stored[0]["id"]
    assert billing.faults.fired["drop_after_commit"] == 1


async def test_reconcile_finds_a_lost_refund_by_its_key(
    billing: BillingServer, writes: WritePath
) -> None:
    record, _ = await lose_a_refund(billing, writes, "run_reconcile")
    [resolution] = await writes.reconcile()
    assert (resolution.outcome, resolution.how) == (
        "committed",
        "queried: the system of record holds the key",
    )
    assert len(billing.store.refunds("acme", invoice_id=record["id"])) == 1


def test_the_inventory_lists_the_service_as_each_tools_destination(
    billing: BillingServer, registry: Registry
) -> None:
    subject = replace(
        load_policy_document(POLICY).principal("*"), principal=ALICE, grant=GRANT, approvals=ASK
    )
    inventory = subject_inventory(registry, subject)
    assert {t.name: t.destinations for t in inventory.tools} == {
        "billing_invoice_get": (billing.base_url,),
        "billing_invoice_list": (billing.base_url,),
        "billing_refund_create": (billing.base_url,),
    }
    assert billing.tokens["acme"] not in inventory.model_dump_json()


async def test_an_id_that_tries_to_change_the_route_is_invalid_input(registry: Registry) -> None:
    for bad in ("../admin", "inv_1/../../refunds", "inv_1?x=1", "%2e%2e"):
        with pytest.raises(InvalidInputError):
            await registry.call("billing_invoice_get", {"invoice_id": bad}, ctx())


async def test_the_adapter_rides_out_429_and_503_and_refuses_redirects_and_oversize(
    billing: BillingServer, registry: Registry
) -> None:
    record = tenant_invoices(billing, "acme")[0]["id"]
    fired = billing.faults.fired
    before = (fired["rate_limit"], fired["unavailable"])  # the server is the module's
    billing.faults.rate_limit(retry_after=0.05)
    billing.faults.unavailable(status=503)
    result = await registry.call("billing_invoice_get", {"invoice_id": record}, ctx())
    assert result["invoice_id"] == record
    assert (fired["rate_limit"] - before[0], fired["unavailable"] - before[1]) == (1, 1)
    billing.faults.redirect("http://127.0.0.1:9/elsewhere")
    with pytest.raises(UpstreamError):
        await registry.call("billing_invoice_get", {"invoice_id": record}, ctx())
    billing.faults.oversize(3_000_000)
    with pytest.raises(ResultTooLargeError):
        await registry.call("billing_invoice_list", {"status": "any"}, ctx(caller="code"))


async def test_a_payment_refunded_under_another_key_fails_the_step(
    billing: BillingServer, writes: WritePath
) -> None:
    record = duplicates(billing, "acme")[0]
    preview = await writes.preview_call(
        "billing_refund_create",
        {"invoice_id": record["id"], "reason": "duplicate"},
        ctx(run_id="run_raced"),
    )
    writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
    payment = record["payments"][-1]
    billing.store.create_refund(
        "acme",
        invoice_id=record["id"],
        payment_id=payment["id"],
        amount_minor=payment["amount_minor"],
        currency="USD",
        reason="duplicate",
        key=None,
    )
    with pytest.raises(ConflictError):
        await writes.commit(preview.id, preview.fingerprint, ALICE)
    stored = writes.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "failed"
    assert len(billing.store.refunds("acme", invoice_id=record["id"])) == 1
