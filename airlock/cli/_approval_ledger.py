"""Which ledger ``airlock approvals`` and ``receipts`` use, and opening it as they need it.

``--ledger FILE``, else the database of ``AIRLOCK_DATABASE_URL`` (the one every harness
process shares), else ``ledger.db`` in AIRLOCK_HOME. A SQLite file, named either way, is
opened as ``--ledger``'s always was: read-only for commands that only read, with
``AIRLOCK_BUSY_TIMEOUT``, and never made when it is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from airlock.cli._inventory import usage_errors
from airlock.cli._settings import Settings
from airlock.harness import database_url, is_postgres, open_ledger
from airlock.tools import LedgerStore, SQLiteLedgerStore

__all__ = ["LedgerOption", "default_ledger", "ledger_label", "open_approval_ledger"]

LedgerOption = Annotated[
    Path | None,
    typer.Option("--ledger", help="Ledger database (default: ledger.db in AIRLOCK_HOME)."),
]


def default_ledger() -> Path:
    """``ledger.db`` in the airlock home directory."""
    return Settings.from_env().home / "ledger.db"


def _where(ledger: Path | None) -> Path | str:
    """The ledger the commands use: ``--ledger``, else ``AIRLOCK_DATABASE_URL``'s (a
    PostgreSQL URL, or the file in its ``sqlite:///FOLDER``), else the home's file."""
    if ledger is not None:
        return ledger
    with usage_errors():
        url = database_url()  # the ledger every harness process shares
    if url is None:
        return default_ledger()
    if is_postgres(url):
        return url
    return Path(url.removeprefix("sqlite://")) / "ledger.db"  # (database_url checked it)


def ledger_label(ledger: Path | None) -> str:
    """The ledger the commands use, as a person may be shown it: the file, or the URL
    without its password. ``--ledger`` (``ledger``), else ``AIRLOCK_DATABASE_URL``'s, else
    ``ledger.db`` in AIRLOCK_HOME."""
    where = _where(ledger)
    if isinstance(where, Path):
        return str(where)
    from airlock.tools.postgres import redact_url  # (the store opened: the extra is there)

    return redact_url(where)


def open_approval_ledger(ledger: Path | None, *, readonly: bool) -> LedgerStore:
    """The ledger the commands use (see :func:`ledger_label`), opened; a file that is not
    there is said on stderr (exit 1), and not made.

    Raises:
        typer.Exit: 2 after one line, when the URL or the PostgreSQL database cannot be
            used; 1 when the file is not there.
        LedgerError: the file cannot be used as the ledger; the subclass says why.
    """
    path = _where(ledger)
    if not isinstance(path, Path):
        with usage_errors():
            return open_ledger(path)
    # A file (a sqlite:/// URL's too) that is not there is not made: a command that reads
    # it would say "nothing waits" about a ledger that never was.
    if not path.exists():
        Console(stderr=True).print(
            f"no ledger at {path}; nothing was prepared yet, or pass --ledger"
        )
        raise typer.Exit(code=1)
    return SQLiteLedgerStore(path, readonly=readonly, busy_timeout=Settings.from_env().busy_timeout)
