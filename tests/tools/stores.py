"""The stores' backends, for suites that run against each: SQLite files and PostgreSQL.

The ``backend`` fixture is parametrized over :data:`BACKENDS`; a test takes it (or a fixture
built on it) and runs once per backend. A :class:`Backend` opens as many ledgers and audit
stores on the same database as a test wants (another process would do the same with
:attr:`Backend.location`), and runs raw SQL on it (to tamper with records, or to check that
the database itself refuses what the store never writes).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from airlock.tools import SQLiteAuditStore, SQLiteLedgerStore

BackendName = Literal["sqlite", "postgres"]
BACKENDS: tuple[BackendName, ...] = ("sqlite", "postgres")
LEDGER_TABLES = ("previews", "approvals", "receipts", "step_events", "batches")


def open_ledger(location: str) -> Any:
    """The ledger at ``location``: a ``postgresql://`` URL, else a folder holding
    ``ledger.db`` (``synchronous=NORMAL``: the tests need no machine-crash durability)."""
    if location.startswith("postgresql://"):
        from airlock.tools.postgres import PostgresLedgerStore

        return PostgresLedgerStore(location)
    return SQLiteLedgerStore(Path(location) / "ledger.db", synchronous="NORMAL")


def run_sql(where: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run one statement (``?`` placeholders) on a connection of its own, committed: on the
    PostgreSQL database at a ``postgresql://`` URL, else on the SQLite file at ``where``."""
    if not where.startswith("postgresql://"):
        conn = sqlite3.connect(where)
        try:
            with conn:
                return conn.execute(statement, params).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(where, autocommit=True) as pg:
        cursor = pg.execute(statement.replace("?", "%s").encode(), params or None)
        return cursor.fetchall() if cursor.description else []


def dump_tables(where: str, tables: tuple[str, ...]) -> bytes:
    """Every row of ``tables`` as text: what someone who reads the database sees."""
    return b"\n".join(
        repr(row).encode() for table in tables for row in run_sql(where, f"SELECT * FROM {table}")
    )


@dataclass
class Backend:
    """One database of one backend, in ``root`` (SQLite's files, the audit key)."""

    name: BackendName
    root: Path
    url: str | None = None

    @property
    def location(self) -> str:
        """What :func:`open_ledger` (in this or another process) opens."""
        return self.url if self.url is not None else str(self.root)

    @property
    def integrity_error(self) -> type[Exception]:
        if self.name == "sqlite":
            return sqlite3.IntegrityError
        import psycopg

        return psycopg.IntegrityError

    def ledger(self) -> Any:
        return open_ledger(self.location)

    def audit(self, *, readonly: bool = False, key_file: Path | None = None) -> Any:
        """The audit store; its key in ``root/audit.db.key`` unless ``key_file``."""
        key = key_file or self.root / "audit.db.key"
        if self.url is None:
            return SQLiteAuditStore(self.root / "audit.db", readonly=readonly, key_file=key)
        from airlock.tools.postgres import PostgresAuditStore

        return PostgresAuditStore(self.url, key_file=key, readonly=readonly)

    def sql(
        self,
        statement: str,
        params: tuple[Any, ...] = (),
        *,
        store: Literal["ledger", "audit"] = "audit",
    ) -> list[Any]:
        """Run one statement (``?`` placeholders) on a connection of its own, committed (on
        SQLite, in the file of ``store``; on PostgreSQL both share the database)."""
        return run_sql(self.url or str(self.root / f"{store}.db"), statement, params)


def make_backend(name: BackendName, root: Path, request: pytest.FixtureRequest) -> Backend:
    """An empty database of backend ``name`` (PostgreSQL: a schema of its own in the
    session's server)."""
    if name == "sqlite":
        return Backend("sqlite", root)
    from tests.postgres import fresh_schema

    server: str = request.getfixturevalue("postgres_url")
    return Backend("postgres", root, fresh_schema(server))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each backend in turn, on an empty database."""
    return make_backend(request.param, tmp_path, request)
