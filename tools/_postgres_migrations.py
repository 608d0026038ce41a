"""The PostgreSQL schema as plain SQL files, applied in order, recorded in a version table.

``migrations/postgres/NNNN_name.sql`` (inside the package, so they ship in the wheel) are
applied in the order of their number, in one transaction that records each in
``airlock_migrations``; a database is never changed by hand. Plain files rather than a
migration library: the schema stays readable (and reviewable) by whoever runs the database,
without pulling SQLAlchemy and Alembic into a harness that otherwise does not use them, and
a dozen lines apply them. Migrations only go forward; a database migrated by a newer airlock
than this one is refused rather than written with an older idea of its tables.

Several processes may start at once: each takes a transaction-scoped advisory lock for the
schema first, so one applies all that is missing and the others then find it applied. A
database already at this airlock's version is only read (no lock, no DDL), so every later
start works with a user that may not create tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import errors

from airlock.policies import UsageError

__all__ = ["Migration", "MigrationError", "migrate", "migrations"]

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_TABLE = "airlock_migrations"
_MIGRATION_WAIT = "5min"


class MigrationError(UsageError):
    """The database's schema cannot be used by this airlock (migrated by a newer one)."""

    code = "migration"


@dataclass(frozen=True, slots=True)
class Migration:
    """One SQL file of the schema."""

    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped with this airlock, in order."""
    folder = resources.files("airlock.tools").joinpath("migrations", "postgres")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"the migrations are not numbered 1, 2, 3, ...: {versions}")
    return found


def migrate(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply the migrations the database at ``conn`` (autocommit) lacks; returns their
    versions.

    A database already at this airlock's version is only read: a user with no right to create
    tables (one granted only its rows, or an auditor granted only ``SELECT``) opens it.

    Raises:
        MigrationError: the database holds a version this airlock does not know, or lacks
            some and this user may not create them.
    """
    known = migrations()
    applied = _applied(conn)
    if applied is not None and not _missing(known, applied):
        return []
    try:
        return _apply(conn, known)
    except errors.InsufficientPrivilege as exc:
        raise MigrationError(
            f"the database's schema lacks airlock's tables (migrations up to {len(known)}) and "
            f"this user may not create them ({str(exc).strip().splitlines()[0][:200]}); start "
            "airlock once as a user that may create tables in the schema (its owner), or "
            "grant this one CREATE on it"
        ) from exc


def _applied(conn: psycopg.Connection[Any]) -> set[int] | None:
    """The versions the database records, or ``None`` when it has no version table; read
    without DDL (even ``CREATE TABLE IF NOT EXISTS`` needs the right to create)."""
    found = conn.execute(
        f"SELECT to_regclass(quote_ident(current_schema()) || '.{_TABLE}') IS NOT NULL"
    ).fetchone()
    if found is None or not found[0]:
        return None
    return {int(r[0]) for r in conn.execute(f"SELECT version FROM {_TABLE}")}


def _missing(known: list[Migration], applied: set[int]) -> list[Migration]:
    """The migrations of ``known`` not in ``applied``.

    Raises:
        MigrationError: ``applied`` holds a version this airlock does not know.
    """
    newer = sorted(applied - {m.version for m in known})
    if newer:
        raise MigrationError(
            f"the database's schema is at version {max(applied)}, which this airlock "
            f"(versions up to {len(known)}) does not know; upgrade airlock on this host"
        )
    return [m for m in known if m.version not in applied]


def _apply(conn: psycopg.Connection[Any], known: list[Migration]) -> list[int]:
    done: list[int] = []
    # One transaction under the lock for the check and every migration: a process that
    # waited for the lock finds them all applied, never a later one left for it to apply.
    with conn.transaction():
        # Another process may hold the lock while it migrates, and a migration may rewrite
        # a large table: wait for either longer than a store's operation may (still bounded:
        # a process stuck holding the lock fails the start rather than hanging it).
        conn.execute(f"SET LOCAL lock_timeout = '{_MIGRATION_WAIT}'")
        conn.execute(f"SET LOCAL statement_timeout = '{_MIGRATION_WAIT}'")
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('airlock_migrations:' || current_schema()))"
        )
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {_TABLE} ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        applied = {int(r[0]) for r in conn.execute(f"SELECT version FROM {_TABLE}")}
        for migration in _missing(known, applied):
            conn.execute(migration.sql.encode())
            conn.execute(
                f"INSERT INTO {_TABLE} (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            done.append(migration.version)
    return done
