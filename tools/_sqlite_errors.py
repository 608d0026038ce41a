"""SQLite's errors as :class:`~airlock.tools.LedgerError`\\ s: :func:`store_error` is the one
place where an ``sqlite3`` exception becomes one, by SQLite's primary result code (or, for an
error raised without a name, its message), with advice on what to do."""

from __future__ import annotations

import sqlite3

from airlock.tools._errors import (
    LedgerCorruptError,
    LedgerError,
    LedgerIOError,
    LedgerLockedError,
    LedgerNotADatabaseError,
    LedgerReadOnlyError,
    LedgerUnavailableError,
)

__all__ = ["store_error"]

# SQLite's primary result codes (``sqlite_errorname`` without an extended suffix), and the
# messages sqlite3_errstr() gives them, for errors raised without a name.
_BY_NAME: dict[str, type[LedgerError]] = {
    "SQLITE_BUSY": LedgerLockedError,
    "SQLITE_LOCKED": LedgerLockedError,
    "SQLITE_NOTADB": LedgerNotADatabaseError,
    "SQLITE_CORRUPT": LedgerCorruptError,
    "SQLITE_READONLY": LedgerReadOnlyError,
    "SQLITE_CANTOPEN": LedgerUnavailableError,
    "SQLITE_PERM": LedgerUnavailableError,
    "SQLITE_AUTH": LedgerUnavailableError,
    "SQLITE_IOERR": LedgerIOError,
    "SQLITE_FULL": LedgerIOError,
}
_BY_MESSAGE: dict[str, str] = {
    "database is locked": "SQLITE_BUSY",
    "database table is locked": "SQLITE_LOCKED",
    "file is not a database": "SQLITE_NOTADB",
    "database disk image is malformed": "SQLITE_CORRUPT",
    "attempt to write a readonly database": "SQLITE_READONLY",
    "unable to open database file": "SQLITE_CANTOPEN",
    "disk I/O error": "SQLITE_IOERR",
    "database or disk is full": "SQLITE_FULL",
}
_ADVICE: dict[type[LedgerError], str] = {
    LedgerLockedError: "is locked: another process held it longer than this one waits; try "
    "again, or stop the process that holds it",
    LedgerNotADatabaseError: "is not an SQLite database; pass the right file, or move this "
    "one aside",
    LedgerCorruptError: "is damaged (malformed or truncated); restore it from a copy, or "
    "move it aside and reconcile against the system of record",
    LedgerReadOnlyError: "cannot be written; make the file and its folder writable",
    LedgerUnavailableError: "cannot be opened; check that the path and its folder exist "
    "and may be read and written",
    LedgerIOError: "could not be read or written (the disk failed or is full); fix the disk "
    "and try again",
    LedgerError: "failed",
}


def store_error(exc: sqlite3.Error, *, path: str, store: str) -> LedgerError:
    """The :class:`~airlock.tools.LedgerError` for an error SQLite raised on ``path``:
    locked → ``ledger_locked``, not a database → ``ledger_not_database``, malformed →
    ``ledger_corrupt``, read-only → ``ledger_readonly``, cannot open → ``ledger_unavailable``,
    I/O or full → ``ledger_io``; anything else (a constraint, a bug) is ``ledger_error``."""
    name = getattr(exc, "sqlite_errorname", None) or _BY_MESSAGE.get(str(exc), "")
    primary = "_".join(str(name).split("_")[:2])  # SQLITE_IOERR_READ -> SQLITE_IOERR
    kind = _BY_NAME.get(primary, LedgerError)
    return kind(
        f"{store} {path!r} {_ADVICE[kind]} (SQLite: {exc})"
        if kind is not LedgerError
        else f"{store} {path!r} failed: {type(exc).__name__}: {exc}",
        path=path,
        store=store,
    )
