from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from airlock.cli import app, audit_app
from airlock.tools import AuditEvent, AuditLog, SQLiteAuditStore
from tests.airlock.cli.hostile_text import (
    BEYOND_C0,
    BEYOND_C0_IDS,
    HOSTILE,
    IDS,
    INVISIBLE,
    hidden,
)
from tests.airlock.inventory_registry import POLICY_ARG, REGISTRY_REF
from tests.audit_events import stored_event
from tests.conftest import require_docker

runner = CliRunner()


def _event(run: str, call: str, **kw: object) -> AuditEvent:
    return stored_event(**({"caller": "code", "duration_s": 0.002} | kw), run_id=run, call_id=call)


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


# -- JSON, programs, the chain, export and find -----------------------------------------------


def _json(args: list[str]) -> Any:
    result = runner.invoke(audit_app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_list_and_show_as_json(db: Path) -> None:
    runs = _json(["list", "--db", str(db)])["runs"]
    assert {r["run_id"] for r in runs} == {"run_a", "run_b"}
    shown = _json(["show", "run_a", "--db", str(db)])
    assert [e["record"] for e in shown["events"]] == [1, 2]
    assert shown["events"][1]["code"] == "denied"
    assert shown["events"][0]["exercised"] is True
    assert shown["events"][1]["exercised"] is False


@pytest.fixture
def programs(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "audit.db"
    text = "invoices = tools.billing_invoice_list(status='paid')['invoices']\nlen(invoices)\n"
    with AuditLog(SQLiteAuditStore(path)) as log:
        digest = log.record_program(text)
        log.record(_event("run_p", "c1", tool="execute_code", args_hash=digest, effects=()))
        log.record(
            _event(
                "run_p",
                "prev_1",
                tool="billing_refund_create",
                caller="direct",
                effects=("write(billing:refund/inv_1)", "spend(500 USD)"),
                final=False,
                approver="bob",
            )
        )
    return path, digest


def test_program_prints_the_text_by_hash_or_unique_prefix(programs: tuple[Path, str]) -> None:
    db, digest = programs
    for given in (digest, digest[:8]):
        result = runner.invoke(audit_app, ["program", given, "--db", str(db)])
        assert result.exit_code == 0, result.output
        assert result.output.startswith("invoices = tools.billing_invoice_list")
    missing = runner.invoke(audit_app, ["program", "f" * 32, "--db", str(db)])
    assert missing.exit_code == 1
    assert "not a stored program" in missing.output


def test_show_names_who_approved_a_write(programs: tuple[Path, str]) -> None:
    db, _ = programs
    [step] = [e for e in _json(["show", "run_p", "--db", str(db)])["events"] if not e["final"]]
    assert step["approver"] == "bob"
    table = runner.invoke(audit_app, ["show", "run_p", "--db", str(db)])
    assert "bob" in table.output


def test_verify_passes_then_names_the_first_record_changed(db: Path) -> None:
    ok = runner.invoke(audit_app, ["verify", "--db", str(db)])
    assert ok.exit_code == 0, ok.output
    assert "3 records" in ok.output
    conn = sqlite3.connect(db)
    conn.execute("UPDATE audit_events SET outcome = 'ok', code = NULL WHERE id = 2")
    conn.commit()
    conn.close()
    bad = runner.invoke(audit_app, ["verify", "--db", str(db)])
    assert bad.exit_code == 1
    assert "changed" in bad.output
    assert "record 2" in bad.output
    report = json.loads(runner.invoke(audit_app, ["verify", "--db", str(db), "--json"]).output)
    assert (report["ok"], report["problem"], report["record"]) == (False, "changed", 2)


# The head row given a value of another type (SQLite lets a column hold one).
HEAD_TAMPERING = [
    ("count as words", "UPDATE audit_head SET records = 'abc'"),
    ("count below zero", "UPDATE audit_head SET records = -1"),
    ("chain as text", "UPDATE audit_head SET chain = 'zz'"),
    ("chain as a number", "UPDATE audit_head SET chain = 1000000000000"),
    ("MAC as text", "UPDATE audit_head SET mac = 'zz'"),
]


@pytest.mark.parametrize(("case", "statement"), HEAD_TAMPERING, ids=[h[0] for h in HEAD_TAMPERING])
def test_verify_reports_a_head_row_that_does_not_read_back(
    db: Path, case: str, statement: str
) -> None:
    conn = sqlite3.connect(db)
    conn.execute(statement)
    conn.commit()
    conn.close()
    result = runner.invoke(audit_app, ["verify", "--db", str(db)])
    assert result.exception is None or isinstance(result.exception, SystemExit), case
    assert result.exit_code == 1, result.output
    assert "head" in result.output
    report = json.loads(runner.invoke(audit_app, ["verify", "--db", str(db), "--json"]).output)
    assert (report["ok"], report["problem"], report["record"]) == (False, "head", 3), case


def test_verify_without_the_key_says_where_it_looked(db: Path) -> None:
    (db.parent / "audit.db.key").rename(db.parent / "kept.key")
    result = runner.invoke(audit_app, ["verify", "--db", str(db)])
    assert result.exit_code == 2
    assert "error (audit_store)" in result.output
    moved = runner.invoke(
        audit_app, ["verify", "--db", str(db), "--key", str(db.parent / "kept.key")]
    )
    assert moved.exit_code == 0, moved.output


def test_export_writes_json_lines_with_record_and_chain(db: Path) -> None:
    result = runner.invoke(audit_app, ["export", "--db", str(db)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [line["record"] for line in lines] == [1, 2, 3]
    assert all(len(line["chain"]) == 64 for line in lines)
    assert lines[0]["effects"] == ["read(billing:invoice/inv_1)"]
    recent = runner.invoke(
        audit_app, ["export", "--db", str(db), "--since", "1h", "--run", "run_b"]
    )
    assert [json.loads(line)["run_id"] for line in recent.output.splitlines()] == ["run_b"]


def test_find_which_runs_touched_a_resource(db: Path) -> None:
    found = _json(["find", "--resource", "billing:invoice/inv_*", "--since", "7d", "--db", str(db)])
    # run_b's call timed out while running: it may have read, so it counts.
    assert [r["run_id"] for r in found["runs"]] == ["run_b", "run_a"]  # newest first
    run = found["runs"][1]
    assert [c["call_id"] for c in run["calls"]] == ["c1"]  # c2 was refused: it touched nothing
    assert run["calls"][0]["matched"] == ["read(billing:invoice/inv_1)"]
    attempted = _json(
        ["find", "--resource", "billing:invoice/inv_*", "--attempted", "--db", str(db)]
    )
    assert attempted["calls_found"] == 3
    table = runner.invoke(audit_app, ["find", "--resource", "billing:invoice/*", "--db", str(db)])
    assert "run_a" in table.output


def test_find_whether_code_wrote_or_reached_the_network(programs: tuple[Path, str]) -> None:
    db, _ = programs
    found = _json(["find", "--caller", "code", "--effect", "write,network", "--db", str(db)])
    assert found["runs_found"] == 0
    direct = _json(["find", "--caller", "direct", "--effect", "write", "--db", str(db)])
    [write] = direct["runs"][0]["calls"]
    assert (write["tool"], write["approver"]) == ("billing_refund_create", "bob")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--caller", "robot"], "give 'code' or 'direct'"),
        (["--effect", "delete"], "unknown"),
        (["--resource", "inv 1"], "must be 1-256 characters"),
        (["--since", "a week"], "not a duration"),
        (["--since", "4" + "0" * 300 + "d"], "not a duration"),
    ],
)
def test_find_refuses_a_malformed_question(db: Path, args: list[str], message: str) -> None:
    result = runner.invoke(audit_app, ["find", *args, "--db", str(db)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_effects_as_json(db: Path) -> None:
    base = ["effects", "--registry", REGISTRY_REF, "--policy", POLICY_ARG, "--db", str(db)]
    unused = _json([*base, "--since", "7d", "--principal", "alice"])
    [alice] = unused["subjects"]
    assert alice["principal"] == "alice"
    assert {"tool": "billing_invoice_get", "effect": None} not in alice["unused"]
    result = runner.invoke(audit_app, [*base, "run_a", "--json"])
    report = json.loads(result.output)
    assert report["run_id"] == "run_a"
    [subject] = report["subjects"]
    assert subject["exercised"][0]["tool"] == "billing_invoice_get"


def test_an_older_audit_db_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE audit_events (id INTEGER PRIMARY KEY, ts REAL NOT NULL)")
    conn.close()
    result = runner.invoke(audit_app, ["list", "--db", str(path)])
    assert result.exit_code == 2
    assert "older airlock" in " ".join(result.output.split())


def test_program_of_a_run_prints_each_with_its_record(programs: tuple[Path, str]) -> None:
    db, digest = programs
    result = runner.invoke(audit_app, ["program", "--run", "run_p", "--db", str(db)])
    assert result.exit_code == 0, result.output
    first, *text = result.output.splitlines()
    assert first == f"# record 1, call c1, program {digest}"
    assert text[0].startswith("invoices = tools.billing_invoice_list")
    assert runner.invoke(audit_app, ["program", "--run", "run_x", "--db", str(db)]).exit_code == 1
    both = runner.invoke(audit_app, ["program", digest, "--run", "run_p", "--db", str(db)])
    assert both.exit_code == 2


@pytest.mark.docker
def test_airlock_run_records_the_program_in_airlock_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_docker()
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    program = tmp_path / "p.py"
    program.write_text("sum(range(10))\n")
    ran = runner.invoke(app, ["run", str(program)])
    assert ran.exit_code == 0, ran.output
    [run] = _json(["list"])["runs"]
    [record] = _json(["show", run["run_id"]])["events"]
    assert (record["tool"], record["outcome"], record["tenant_id"]) == (
        "execute_code",
        "ok",
        "local",
    )
    shown = runner.invoke(audit_app, ["program", record["args_hash"]])
    assert shown.output == "sum(range(10))\n"
    assert runner.invoke(audit_app, ["verify"]).exit_code == 0


# -- text the model wrote: a tool name it made up, a resource in its arguments, a program ----

# A program went out as it was (no markup) and keeps its newlines.
ONE_LINE = [row for row in INVISIBLE if "\n" not in row[1]]


def _hostile_log(path: Path, text: str) -> str:
    """A run that called a tool the model named ``text`` on a record it named ``text``, and
    ran a program that holds ``text``; the program's hash."""
    with AuditLog(SQLiteAuditStore(path)) as log:
        digest = log.record_program(f"note = 1  # {text}\n")
        effects = ("read(notes:note/n1)", f"read(notes:note/{text})")
        log.record(_event("run_h", "c1", tool=text, effects=effects))
        log.record(_event("run_h", "c2", tool="execute_code", args_hash=digest, effects=()))
    return digest


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_show_and_find_print_the_models_text_literally(
    tmp_path: Path, case: str, text: str, shown: str
) -> None:
    db = str(tmp_path / "audit.db")
    _hostile_log(tmp_path / "audit.db", text)
    table = runner.invoke(audit_app, ["show", "run_h", "--db", db])
    assert table.exit_code == 0, table.output
    assert f" {shown} " in table.output  # the tool, whole, on one line
    assert f"read(notes:note/{shown})" in table.output
    found = runner.invoke(audit_app, ["find", "--resource", "notes:note/*", "--db", db])
    assert found.exit_code == 0, found.output
    assert f" {shown} " in found.output
    assert not hidden(table.output + found.output)


@pytest.mark.parametrize(("case", "text", "shown"), BEYOND_C0, ids=BEYOND_C0_IDS)
def test_json_and_export_escape_what_hides_and_keep_the_data(
    tmp_path: Path, case: str, text: str, shown: str
) -> None:
    db = str(tmp_path / "audit.db")
    _hostile_log(tmp_path / "audit.db", text)
    shown_json = runner.invoke(audit_app, ["show", "run_h", "--db", db, "--json"])
    exported = runner.invoke(audit_app, ["export", "--db", db])
    assert not hidden(shown_json.output + exported.output)
    assert json.loads(shown_json.output)["events"][0]["tool"] == text
    assert json.loads(exported.output.splitlines()[0])["tool"] == text


@pytest.mark.parametrize(("case", "text", "shown"), ONE_LINE, ids=[r[0] for r in ONE_LINE])
def test_a_program_is_printed_with_its_lines_and_nothing_hidden(
    tmp_path: Path, case: str, text: str, shown: str
) -> None:
    db = str(tmp_path / "audit.db")
    digest = _hostile_log(tmp_path / "audit.db", text)
    printed = runner.invoke(audit_app, ["program", digest, "--db", db])
    assert printed.exit_code == 0, printed.output
    assert printed.output == f"note = 1  # {shown}\n"
    of_run = runner.invoke(audit_app, ["program", "--run", "run_h", "--db", db])
    assert of_run.output.endswith(f"note = 1  # {shown}\n")


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_verify_reports_a_tampered_program_row_literally(
    db: Path, case: str, text: str, shown: str
) -> None:
    # A program row's hash is not chained: whoever edited the file chose it, and verify's
    # report quotes it.
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO audit_programs VALUES (?, ?)", (f"0 {text}", b"x"))
    conn.commit()
    conn.close()
    result = runner.invoke(audit_app, ["verify", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("program: record 3: ")
    assert f"program 0 {shown} does not match its hash" in result.output
    assert not hidden(result.output)


# (case, a stored time no date can hold, how it is shown)
UNDATED = [
    ("far future", 1e300, "1e+300"),
    ("far past", -1e300, "-1e+300"),
    ("infinity", float("inf"), "inf"),
    ("past year 9999", 1e12, "1000000000000.0"),
    ("before year 1", -1e12, "-1000000000000.0"),
]


@pytest.mark.parametrize(("case", "ts", "shown"), UNDATED, ids=[r[0] for r in UNDATED])
def test_a_time_no_date_can_hold_is_shown_as_its_number(
    db: Path, case: str, ts: float, shown: str
) -> None:
    with AuditLog(SQLiteAuditStore(db)) as log:
        log.record(_event("run_t", "c1", ts=ts, duration_s=0.0))  # a run starts as it ends
    for args in (["list"], ["show", "run_t"], ["find", "--effect", "read"]):
        result = runner.invoke(audit_app, [*args, "--db", str(db)])
        assert result.exit_code == 0, result.output
        assert f" {shown} " in result.output, args
        if args[0] != "show":  # the other runs are listed too, with their dates
            assert "run_a" in result.output


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_show_titles_the_run_with_its_id_literally(
    tmp_path: Path, case: str, text: str, shown: str
) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(SQLiteAuditStore(path)) as log:
        log.record(_event(text, "c1"))
    result = runner.invoke(audit_app, ["show", text, "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert f"run {shown}" in result.output
    assert not hidden(result.output)
