"""A ledger deleted or replaced under a running write path, after approval and before commit:
the commit refuses with ``ledger_replaced`` and the real billing service holds no refund.

Without the check the open connection goes on writing to a file no one can open any more:
the refund would be sent, and no ledger on disk would record its approval or receipt.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airlock.tools import (
    CallContext,
    Credential,
    LedgerReplacedError,
    SQLiteLedgerStore,
    WritePath,
)
from examples.billing.server import BillingServer, serve_billing
from examples.billing.tools import build_billing_registry
from tests.examples.billing.caller import ALICE, ASK, GRANT

pytestmark = pytest.mark.anyio


def _deleted(path: Path) -> None:
    path.unlink()


def _moved_away(path: Path) -> None:
    path.rename(path.with_name("moved.db"))


def _replaced_by_a_copy(path: Path) -> None:
    # The same rows, approval included, in another file: what is written now would be lost.
    copy = path.with_name("copy.db")
    shutil.copyfile(path, copy)
    os.replace(copy, path)


def _replaced_by_a_new_ledger(path: Path) -> None:
    fresh = path.with_name("fresh.db")
    SQLiteLedgerStore(fresh).close()
    os.replace(fresh, path)


def _replaced_by_a_link(path: Path) -> None:
    other = path.with_name("other.db")
    SQLiteLedgerStore(other).close()
    path.unlink()
    path.symlink_to(other)


CHANGES: dict[str, Callable[[Path], None]] = {
    "deleted": _deleted,
    "moved away": _moved_away,
    "replaced by a copy": _replaced_by_a_copy,
    "replaced by a new ledger": _replaced_by_a_new_ledger,
    "replaced by a symlink": _replaced_by_a_link,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def billing() -> Iterator[BillingServer]:
    with serve_billing() as server:
        yield server


def _ctx() -> CallContext:
    return CallContext(
        principal=ALICE,
        grant=GRANT,
        run_id="run_replaced",
        caller="direct",
        deadline=time.monotonic() + 30,
        approvals=ASK,
    )


@pytest.mark.parametrize("change", list(CHANGES))
async def test_a_ledger_replaced_after_approval_sends_nothing(
    billing: BillingServer, tmp_path: Path, change: str
) -> None:
    credentials = {
        t: Credential.from_value(v, name=f"BILLING_TOKEN_{t.upper()}")
        for t, v in billing.tokens.items()
    }
    registry = build_billing_registry(billing.base_url, credentials, timeout=2.0)
    path = tmp_path / "ledger.db"
    ledger = SQLiteLedgerStore(path)
    writes = WritePath(registry, ledger)
    invoice = next(
        i
        for i in billing.store.invoices("acme", after=None, limit=1000, status=None)
        if len(i["payments"]) > 1 and not i["refunds"]
    )
    before = billing.store.count("refunds")
    try:
        preview = await writes.preview_call(
            "billing_refund_create", {"invoice_id": invoice["id"], "reason": "duplicate"}, _ctx()
        )
        writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)
        CHANGES[change](path)
        with pytest.raises(LedgerReplacedError) as raised:
            await writes.commit(preview.id, preview.fingerprint, ALICE)
    finally:
        ledger.close()
    error = raised.value
    assert (error.code, error.retryable, error.path) == ("ledger_replaced", False, str(path))
    assert f"the ledger {str(path)!r} was deleted or replaced while it was open" in str(error)
    assert billing.store.count("refunds") == before
    assert billing.store.refunds("acme", invoice_id=invoice["id"]) == []
    assert billing.store.refunds("acme", key=preview.key) == []
