"""The command line: ``airlock inventory``, ``program-effects`` and ``audit effects``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.tools import AuditEvent, AuditLog, SQLiteAuditStore
from tests.airlock.inventory_registry import POLICY_ARG, REGISTRY_REF, REPO

runner = CliRunner()
BASE = ["inventory", "--registry", REGISTRY_REF, "--policy", POLICY_ARG]


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    monkeypatch.chdir(REPO)


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("no_colon_here", "expected one ':'"),
        ("tests.airlock.not_a_module:registry", "cannot import"),
        ("tests.airlock.inventory_registry:missing", "has no 'missing'"),
        ("tests.airlock.inventory_registry:POLICY", "not a tools.Registry"),
    ],
)
def test_a_bad_registry_reference_is_a_usage_error(ref: str, reason: str) -> None:
    result = runner.invoke(app, ["inventory", "--registry", ref, "--policy", POLICY_ARG])
    assert result.exit_code == 2
    assert "error (registry_ref)" in result.output
    assert reason in result.output


def test_a_registry_factory_is_called() -> None:
    ref = "tests.airlock.inventory_registry:build_registry"
    result = runner.invoke(app, ["inventory", "--registry", ref, "--policy", POLICY_ARG])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--principal", "alice", "--all"], "not both"),
        (["--format", "yaml"], "--format 'yaml'"),
        (["--role", "nobody"], "error (unknown_subject)"),
        (["--principal", "_bad id"], "not a valid id"),
        (["--lock", "a.lock", "--check", "b.lock"], "not both"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, [*BASE, *args])
    assert result.exit_code == 2
    assert message in result.output


def test_a_bad_policy_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text('version = 1\n[roles.r]\neffects = ["fly(away)"]\n')
    result = runner.invoke(app, ["inventory", "--registry", REGISTRY_REF, "--policy", str(bad)])
    assert result.exit_code == 2
    assert "error (policy_file)" in result.output


def test_one_principal_in_markdown() -> None:
    result = runner.invoke(app, [*BASE, "--principal", "alice", "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert "## principal alice (tenant acme)" in result.output
    assert "## principal bob" not in result.output
    assert "| `billing_refund_create` |" in result.output


def test_an_unnamed_principal_gets_what_star_grants() -> None:
    result = runner.invoke(app, [*BASE, "--principal", "zoe", "--format", "json"])
    subject = json.loads(result.output)["subjects"][0]
    assert subject["name"] == "zoe"
    assert "billing_refund_create" not in {t["name"] for t in subject["tools"]}


# -- program-effects -----------------------------------------------------------------------


def _program(tmp_path: Path, source: str) -> list[str]:
    path = tmp_path / "program.py"
    path.write_text(source)
    return ["program-effects", str(path), "--registry", REGISTRY_REF, "--policy", POLICY_ARG]


def test_program_effects_of_a_resolved_program(tmp_path: Path) -> None:
    args = _program(tmp_path, "get = tools.billing_invoice_get\n[get(invoice_id=i) for i in ids]\n")
    result = runner.invoke(app, [*args, "--principal", "alice", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["tools"] == ["billing_invoice_get"]
    assert report["complete"] is True


def test_program_effects_fail_on_unresolved_calls(tmp_path: Path) -> None:
    result = runner.invoke(app, _program(tmp_path, "getattr(tools, n)()\n"))
    assert result.exit_code == 1
    assert "unresolved at line 1" in result.output
    assert "may reach every effect callable from code" in result.output


def test_program_effects_report_a_syntax_error(tmp_path: Path) -> None:
    result = runner.invoke(app, _program(tmp_path, "def (:\n"))
    assert result.exit_code == 2
    assert "error (program_syntax)" in result.output


# -- audit effects ---------------------------------------------------------------------------


def _event(run: str, call: str, tool: str, effects: tuple[str, ...], **kw: object) -> AuditEvent:
    fields: dict[str, object] = {
        "ts": time.time(),
        "run_id": run,
        "call_id": call,
        "caller": "code",
        "tool": tool,
        "user_id": "alice",
        "tenant_id": "acme",
        "args_hash": "0" * 32,
        "stage": "done",
        "decision": "allow",
        "rule": "default",
        "outcome": "ok",
        "code": None,
        "duration_s": 0.001,
        "effects": effects,
    } | kw
    return AuditEvent(**fields)  # type: ignore[arg-type]


GET_EFFECTS = ("read(billing:invoice/inv_1)", "network(api.billing.example)")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    with AuditLog(SQLiteAuditStore(path)) as log:
        log.record(_event("run_ok", "c1", "billing_invoice_get", GET_EFFECTS))
        log.record(
            _event(
                "run_ok",
                "c2",
                "billing_invoice_list",
                ("read(billing:invoice/*)",),
                stage="authorize",
                decision="deny",
                outcome="error",
                code="denied",
            )
        )
        log.record(_event("run_odd", "c1", "billing_refund_create", ("spend(500 USD)",)))
        log.record(
            _event(
                "run_old",
                "c1",
                "web_page_fetch",
                ("read(web:page/x)",),
                ts=time.time() - 30 * 86400,
            )
        )
    return path


def _audit(db: Path, *args: str) -> list[str]:
    return [
        "audit",
        "effects",
        *args,
        "--registry",
        REGISTRY_REF,
        "--policy",
        POLICY_ARG,
        "--db",
        str(db),
    ]


def test_audit_effects_of_a_run(db: Path) -> None:
    result = runner.invoke(app, _audit(db, "run_ok"))
    assert result.exit_code == 0, result.output
    assert "read(billing:invoice/inv_1)" in result.output
    assert "billing_invoice_list" in result.output  # refused, so reachable but not called
    assert "reachable but not called in this run" in result.output


def test_audit_effects_flag_a_call_outside_the_inventory(db: Path) -> None:
    # A refund from code: the inventory never lets alice's programs reach it.
    result = runner.invoke(app, _audit(db, "run_odd"))
    assert result.exit_code == 1
    assert "tool not reachable from code" in result.output


def test_audit_effects_since_lists_what_was_never_used(db: Path) -> None:
    result = runner.invoke(app, _audit(db, "--since", "7d", "--principal", "alice"))
    assert result.exit_code == 0, result.output
    assert "web_page_fetch" in result.output  # used 30 days ago only
    assert "billing_refund_create" in result.output
    lines = [line for line in result.output.splitlines() if "billing_invoice_get" in line]
    assert not lines  # used in full


@pytest.mark.parametrize("args", [["run_ok", "--since", "7d"], [], ["--since", "seven days"]])
def test_audit_effects_needs_a_run_or_a_period(db: Path, args: list[str]) -> None:
    result = runner.invoke(app, _audit(db, *args))
    assert result.exit_code == 2
    assert "error (usage_error)" in result.output
