"""The ledger and the audit store on PostgreSQL, for several harness processes sharing them.

Needs the ``postgres`` extra (``pip install 'airlock[postgres]'``: psycopg 3 and its pool)::

    from airlock.tools.postgres import PostgresDatabase, PostgresLedgerStore, PostgresAuditStore

    db = PostgresDatabase("postgresql://airlock@db.internal/airlock")
    ledger = PostgresLedgerStore(db)
    audit = PostgresAuditStore(db, key_file="/run/secrets/airlock-audit.key")

A harness selects them by URL (``AIRLOCK_DATABASE_URL`` or ``--database``); see
``docs/deploy.md``. The schema is migrated when a process first opens the database
(:func:`migrate`, plain SQL files shipped in the package).
"""

from __future__ import annotations

from airlock.tools._postgres_audit import PostgresAuditStore
from airlock.tools._postgres_connection import PostgresDatabase, redact_url
from airlock.tools._postgres_ledger import PostgresLedgerStore
from airlock.tools._postgres_migrations import Migration, MigrationError, migrate, migrations

__all__ = [
    "Migration",
    "MigrationError",
    "PostgresAuditStore",
    "PostgresDatabase",
    "PostgresLedgerStore",
    "migrate",
    "migrations",
    "redact_url",
]
