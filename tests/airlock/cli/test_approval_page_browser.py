"""The approval page end to end in headless Chromium (Debian's, driven by Playwright),
against the real billing service: open the printed link, approve a write and a batch, see
the receipts, and the service holds exactly one refund per approved item."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.cli._approval_page import LOOPBACK, ApprovalPage
from airlock.cli._approval_server import page_server
from airlock.cli._approver import Approver
from airlock.policies import load_policy
from airlock.tools import CallContext, Credential, Preview, SQLiteLedgerStore, WritePath
from examples.billing import DEMO_POLICY
from examples.billing.server import BillingServer, serve_billing
from examples.billing.tools import build_billing_registry
from tests.examples.billing.caller import ALICE, ASK, GRANT
from tests.ports import free_port

TOKEN = "browser-test-token-0123456789"


def require_browser() -> str:
    """Debian's chromium, and Playwright to drive it: under CI=true their absence fails the
    test (``scripts/ensure-browser.sh`` installs chromium; the dev extra, Playwright)."""
    chromium = shutil.which("chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ModuleNotFoundError:
        chromium = None
    if chromium is not None:
        return chromium
    problem = "no chromium or no playwright (scripts/ensure-browser.sh, pip install -e '.[dev]')"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI=true: the browser test must run, not skip)")
    pytest.skip(problem)


class PageServer:
    """The approval page on a free loopback port, in a thread."""

    def __init__(self, page: ApprovalPage) -> None:
        self.port = free_port()
        self.server = page_server(page.app(), host=LOOPBACK, port=self.port)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> PageServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the approval page did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)


@pytest.fixture
def billing() -> Iterator[BillingServer]:
    with serve_billing() as server:
        yield server


def _prepare(writes: WritePath, invoice_id: str, run_id: str) -> Preview:
    ctx = CallContext(principal=ALICE, grant=GRANT, run_id=run_id, caller="direct", approvals=ASK)
    args: dict[str, Any] = {"invoice_id": invoice_id, "reason": "duplicate"}
    return anyio.run(writes.preview_call, "billing_refund_create", args, ctx)


def test_approve_a_write_and_a_batch_in_chromium(tmp_path: Path, billing: BillingServer) -> None:
    chromium = require_browser()
    from playwright.sync_api import sync_playwright

    credentials = {
        t: Credential.from_value(v, name=f"BILLING_TOKEN_{t.upper()}")
        for t, v in billing.tokens.items()
    }
    registry = build_billing_registry(billing.base_url, credentials, timeout=5.0)
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    writes = WritePath(registry, ledger)
    paid_twice = [
        i["id"]
        for i in billing.store.invoices("acme", after=None, limit=1000, status=None)
        if len(i["payments"]) > 1 and not i["refunds"]
    ]
    assert len(paid_twice) >= 6
    single = _prepare(writes, paid_twice[0], "run_single")
    items = [_prepare(writes, invoice, "run_batch") for invoice in paid_twice[1:4]]
    batch = writes.store_batch(items)
    refused = writes.store_batch([_prepare(writes, i, "run_refused") for i in paid_twice[4:6]])
    before = billing.store.count("refunds")

    person = Approver("carol", ledger, writes=writes, policy=load_policy(DEMO_POLICY))
    page = ApprovalPage(person, ledger="ledger.db", token=TOKEN)
    try:
        with PageServer(page) as server, sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=chromium, headless=True)
            try:
                tab = browser.new_page()
                tab.goto(page.link(server.port))
                assert tab.url == f"http://127.0.0.1:{server.port}{page.base}"  # no token in it
                card = tab.locator(f"#{single.id}")
                assert single.fingerprint in card.inner_text()
                assert "alice@acme" in card.inner_text()
                batch_card = tab.locator(f"#{batch.id}").inner_text()
                assert batch.fingerprint in batch_card
                assert all(p.fingerprint in batch_card for p in items)  # each item's facts
                assert "amounts (minor units)" in batch_card
                tab.screenshot(path=str(tmp_path / "waiting.png"), full_page=True)

                card.locator("button.approve").click()
                tab.wait_for_selector("#notice")
                assert "committed once, receipt" in tab.locator("#notice").inner_text()

                tab.locator(f"#{batch.id} button.approve").click()
                tab.wait_for_selector("#notice")
                notice = tab.locator("#notice").inner_text()
                assert f"approved batch {batch.id} as carol: 3 committed" in notice, notice

                deny = tab.locator(f"#{refused.id} form[action$='deny-batch']")
                deny.locator("input[name=reason]").fill("not these customers")
                deny.locator("button.deny").click()
                tab.wait_for_selector("#notice")
                notice = tab.locator("#notice").inner_text()
                assert f"denied 2 waiting item(s) of batch {refused.id}" in notice, notice

                receipts = tab.locator("#receipts tr.receipt")
                shown = {receipts.nth(n).get_attribute("data-preview") for n in range(4)}
                assert shown == {single.id, *(p.id for p in items)}
                assert tab.locator("#nothing").count() == 1  # nothing waits any more
                tab.screenshot(path=str(tmp_path / "approvals.png"))
            finally:
                browser.close()
    finally:
        ledger.close()

    assert billing.store.count("refunds") == before + 4
    for invoice in paid_twice[:4]:
        assert len(billing.store.refunds("acme", invoice_id=invoice)) == 1
    for invoice in paid_twice[4:6]:
        assert billing.store.refunds("acme", invoice_id=invoice) == []
