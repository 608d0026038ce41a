"""The PostgreSQL schema as plain SQL files, applied in order, recorded in a version table.

``migrations/postgres/NNNN_name.sql`` (inside the package, so they ship in the wheel) are
applied in the order of their number, in one transaction that records each in
``airlock_migrations``; a database is never changed by hand. Plain files rather than a
migration library: the schema stays readable (and reviewable) by whoever runs the database,
without pulling SQLAlchemy and Alembic into a harness that otherwise does not use them, and
a dozen lines apply them. Migrations only go forward; a database migrated by a newer airlock
than this one is refused rather than written with an older idea of its tables.

Several processes may start at once: each takes a transaction-scoped advisory lock for the
schema first, so one applies all that is missing and the others then find it applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from airlock.policies import UsageError

__all__ = ["Migration", "MigrationError", "migrate", "migrations"]

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_TABLE = "airlock_migrations"


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
    """Apply the migrations the database at ``conn`` lacks; returns their versions.

    Raises:
        MigrationError: the database holds a version this airlock does not know.
    """
    known = migrations()
    done: list[int] = []
    # One transaction under the lock for the check and every migration: a process that
    # waited for the lock finds them all applied, never a later one left for it to apply.
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('airlock_migrations:' || current_schema()))"
        )
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {_TABLE} ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        applied = {int(r[0]) for r in conn.execute(f"SELECT version FROM {_TABLE}")}
        newer = sorted(applied - {m.version for m in known})
        if newer:
            raise MigrationError(
                f"the database's schema is at version {max(applied)}, which this airlock "
                f"(versions up to {len(known)}) does not know; upgrade airlock on this host"
            )
        for migration in known:
            if migration.version in applied:
                continue
            conn.execute(migration.sql.encode())
            conn.execute(
                f"INSERT INTO {_TABLE} (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            done.append(migration.version)
    return done
