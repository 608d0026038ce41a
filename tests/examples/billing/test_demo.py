"""The demo end to end: the billing service on loopback, the Docker sandbox, the ledger,
the audit log and the approvals command line, as ``make demo`` runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.harness import ModelResult
from airlock.tools import SQLiteAuditStore
from examples.billing import BillingServer, serve_billing
from examples.billing.story import DemoReport, run_story
from tests.conftest import IMAGE, require_docker

pytestmark = pytest.mark.docker


class Recorder:
    """Keeps everything the story showed, to check what a person would have seen."""

    columns = 72  # (narrower than the command line's own default)

    def __init__(self) -> None:
        self.shown: list[str] = []

    def message(self, message: dict[str, Any]) -> None:
        self.shown.append(json.dumps(message))

    def step(self, title: str, text: str) -> None:
        self.shown.append(f"{title}: {text}")

    def attempt(self, label: str, result: ModelResult) -> None:
        self.shown.append(f"{label}: {result.content}")


@pytest.fixture(scope="module")
def played(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DemoReport, BillingServer, Recorder]]:
    require_docker()
    recorder = Recorder()
    with serve_billing() as billing:
        home = tmp_path_factory.mktemp("home")
        yield run_story(home, image=IMAGE, narrator=recorder, billing=billing), billing, recorder


REPO = Path(__file__).resolve().parents[3]


def test_the_program_finds_every_duplicate_payment_of_the_tenant(
    played: tuple[DemoReport, BillingServer, Recorder],
) -> None:
    report, billing, _ = played
    invoices = billing.store.invoices("acme", after=None, limit=1000, status=None)
    paid_twice = sorted(i["id"] for i in invoices if len(i["payments"]) > 1)
    assert report.scanned == len(invoices) == 80
    assert sorted(d["invoice_id"] for d in report.duplicates) == paid_twice
    assert len(paid_twice) == 8
    # One list plus one read per suspect, all through the bridge, as the audit log says.
    assert report.code_calls == 1 + len(paid_twice)


def test_the_program_puts_far_fewer_bytes_into_the_context(
    played: tuple[DemoReport, BillingServer, Recorder],
) -> None:
    report, _, _ = played
    assert report.code_path.calls == 1
    assert report.direct_path.calls == report.code_calls
    assert report.saved_percent >= 90.0


def test_the_program_proposes_the_refunds_as_one_batch_the_model_sees_in_short(
    played: tuple[DemoReport, BillingServer, Recorder],
) -> None:
    report, _, _ = played
    proposal = report.batch.proposal
    assert proposal["count"] == len(report.duplicates) == 8
    assert proposal["batch_id"] == report.batch.batch_id
    assert proposal["total"] == {"USD": sum(d["amount_minor"] for d in report.duplicates)}
    assert sorted(proposal["preview_ids"]) == sorted(r.preview_id for r in report.refunds)
    assert set(proposal) == {
        "status",
        "batch_id",
        "fingerprint",
        "count",
        "total",
        "preview_ids",
        "expires_in_min",
        "message",
    }  # fmt: skip  (a short note: never the previews themselves)


def test_one_approval_commits_each_refund_once_and_the_service_holds_exactly_eight(
    played: tuple[DemoReport, BillingServer, Recorder],
) -> None:
    report, billing, _ = played
    assert billing.store.count("refunds") == 8
    assert billing.faults.fired["drop_after_commit"] == 1
    lost = [r for r in report.refunds if r.attempts[0] == "unknown"]
    assert len(lost) == 1
    assert lost[0].attempts == ("unknown", "committed", "committed")
    assert all(r.attempts == ("committed",) * 3 for r in report.refunds if r not in lost)
    first, retry, again = report.batch.commits
    assert json.loads(first.content)["counts"] == {"committed": 7, "unknown": 1}
    assert retry.content == again.content  # asked again: the same answer, nothing sent
    invoices = {
        i["id"]: i for i in billing.store.invoices("acme", after=None, limit=1000, status=None)
    }
    for step in report.refunds:
        [stored] = billing.store.refunds("acme", invoice_id=step.invoice_id)
        receipt = step.receipt["receipt"]
        assert receipt["id"] == stored["id"]
        # The amount came from the record: the duplicate payment, not a program's figure.
        invoice = invoices[step.invoice_id]
        assert receipt["amount_minor"] == invoice["payments"][-1]["amount_minor"]
        assert stored["payment_id"] == invoice["payments"][-1]["id"]


def test_the_approval_a_person_typed_is_shown_as_wide_as_the_screen_allows(
    played: tuple[DemoReport, BillingServer, Recorder],
) -> None:
    """The command line's output fits the step it is shown in: a table made for a wider
    terminal was folded again by the panel, each of its rows broken in two."""
    _, _, recorder = played
    [shown] = [s for s in recorder.shown if s.startswith("a person approves the whole batch:")]
    _command, *output = shown.splitlines()
    assert any("approved" in line for line in output)
    assert max(len(line) for line in output) <= Recorder.columns


def test_code_only_read_and_the_audit_log_holds_the_run(
    played: tuple[DemoReport, BillingServer, Recorder],
) -> None:
    report, _, _ = played
    by_tool = {e.tool: e for e in report.effects}
    assert set(by_tool) == {"billing_invoice_list", "billing_invoice_get", "billing_refund_create"}
    for found in report.effects:
        assert found.outside == ()
        if "code" in found.callers:
            assert all(e.startswith("read(") for e in found.effects), found
    assert by_tool["billing_refund_create"].callers == ("direct",)  # the harness commits
    store = SQLiteAuditStore(report.audit_db)
    try:
        events = store.query(run_id=report.run_id)
    finally:
        store.close()
    proposals = [e for e in events if e.tool == "billing_refund_create" and e.caller == "code"]
    # The program proposed, and only proposed: each is a stored preview, nothing it sent.
    assert [(e.outcome, e.code) for e in proposals] == [("preview", "needs_approval")] * 8
    assert report.ledger_db.exists()


def test_no_credential_reaches_the_conversation_or_the_screen(
    played: tuple[DemoReport, BillingServer, Recorder],
) -> None:
    _, billing, recorder = played
    shown = "\n".join(recorder.shown)
    assert "needs_approval" in shown
    for token in billing.tokens.values():
        assert token not in shown
    assert "last4" not in shown
    assert "internal_note" not in shown


def test_the_demo_runs_end_to_end_from_the_command_line(tmp_path: Path) -> None:
    require_docker()
    done = subprocess.run(
        [sys.executable, "-m", "examples.billing.demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AIRLOCK_HOME": str(tmp_path), "AIRLOCK_IMAGE": IMAGE, "COLUMNS": "120"},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "fewer bytes" in done.stdout
    assert "answer lost → receipt → receipt" in done.stdout
    [run_dir] = (tmp_path / "demo").iterdir()
    assert (run_dir / "audit.db").exists()
    assert (run_dir / "ledger.db").exists()
