"""Ledger faults reach the Python API as ``LedgerError`` with a stable code, never as raw
``sqlite3`` exceptions: SQLite's errors injected under every store operation, files that
cannot serve as a store, and a file deleted or replaced while a store has it open."""

from __future__ import annotations

import inspect
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import (
    LEDGER_ERRORS,
    Batch,
    LedgerClosedError,
    LedgerError,
    LedgerNotADatabaseError,
    LedgerReplacedError,
    LedgerStore,
    SQLiteAuditStore,
    SQLiteLedgerStore,
    approve_preview,
)
from tests.audit_events import stored_event
from tests.tools.ledger_records import ALICE, make_approval, make_preview

# -- SQLite's errors, injected under every operation --------------------------------------


def _error(cls: type[sqlite3.Error], message: str, name: str | None) -> sqlite3.Error:
    exc = cls(message)
    if name is not None:  # as SQLite itself raises them; without, only the message tells
        exc.sqlite_errorname = name
    return exc


INJECTED: list[tuple[str, Callable[[], sqlite3.Error], str, bool]] = [
    (
        "busy",
        lambda: _error(sqlite3.OperationalError, "database is locked", "SQLITE_BUSY"),
        "ledger_locked",
        True,
    ),
    (
        "locked, unnamed",
        lambda: _error(sqlite3.OperationalError, "database is locked", None),
        "ledger_locked",
        True,
    ),
    (
        "disk I/O",
        lambda: _error(sqlite3.OperationalError, "disk I/O error", "SQLITE_IOERR_WRITE"),
        "ledger_io",
        True,
    ),
    (
        "disk I/O, unnamed",
        lambda: _error(sqlite3.OperationalError, "disk I/O error", None),
        "ledger_io",
        True,
    ),
    (
        "full",
        lambda: _error(sqlite3.OperationalError, "database or disk is full", "SQLITE_FULL"),
        "ledger_io",
        True,
    ),
    (
        "readonly",
        lambda: _error(
            sqlite3.OperationalError, "attempt to write a readonly database", "SQLITE_READONLY"
        ),
        "ledger_readonly",
        False,
    ),
    (
        "readonly, unnamed",
        lambda: _error(sqlite3.OperationalError, "attempt to write a readonly database", None),
        "ledger_readonly",
        False,
    ),
    (
        "corrupt",
        lambda: _error(sqlite3.DatabaseError, "database disk image is malformed", "SQLITE_CORRUPT"),
        "ledger_corrupt",
        False,
    ),
    (
        "corrupt, unnamed",
        lambda: _error(sqlite3.DatabaseError, "database disk image is malformed", None),
        "ledger_corrupt",
        False,
    ),
    (
        "not a database",
        lambda: _error(sqlite3.DatabaseError, "file is not a database", "SQLITE_NOTADB"),
        "ledger_not_database",
        False,
    ),
    (
        "cannot open",
        lambda: _error(sqlite3.OperationalError, "unable to open database file", "SQLITE_CANTOPEN"),
        "ledger_unavailable",
        False,
    ),
    (
        "constraint",
        lambda: _error(sqlite3.IntegrityError, "UNIQUE constraint failed", "SQLITE_CONSTRAINT"),
        "ledger_error",
        False,
    ),
    (
        "misuse",
        lambda: _error(sqlite3.ProgrammingError, "Cannot operate on a closed cursor", None),
        "ledger_error",
        False,
    ),
]


class _Faulty:
    """A connection whose every statement raises ``error``."""

    in_transaction = False

    def __init__(self, error: Callable[[], sqlite3.Error]) -> None:
        self._error = error

    def execute(self, *args: Any) -> Any:
        raise self._error()

    executemany = executescript = execute

    def close(self) -> None:
        return None


LEDGER_CALLS: dict[str, Callable[[SQLiteLedgerStore], object]] = {
    "add_preview": lambda s: s.add_preview(make_preview(2)),
    "preview": lambda s: s.preview("pv_1"),
    "previews": lambda s: s.previews(),
    "steps": lambda s: s.steps(states={"unknown", "sending"}),
    "approval": lambda s: s.approval("pv_1"),
    "receipt": lambda s: s.receipt("key"),
    "receipts": lambda s: s.receipts(),
    "history": lambda s: s.history("pv_1"),
    "transition": lambda s: s.transition(
        "pv_1",
        expect={"prepared"},
        to="approved",
        at=2.0,
        actor="bob",
        how="approved",
        approval=make_approval(make_preview()),
    ),
    "release_claim": lambda s: s.release_claim(
        "pv_1",
        to="approved",
        expect_attempts=1,
        expect_owner="h:1",
        at=2.0,
        actor="h:1",
        how="not sent",
    ),
    "batch": lambda s: s.batch("pb_1"),
    "batches": lambda s: s.batches(),
    "add_batch": lambda s: s.add_batch(
        Batch(
            id="pb_1",
            run_id="run_1",
            principal=ALICE,
            items=("pv_1",),
            fingerprint="f",
            created=2.0,
        )
    ),
}
AUDIT_CALLS: dict[str, Callable[[SQLiteAuditStore], object]] = {
    "append": lambda s: s.append([stored_event()]),
    "query": lambda s: s.query(),
    "records": lambda s: list(s.records()),
    "runs": lambda s: s.runs(),
    "program": lambda s: s.program("abc"),
    "verify": lambda s: s.verify(),
    "read": lambda s: s.read(lambda conn: conn.execute("SELECT 1").fetchall()),
}


def test_every_ledger_operation_is_in_the_table() -> None:
    protocol = {
        name
        for name, _ in inspect.getmembers(LedgerStore, inspect.isfunction)
        if not name.startswith("_") and name != "close"
    }
    assert protocol <= set(LEDGER_CALLS), "add the new operation to LEDGER_CALLS"


def test_every_ledger_error_code_is_produced() -> None:
    codes = {code for _, _, code, _ in INJECTED} | {"ledger_replaced", "ledger_closed"}
    assert codes == set(LEDGER_ERRORS)


def _closed(store: str, path: Path) -> Callable[[str], object]:
    """Each operation of ``store`` (``"the ledger"``, ``"the audit store"``), once closed."""
    if store == "the ledger":
        ledger = SQLiteLedgerStore(path)
        ledger.close()
        return lambda call: LEDGER_CALLS[call](ledger)
    audit = SQLiteAuditStore(path)
    audit.close()
    return lambda call: AUDIT_CALLS[call](audit)


@pytest.mark.parametrize(
    ("store", "call"),
    [("the ledger", call) for call in sorted(LEDGER_CALLS)]
    + [("the audit store", call) for call in sorted(AUDIT_CALLS)],
)
def test_a_store_this_process_closed_refuses_with_a_ledger_error(
    tmp_path: Path, store: str, call: str
) -> None:
    path = tmp_path / "store.db"
    with pytest.raises(LedgerClosedError) as raised:  # (an application shutting down)
        _closed(store, path)(call)
    error = raised.value
    assert (error.code, error.retryable, error.path, error.store) == (
        "ledger_closed",
        False,
        str(path),
        store,
    )
    assert str(error) == (
        f"{store} {str(path)!r} is closed: this process closed it, and nothing more can be "
        "recorded in it"
    )


@pytest.mark.parametrize(
    ("call", "injected", "code", "retryable"),
    [
        pytest.param(call, make, code, retryable, id=f"{call}-{name}")
        for call in sorted(LEDGER_CALLS)
        for name, make, code, retryable in INJECTED
    ],
)
def test_ledger_faults_are_ledger_errors(
    tmp_path: Path,
    call: str,
    injected: Callable[[], sqlite3.Error],
    code: str,
    retryable: bool,
) -> None:
    path = tmp_path / "ledger.db"
    store = SQLiteLedgerStore(path)
    store.add_preview(make_preview())
    store._db._conn = _Faulty(injected)  # type: ignore[assignment]
    with pytest.raises(LedgerError) as raised:
        LEDGER_CALLS[call](store)
    error = raised.value
    assert (error.code, error.retryable, error.path) == (code, retryable, str(path))
    assert type(error) is LEDGER_ERRORS[code]  # type: ignore[index]
    assert str(error).startswith(f"the ledger {str(path)!r} ")
    assert isinstance(error.__cause__, sqlite3.Error)


@pytest.mark.parametrize(
    ("call", "injected", "code", "retryable"),
    [
        pytest.param(call, make, code, retryable, id=f"{call}-{name}")
        for call in sorted(AUDIT_CALLS)
        for name, make, code, retryable in INJECTED
    ],
)
def test_audit_store_faults_are_ledger_errors(
    tmp_path: Path,
    call: str,
    injected: Callable[[], sqlite3.Error],
    code: str,
    retryable: bool,
) -> None:
    path = tmp_path / "audit.db"
    store = SQLiteAuditStore(path)
    store._db._conn = _Faulty(injected)  # type: ignore[assignment]
    with pytest.raises(LedgerError) as raised:
        AUDIT_CALLS[call](store)
    error = raised.value
    assert (error.code, error.retryable, error.store) == (code, retryable, "the audit store")
    assert str(error).startswith(f"the audit store {str(path)!r} ")


# -- files that cannot serve as a store ---------------------------------------------------


def test_an_empty_file_becomes_a_new_ledger_when_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ledger.db"
    path.write_bytes(b"")
    with pytest.raises(LedgerNotADatabaseError, match=r"is an empty file \(0 bytes\)"):
        SQLiteLedgerStore(path, readonly=True)
    with caplog.at_level(logging.WARNING, logger="airlock.ledger"):
        store = SQLiteLedgerStore(path)
    assert f"{path} is an empty file (0 bytes); it is initialised as a new one" in caplog.text
    store.add_preview(make_preview())
    store.close()
    assert SQLiteLedgerStore(path, readonly=True).preview("pv_1") == make_preview()


@pytest.mark.parametrize("readonly", [False, True])
def test_another_programs_database_is_refused_and_left_alone(
    tmp_path: Path, readonly: bool
) -> None:
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LedgerNotADatabaseError, match="is an SQLite database but not the ledger"):
        SQLiteLedgerStore(path, readonly=readonly)
    assert path.read_bytes() == before  # no ledger tables were added to it


def test_an_audit_store_is_not_a_ledger_and_back(tmp_path: Path) -> None:
    SQLiteAuditStore(tmp_path / "audit.db").close()
    SQLiteLedgerStore(tmp_path / "ledger.db").close()
    with pytest.raises(LedgerNotADatabaseError, match="not the ledger"):
        SQLiteLedgerStore(tmp_path / "audit.db")
    with pytest.raises(LedgerNotADatabaseError, match="not the audit store"):
        SQLiteAuditStore(tmp_path / "ledger.db")


# -- a file deleted or replaced while open --------------------------------------------------


def _swap(path: Path) -> None:
    fresh = path.with_name("fresh.db")
    SQLiteLedgerStore(fresh).close()
    os.replace(fresh, path)


@pytest.mark.parametrize("change", [Path.unlink, _swap], ids=["deleted", "replaced"])
def test_a_replaced_ledger_refuses_reads_and_writes(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    path = tmp_path / "ledger.db"
    store = SQLiteLedgerStore(path)
    preview = store.add_preview(make_preview())
    change(path)
    for operation in (
        lambda: store.previews(),
        lambda: store.add_preview(make_preview(2)),
        lambda: approve_preview(store, preview.id, approver="bob", now=2.0),
    ):
        with pytest.raises(LedgerReplacedError, match="was deleted or replaced while it was open"):
            operation()
    store.close()


@pytest.mark.parametrize("change", [Path.unlink, _swap], ids=["deleted", "replaced"])
def test_a_forked_child_finds_the_replacement(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    path = tmp_path / "ledger.db"
    store = SQLiteLedgerStore(path)
    store.add_preview(make_preview())
    change(path)
    existed = path.exists()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reconnects, to the file now at the path
        os.close(read)
        try:
            store.previews()
            answer = "read"
        except LedgerReplacedError:
            answer = "refused"
        except BaseException as exc:
            answer = type(exc).__name__
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    answer = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    store.close()
    assert answer == "refused"
    assert path.exists() == existed  # the child created no new ledger in its place


def test_an_audit_store_moved_while_open_refuses_to_append(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    store = SQLiteAuditStore(path)
    store.append([stored_event()])
    path.rename(tmp_path / "moved.db")
    with pytest.raises(LedgerReplacedError, match="the audit store"):
        store.append([stored_event()])
    with pytest.raises(LedgerReplacedError, match="the audit store"):
        store.query()
    store.close()


def test_a_relative_path_survives_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    store = SQLiteLedgerStore("ledger.db")
    store.add_preview(make_preview())
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert [p.id for p in store.previews()] == ["pv_1"]
    store.add_preview(make_preview(2))
    store.close()
    assert not (tmp_path / "elsewhere" / "ledger.db").exists()


def _opened_as_another_user(path: Path) -> list[str]:
    """What opening ``path`` (read-only, then to write) answers to a user who is not its
    folder's owner: ``nobody`` in a forked child when we are root, else ourselves."""

    def attempts() -> list[str]:
        answers = []
        for readonly in (True, False):
            try:
                SQLiteLedgerStore(path, readonly=readonly)
                answers.append("opened")
            except LedgerError as exc:
                answers.append(f"{exc.code}: {exc}")
        return answers

    if os.geteuid() != 0:
        return attempts()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, as nobody
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            answers = attempts()
        except BaseException as exc:
            answers = [repr(exc)]
        os.write(write, "\n".join(answers).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as got:
        answers = got.read().splitlines()
    os.waitpid(pid, 0)
    return answers


def test_a_folder_that_may_not_be_searched_is_unavailable(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    (blocked / "inner").mkdir(parents=True)
    blocked.chmod(0o700 if os.geteuid() == 0 else 0o000)  # root's 0700: closed to nobody
    path = blocked / "inner" / "ledger.db"
    try:
        answers = _opened_as_another_user(path)
    finally:
        blocked.chmod(0o700)
    assert (
        answers
        == [
            f"ledger_unavailable: the ledger {str(path)!r} cannot be reached (Permission denied); "
            "check its folders"
        ]
        * 2
    )
