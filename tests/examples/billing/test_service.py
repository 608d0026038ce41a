"""The billing service over real HTTP on loopback: authentication, tenant scoping, the
Idempotency-Key rules, one refund per payment, and every fault switch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from examples.billing.seed import TENANTS, seed_store
from examples.billing.server import BillingServer, serve_billing
from examples.billing.store import BillingStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server() -> Iterator[BillingServer]:
    with serve_billing() as running:
        yield running


@pytest.fixture
def billing(server: BillingServer) -> BillingServer:
    server.faults.clear()
    return server


def auth(billing: BillingServer, tenant: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {billing.tokens[tenant]}"}


def client(billing: BillingServer, tenant: str = "acme") -> httpx.Client:
    return httpx.Client(base_url=billing.base_url, headers=auth(billing, tenant), timeout=5)


_taken: set[str] = set()


def refund_body(billing: BillingServer, tenant: str = "acme") -> dict[str, Any]:
    """A refund of a payment no other test uses."""
    for invoice in billing.store.invoices(tenant, after=None, limit=1000, status="paid"):
        payment = invoice["payments"][-1]
        if not invoice["refunds"] and payment["id"] not in _taken:
            _taken.add(payment["id"])
            return {
                "invoice_id": invoice["id"],
                "payment_id": payment["id"],
                "amount_minor": payment["amount_minor"],
                "currency": "USD",
                "reason": "duplicate",
            }
    raise AssertionError("no unrefunded payment left")


# -- seed and reads ----------------------------------------------------------------------


def test_the_seed_is_deterministic_and_has_duplicate_payments() -> None:
    def snapshot() -> list[tuple[str, int, int]]:
        store = BillingStore()
        seed_store(store, {t: f"t{t}" for t in TENANTS})
        rows = [
            (i["id"], i["amount_minor"], len(i["payments"]))
            for t in TENANTS
            for i in store.invoices(t, after=None, limit=1000, status=None)
        ]
        store.close()
        return rows

    first = snapshot()
    assert first == snapshot()
    assert len(first) >= 300
    twice = [row for row in first if row[2] > 1]
    assert 4 * len(TENANTS) <= len(twice) < len(first) // 5


def test_every_route_needs_a_valid_token(billing: BillingServer) -> None:
    invoice = billing.store.invoices("acme", after=None, limit=1, status=None)[0]["id"]
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
        with httpx.Client(base_url=billing.base_url, headers=headers) as anon:
            assert anon.get("/v1/invoices").status_code == 401
            assert anon.get(f"/v1/invoices/{invoice}").status_code == 401
            assert anon.post("/v1/refunds", json={}).status_code == 401


def test_invoices_are_scoped_to_the_tokens_tenant(billing: BillingServer) -> None:
    theirs = billing.store.invoices("globex", after=None, limit=1, status=None)[0]["id"]
    with client(billing) as acme, client(billing, "globex") as globex:
        assert acme.get(f"/v1/invoices/{theirs}").status_code == 404
        answer = globex.get(f"/v1/invoices/{theirs}")
        assert answer.status_code == 200
        body = answer.json()
        # the service answers more than a tool may pass on
        assert {"internal_note", "customer"} <= set(body)
        assert "billing_address" in body["customer"]


def test_the_list_paginates_by_cursor(billing: BillingServer) -> None:
    seen: list[str] = []
    cursor: str | None = None
    with client(billing) as acme:
        while True:
            params = {"limit": "30"} | ({"cursor": cursor} if cursor else {})
            page = acme.get("/v1/invoices", params=params).json()
            seen += [i["id"] for i in page["data"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert acme.get("/v1/invoices", params={"limit": "0"}).status_code == 400
    assert len(seen) == len(set(seen)) == 80


# -- refunds and Idempotency-Key ---------------------------------------------------------


def test_same_key_same_body_replays_the_stored_answer(billing: BillingServer) -> None:
    body = refund_body(billing)
    with client(billing) as acme:
        first = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-replay"})
        second = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-replay"})
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert second.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert len(billing.store.refunds("acme", invoice_id=body["invoice_id"])) == 1


def test_same_key_with_another_body_is_422(billing: BillingServer) -> None:
    body = refund_body(billing)
    with client(billing) as acme:
        assert acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-x"}).is_success
        other = {**body, "reason": "fraudulent"}
        answer = acme.post("/v1/refunds", json=other, headers={"Idempotency-Key": "k-x"})
    assert answer.status_code == 422
    assert answer.json()["error"]["type"] == "idempotency_key_reused"


def test_keys_are_per_tenant(billing: BillingServer) -> None:
    ours, theirs = refund_body(billing), refund_body(billing, "globex")
    with client(billing) as acme, client(billing, "globex") as globex:
        assert acme.post("/v1/refunds", json=ours, headers={"Idempotency-Key": "k-t"}).is_success
        answer = globex.post("/v1/refunds", json=theirs, headers={"Idempotency-Key": "k-t"})
    assert answer.status_code == 200
    assert answer.json()["invoice_id"] == theirs["invoice_id"]


@pytest.mark.anyio
async def test_a_request_while_the_first_with_its_key_is_in_flight_is_409(
    billing: BillingServer,
) -> None:
    body = refund_body(billing)
    billing.faults.delay(0.4, phase="commit")
    answers: list[httpx.Response] = []
    headers = {**auth(billing), "Idempotency-Key": "k-flight"}
    async with httpx.AsyncClient(base_url=billing.base_url, headers=headers) as http:

        async def send(after: float) -> None:
            await anyio.sleep(after)
            answers.append(await http.post("/v1/refunds", json=body))

        async with anyio.create_task_group() as group:
            group.start_soon(send, 0.0)
            group.start_soon(send, 0.15)
    assert [a.status_code for a in answers] == [409, 200]
    assert answers[0].json()["error"]["type"] == "idempotency_key_in_use"
    async with httpx.AsyncClient(base_url=billing.base_url, headers=headers) as http:
        replay = await http.post("/v1/refunds", json=body)
    assert replay.json() == answers[1].json()


def test_one_refund_per_payment_even_with_another_key(billing: BillingServer) -> None:
    body = refund_body(billing)
    with client(billing) as acme:
        assert acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-1"}).is_success
        again = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-2"})
        unkeyed = acme.post("/v1/refunds", json=body)
        replay = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-2"})
    assert again.status_code == unkeyed.status_code == replay.status_code == 409
    assert again.json()["error"]["type"] == "already_refunded"
    assert replay.headers["idempotent-replayed"] == "true"  # the refusal is stored too
    assert len(billing.store.refunds("acme", invoice_id=body["invoice_id"])) == 1


def test_refund_bodies_are_validated(billing: BillingServer) -> None:
    body = refund_body(billing)
    with client(billing) as acme:
        too_much = {**body, "amount_minor": body["amount_minor"] + 1}
        assert acme.post("/v1/refunds", json=too_much).status_code == 422
        assert acme.post("/v1/refunds", json={**body, "extra": 1}).status_code == 422
        assert acme.post("/v1/refunds", content=b"{not json").status_code == 400
        long_key = {"Idempotency-Key": "k" * 300}
        assert acme.post("/v1/refunds", json=body, headers=long_key).status_code == 400
        theirs = refund_body(billing, "globex")
        assert acme.post("/v1/refunds", json=theirs).status_code == 404


def test_refunds_can_be_found_by_key(billing: BillingServer) -> None:
    body = refund_body(billing)
    with client(billing) as acme:
        made = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-find"}).json()
        found = acme.get("/v1/refunds", params={"idempotency_key": "k-find"}).json()
        none = acme.get("/v1/refunds", params={"idempotency_key": "k-none"}).json()
    assert found["data"] == [made]
    assert none["data"] == []


# -- fault switches ------------------------------------------------------------------------


def test_delay(billing: BillingServer) -> None:
    billing.faults.delay(0.2)
    with client(billing) as acme:
        started = time.monotonic()
        assert acme.get("/v1/invoices", params={"limit": "1"}).is_success
        assert time.monotonic() - started >= 0.2
        started = time.monotonic()
        assert acme.get("/v1/invoices", params={"limit": "1"}).is_success
        assert time.monotonic() - started < 0.2  # it fired once
    assert billing.faults.fired["delay"] >= 1


def test_drop_after_commit_cuts_the_response_but_keeps_the_refund(billing: BillingServer) -> None:
    body = refund_body(billing)
    billing.faults.drop_after_commit()
    with client(billing) as acme:
        with pytest.raises(httpx.RemoteProtocolError):
            acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-drop"})
        assert len(billing.store.refunds("acme", invoice_id=body["invoice_id"])) == 1
        replay = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": "k-drop"})
    assert replay.status_code == 200
    assert replay.headers["idempotent-replayed"] == "true"
    assert len(billing.store.refunds("acme", invoice_id=body["invoice_id"])) == 1


def test_rate_limit_answers_429_with_retry_after(billing: BillingServer) -> None:
    billing.faults.rate_limit(retry_after=2, times=2)
    with client(billing) as acme:
        answers = [acme.get("/v1/invoices").status_code for _ in range(3)]
        limited = billing.faults.fired["rate_limit"]
    assert answers == [429, 429, 200]
    assert limited >= 2
    billing.faults.rate_limit(retry_after=1.5)
    with client(billing) as acme:
        assert acme.get("/v1/invoices").headers["retry-after"] == "1.5"


@pytest.mark.parametrize("status", [502, 503, 504])
def test_unavailable(billing: BillingServer, status: int) -> None:
    body = refund_body(billing)
    billing.faults.unavailable(status=status, path="/v1/refunds")
    with client(billing) as acme:
        assert acme.get("/v1/invoices", params={"limit": "1"}).is_success  # other paths
        failed = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": f"k-{status}"})
        assert failed.status_code == status
        assert not billing.store.refunds("acme", invoice_id=body["invoice_id"])  # nothing ran
        retried = acme.post("/v1/refunds", json=body, headers={"Idempotency-Key": f"k-{status}"})
    assert retried.status_code == 200


def test_redirect(billing: BillingServer) -> None:
    billing.faults.redirect("http://127.0.0.1:9/steal", status=307)
    with client(billing) as acme:
        answer = acme.get("/v1/invoices")
    assert answer.status_code == 307
    assert answer.headers["location"] == "http://127.0.0.1:9/steal"


def test_oversize(billing: BillingServer) -> None:
    billing.faults.oversize(300_000)
    with client(billing) as acme:
        big = acme.get("/v1/invoices", params={"limit": "1"})
        small = acme.get("/v1/invoices", params={"limit": "1"})
    assert len(big.content) > 300_000 > len(small.content)


def test_faults_can_be_armed_over_http_with_the_admin_token(billing: BillingServer) -> None:
    with httpx.Client(base_url=billing.base_url) as http:
        refused = http.post("/_admin/faults", json={"kind": "unavailable"})
        admin = {"Authorization": f"Bearer {billing.admin_token}"}
        armed = http.post("/_admin/faults", json={"kind": "unavailable"}, headers=admin)
        bad = http.post("/_admin/faults", json={"kind": "meteor"}, headers=admin)
        hit = http.get("/v1/invoices", headers=auth(billing))
        http.post("/_admin/faults", json={"kind": "unavailable", "times": None}, headers=admin)
        assert http.delete("/_admin/faults", headers=admin).is_success
        after = http.get("/v1/invoices", headers=auth(billing))
    assert (refused.status_code, armed.status_code, bad.status_code) == (401, 200, 422)
    assert (hit.status_code, after.status_code) == (503, 200)
