"""``python -m examples.billing --db EXISTING`` serves the existing file as it is: its records,
refunds and idempotency keys, with fresh tokens for its tenants (the old ones stop working)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from examples.billing.server import BillingServer, serve_billing

REPO = Path(__file__).resolve().parents[3]


def _refund(billing: BillingServer, key: str) -> httpx.Response:
    invoice = next(
        i
        for i in billing.store.invoices("acme", after=None, limit=1000, status="paid")
        if not i["refunds"]
    )
    payment = invoice["payments"][-1]
    body = {
        "invoice_id": invoice["id"],
        "payment_id": payment["id"],
        "amount_minor": payment["amount_minor"],
        "currency": "USD",
        "reason": "duplicate",
    }
    return httpx.post(
        f"{billing.base_url}/v1/refunds",
        json=body,
        headers={"Authorization": f"Bearer {billing.tokens['acme']}", "Idempotency-Key": key},
        timeout=5,
    )


def _invoices(base_url: str, token: str) -> httpx.Response:
    return httpx.get(
        f"{base_url}/v1/invoices", headers={"Authorization": f"Bearer {token}"}, timeout=5
    )


def test_an_existing_file_is_served_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "billing.db"
    with serve_billing(db_path=path) as first:
        refunded = _refund(first, "key-1")
        assert refunded.status_code in (200, 201), refunded.text
        before: dict[str, Any] = {
            "invoices": first.store.invoices("acme", after=None, limit=1000, status=None),
            "refunds": first.store.count("refunds"),
            "keys": first.store.count("idempotency_keys"),
        }
        old_token = first.tokens["acme"]
    with serve_billing(db_path=path, seed=99) as again:
        assert (
            again.store.invoices("acme", after=None, limit=1000, status=None)
            == (before["invoices"])
        )
        assert again.store.count("refunds") == before["refunds"] == 1
        assert again.store.count("idempotency_keys") == before["keys"]
        assert sorted(again.tokens) == again.store.tenant_ids()
        assert _invoices(again.base_url, again.tokens["acme"]).status_code == 200
        assert _invoices(again.base_url, old_token).status_code == 401
        # The key is remembered: reused for another refund, it is refused.
        reused = _refund(again, "key-1")
        assert reused.status_code == 422, reused.text
        assert "idempotency_key_reused" in reused.text
        assert again.store.count("refunds") == 1


def test_the_module_serves_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "billing.db"
    for _ in range(2):
        with subprocess.Popen(
            [sys.executable, "-m", "examples.billing", "--db", str(path), "--port", "0"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            try:
                assert line, proc.stderr.read() if proc.stderr else ""
                started = json.loads(line)
                answer = _invoices(started["base_url"], started["tokens"]["acme"])
                assert answer.status_code == 200
            finally:
                proc.terminate()
                proc.wait(timeout=10)
