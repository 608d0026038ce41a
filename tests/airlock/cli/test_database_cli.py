"""The command line on a shared PostgreSQL database (``AIRLOCK_DATABASE_URL``): a person's
approval given with ``airlock approvals`` on one host is the one every harness sees, and
``airlock audit`` reads and verifies the one chain every process writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.harness import DATABASE_ENV, open_audit_store
from airlock.tools import AuditLog
from tests.airlock.inventory_registry import POLICY_ARG, REPO
from tests.audit_events import stored_event
from tests.postgres import fresh_schema
from tests.tools.test_write_world import ASK, World

runner = CliRunner()
# A fresh registry per command: a shared one keeps the audit store an earlier session gave it.
FRESH = "tests.airlock.inventory_registry:build_registry"


@pytest.fixture
def shared(postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    url = fresh_schema(postgres_url, "cli")
    monkeypatch.setenv(DATABASE_ENV, url)
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    world = World(tmp_path, database=url)
    yield world
    world.close()


def test_an_approval_from_the_command_line_reaches_every_harness(shared: World) -> None:
    preview = anyio.run(lambda: shared.prepare("inv_3", approvals=ASK))
    listed = runner.invoke(app, ["approvals", "list"])
    assert listed.exit_code == 0, listed.output
    assert preview.id in listed.output
    approved = runner.invoke(
        app,
        ["approvals", "approve", preview.id, "--fingerprint", preview.fingerprint],
    )
    assert approved.exit_code == 0, approved.output
    elsewhere = World(shared.root, database=shared.database)  # another harness process
    assert elsewhere.ledger.preview(preview.id).state == "approved"
    receipt = anyio.run(
        elsewhere.writes.commit, preview.id, preview.fingerprint, shared.ctx().principal
    )
    assert receipt.data
    elsewhere.close()


def test_audit_reads_and_verifies_the_shared_chain(shared: World) -> None:
    with AuditLog(open_audit_store(shared.database)) as log:
        for n in range(3):
            log.record(stored_event(run_id="run_db", call_id=f"c{n}"))
    listed = runner.invoke(app, ["audit", "list"])
    assert listed.exit_code == 0, listed.output
    assert "run_db" in listed.output
    verified = runner.invoke(app, ["audit", "verify"])
    assert verified.exit_code == 0, verified.output
    assert "3" in verified.output
    found = runner.invoke(app, ["audit", "find", "--resource", "billing:invoice/inv_*", "--json"])
    assert found.exit_code == 0, found.output
    assert found.output.count('"call_id"') == 3, found.output
    exported = runner.invoke(app, ["audit", "export"])
    assert exported.exit_code == 0, exported.output
    assert len(exported.output.strip().splitlines()) == 3


@pytest.mark.parametrize("command", [["approvals", "list"], ["audit", "verify"]])
def test_a_database_that_does_not_answer_is_one_line_and_exit_2(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATABASE_ENV, "postgresql://app:s3cret@127.0.0.1:1/x")
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path))
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error (ledger_unavailable):")
    assert "s3cret" not in result.output


@pytest.mark.parametrize(
    ("database", "code"),
    [
        ("mysql://app@db/x", "usage_error"),
        ("postgresql://app:s3cret@127.0.0.1:1/x", "ledger_unavailable"),
    ],
)
def test_serve_opens_the_database_it_is_given_before_any_sandbox(
    database: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path))
    monkeypatch.delenv(DATABASE_ENV, raising=False)
    args = ["--registry", FRESH, "--policy", str(REPO / POLICY_ARG), "--user", "alice"]
    result = runner.invoke(app, ["serve", "--mcp", *args, "--database", database])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error ({code}):")
    assert "s3cret" not in result.output
    assert not (tmp_path / "ledger.db").exists()  # the files were not used instead
