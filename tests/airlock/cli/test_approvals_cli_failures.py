"""``airlock approvals`` where it used to fail badly: a ledger named by a ``sqlite:///``
URL that is not there, the ledger the page says it approves on, an approver id every
decision would refuse, and a time no calendar holds."""

from __future__ import annotations

import getpass
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.harness import DATABASE_ENV
from airlock.tools import InvalidInputError, NotFoundError, SQLiteLedgerStore, deny_preview
from tests.tools.test_write_world import ASK, World

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(DATABASE_ENV, raising=False)
    monkeypatch.delenv("AIRLOCK_BUSY_TIMEOUT", raising=False)
    return tmp_path / "home"


COMMANDS: list[list[str]] = [
    ["approvals", "list"],
    ["approvals", "list", "--all"],
    ["approvals", "show", "pv_0"],
    ["approvals", "show", "pb_0"],
    ["approvals", "deny", "pv_0", "--reason", "no", "--as", "bob"],
    ["approvals", "approve", "pv_0", "--fingerprint", "0" * 64, "--as", "bob"],
    ["receipts", "list"],
    ["reconcile"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_sqlite_url_to_no_ledger_is_said_and_nothing_is_made(
    command: list[str], home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "shared"
    monkeypatch.setenv(DATABASE_ENV, f"sqlite://{folder}")
    result = runner.invoke(app, command)
    assert result.exit_code == 1, result.output
    assert f"no ledger at {folder / 'ledger.db'}" in result.output.replace("\n", "")
    assert not folder.exists()
    assert not home.exists()


def test_a_sqlite_url_names_the_ledger_the_commands_read(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shared").mkdir()
    world = World(tmp_path / "shared")
    try:
        waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    finally:
        world.close()
    monkeypatch.setenv(DATABASE_ENV, f"sqlite://{tmp_path / 'shared'}")
    listed = runner.invoke(app, ["approvals", "list"])
    assert listed.exit_code == 0, listed.output
    assert waiting.id in listed.output


def test_a_sqlite_url_keeps_the_busy_timeout(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "shared"
    SQLiteLedgerStore(folder / "ledger.db").close()
    monkeypatch.setenv(DATABASE_ENV, f"sqlite://{folder}")
    monkeypatch.setenv("AIRLOCK_BUSY_TIMEOUT", "0.2")
    held = sqlite3.connect(folder / "ledger.db", isolation_level=None)
    held.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        result = runner.invoke(app, ["approvals", "deny", "pv_0", "--reason", "no", "--as", "bob"])
        took = time.monotonic() - started
    finally:
        held.execute("ROLLBACK")
        held.close()
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error (ledger_locked):"), result.output
    assert took < 10, took  # not the 30 s a store waits by default


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """`approvals serve` up to the point it would serve: the page it built."""
    pages: list[Any] = []
    monkeypatch.setattr(
        "airlock.cli._approval_page.serve_page", lambda page, *, port: pages.append(page)
    )
    return pages


LABELS: list[tuple[str, str | None, bool, str]] = [
    ("the home's file", None, False, "{home}/ledger.db"),
    ("a sqlite URL's file", "sqlite://{tmp}/shared", False, "{tmp}/shared/ledger.db"),
    ("--ledger over a sqlite URL", "sqlite://{tmp}/shared", True, "{tmp}/given.db"),
]


@pytest.mark.parametrize(("case", "url", "given", "label"), LABELS, ids=[x[0] for x in LABELS])
def test_the_page_names_the_ledger_it_approves_on(
    case: str,
    url: str | None,
    given: bool,
    label: str,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    served: list[Any],
) -> None:
    for made in (home / "ledger.db", tmp_path / "shared/ledger.db", tmp_path / "given.db"):
        SQLiteLedgerStore(made).close()
    if url is not None:
        monkeypatch.setenv(DATABASE_ENV, url.format(tmp=tmp_path))
    args = ["approvals", "serve", "--as", "carol"]
    result = runner.invoke(app, args + (["--ledger", str(tmp_path / "given.db")] if given else []))
    assert result.exit_code == 0, result.output
    [page] = served
    assert page.ledger == label.format(home=home, tmp=tmp_path)


def test_a_postgres_url_is_named_without_its_password(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airlock.cli._approval_ledger import ledger_label

    monkeypatch.setenv(DATABASE_ENV, "postgresql://app:s3cret@db.internal:5432/airlock")
    assert ledger_label(None) == "postgresql://app:***@db.internal:5432/airlock"


APPROVERS: list[tuple[str, bool]] = [
    ("carol", True),
    ("carol@acme", True),
    ("ops:carol", True),
    ("policy:auto", False),
    ("carol smith", False),
    ("-carol", False),
    ("c" * 129, False),
    ("carol\n", False),
    ("caröl", False),
]


@pytest.mark.parametrize(("name", "valid"), APPROVERS)
def test_approvals_serve_refuses_an_approver_every_decision_would_refuse(
    name: str, valid: bool, home: Path, served: list[Any]
) -> None:
    SQLiteLedgerStore(home / "ledger.db").close()
    result = runner.invoke(app, ["approvals", "serve", "--as", name])
    if valid:
        assert result.exit_code == 0, result.output
        assert len(served) == 1
        return
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error (invalid_input): --as "), line
    assert served == []


@pytest.mark.parametrize(("name", "valid"), APPROVERS)
def test_the_check_is_the_one_decisions_make(name: str, valid: bool, tmp_path: Path) -> None:
    store = SQLiteLedgerStore(tmp_path / "ledger.db")
    try:
        with pytest.raises(NotFoundError if valid else InvalidInputError):
            deny_preview(store, "pv_none", approver=name, reason="no", now=0.0)
    finally:
        store.close()


def test_a_login_name_that_is_no_approver_id_asks_for_as(
    home: Path, monkeypatch: pytest.MonkeyPatch, served: list[Any]
) -> None:
    SQLiteLedgerStore(home / "ledger.db").close()
    monkeypatch.setattr(getpass, "getuser", lambda: "carol smith")
    result = runner.invoke(app, ["approvals", "serve"])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error (invalid_input): your login name 'carol smith'"), line
    assert line.endswith("pass --as YOUR_ID"), line
    assert served == []


def test_show_prints_an_expiry_past_the_calendar(tmp_path: Path) -> None:
    world = World(tmp_path, ttl=1e12)  # a harness whose previews "never" expire
    try:
        waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
    finally:
        world.close()
    ledger = ["--ledger", str(tmp_path / "ledger.db")]
    shown = runner.invoke(app, ["approvals", "show", waiting.id, *ledger])
    assert shown.exit_code == 0, shown.output
    assert "expires after 9999-12-31 23:59:59 UTC" in shown.output
    listed = runner.invoke(app, ["approvals", "list", *ledger])
    assert listed.exit_code == 0, listed.output
