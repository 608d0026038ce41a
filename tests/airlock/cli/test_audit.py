from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import audit_app
from airlock.tools import AuditEvent, AuditLog, SQLiteAuditStore

runner = CliRunner()


def _event(run: str, call: str, **kw: object) -> AuditEvent:
    fields: dict[str, object] = {
        "ts": time.time(),
        "run_id": run,
        "call_id": call,
        "caller": "code",
        "tool": "billing_invoice_get",
        "user_id": "alice",
        "tenant_id": "acme",
        "args_hash": "0" * 32,
        "stage": "done",
        "decision": "allow",
        "rule": "default",
        "outcome": "ok",
        "code": None,
        "duration_s": 0.002,
        "effects": ("read(billing:invoice/inv_1)",),
    } | kw
    return AuditEvent(**fields)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    with AuditLog(SQLiteAuditStore(path)) as log:
        log.record(_event("run_a", "c1"))
        log.record(
            _event(
                "run_a",
                "c2",
                stage="authorize",
                decision="deny",
                rule="grant",
                outcome="error",
                code="denied",
            )
        )
        log.record(_event("run_b", "c1", outcome="unknown", code="timeout", stage="execute"))
    return path


def test_list_shows_runs_with_counts(db: Path) -> None:
    result = runner.invoke(audit_app, ["list", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "run_a" in result.output
    assert "run_b" in result.output
    assert "alice" in result.output


def test_list_counts_a_preview_apart_from_errors(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(SQLiteAuditStore(path)) as log:
        log.record(_event("run_w", "c1", stage="execute", decision="ask", outcome="preview"))
    result = runner.invoke(audit_app, ["list", "--db", str(path)])

    assert result.exit_code == 0, result.output
    [row] = [line for line in result.output.splitlines() if "run_w" in line]
    cells = [c.strip() for c in row.strip("│| ").split("│")]
    # run, started, calls, ok, preview, error, unknown, users
    assert cells[2:7] == ["1", "0", "1", "0", "0"], cells


def test_show_prints_every_call_of_a_run(db: Path) -> None:
    result = runner.invoke(audit_app, ["show", "run_a", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "denied" in result.output
    assert "read(billing:invoice/inv_1)" in result.output
    assert "run_b" not in result.output


def test_show_filters_by_tool(db: Path) -> None:
    result = runner.invoke(audit_app, ["show", "run_a", "--db", str(db), "--tool", "other_x_y"])
    assert result.exit_code == 1


def test_show_unknown_run_fails(db: Path) -> None:
    result = runner.invoke(audit_app, ["show", "nope", "--db", str(db)])
    assert result.exit_code == 1
    assert "no audit events" in result.output


def test_default_path_comes_from_settings(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path))
    result = runner.invoke(audit_app, ["list"])
    assert result.exit_code == 0, result.output
    assert "run_a" in result.output


def test_a_missing_database_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "absent.db"
    result = runner.invoke(audit_app, ["list", "--db", str(missing)])
    assert result.exit_code == 1
    assert "no audit log" in result.output
    assert not missing.exists()
