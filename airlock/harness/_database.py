"""Which database holds the ledger and the audit log: SQLite files on this host (the default)
or one PostgreSQL database that several harness processes share, chosen by URL.

The URL comes from ``--database`` or ``AIRLOCK_DATABASE_URL``:

* none: ``ledger.db`` and ``audit.db`` (key ``audit.db.key``) under ``$AIRLOCK_HOME``;
* ``sqlite:///path/to/dir``: the same files in that folder;
* ``postgresql://user@host/db`` (or ``postgres://``): both in that database, which needs the
  ``postgres`` extra; the audit chain's key is the file ``audit.key`` under ``$AIRLOCK_HOME``
  (or ``AIRLOCK_AUDIT_KEY_FILE``), the same file on every host (see ``docs/deploy.md``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from airlock._extras import requires_extra
from airlock.harness._home import airlock_home, make_home
from airlock.harness._otel import spans_from_environment
from airlock.policies import UsageError
from airlock.tools import (
    AuditLog,
    AuditStore,
    LedgerStore,
    Registry,
    SQLiteAuditStore,
    SQLiteLedgerStore,
)

if TYPE_CHECKING:  # the postgres extra may not be installed
    from airlock.tools.postgres import PostgresAuditStore

__all__ = [
    "DATABASE_ENV",
    "database_url",
    "durable_audit",
    "is_postgres",
    "open_audit_store",
    "open_ledger",
]

DATABASE_ENV = "AIRLOCK_DATABASE_URL"
"""The environment variable that names the database (``--database`` wins over it)."""
_KEY_ENV = "AIRLOCK_AUDIT_KEY_FILE"
_FEATURE = "a PostgreSQL database (AIRLOCK_DATABASE_URL=postgresql://...)"


def database_url(given: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """``given`` (``--database``), else ``AIRLOCK_DATABASE_URL``, else ``None`` (SQLite files
    under ``$AIRLOCK_HOME``).

    Raises:
        UsageError: the URL is neither ``postgresql://...`` nor ``sqlite:///...``.
    """
    env = os.environ if environ is None else environ
    url = given or env.get(DATABASE_ENV) or None
    if url is not None and not (is_postgres(url) or url.startswith("sqlite:///")):
        raise UsageError(
            f"database {url!r} is not a database URL; use postgresql://USER@HOST/DB, "
            "or sqlite:///FOLDER for SQLite files in FOLDER"
        )
    return url


def is_postgres(url: str | None) -> bool:
    """Whether ``url`` names a PostgreSQL database."""
    return url is not None and url.startswith(("postgresql://", "postgres://"))


def _folder(url: str | None) -> Path:
    return airlock_home() if url is None else Path(url.removeprefix("sqlite://"))


def open_ledger(url: str | None, *, busy_timeout: float = 30.0) -> LedgerStore:
    """The ledger in the database at ``url`` (see :func:`database_url`).

    Raises:
        MissingExtraError: a PostgreSQL URL and the ``postgres`` extra is not installed.
        LedgerUnavailableError: the PostgreSQL server cannot be reached, or the SQLite file
            or its folder cannot be made.
        LedgerError: the SQLite file is not usable as the ledger; the subclass says why.
    """
    if is_postgres(url):
        assert url is not None
        with requires_extra("postgres", feature=_FEATURE):
            from airlock.tools.postgres import PostgresLedgerStore
        return PostgresLedgerStore(url)
    # The store makes its folder (mode 0700), or raises LedgerUnavailableError saying why not.
    return SQLiteLedgerStore(_folder(url) / "ledger.db", busy_timeout=busy_timeout)


def open_audit_store(
    url: str | None,
    *,
    readonly: bool = False,
    key_file: Path | None = None,
    busy_timeout: float = 10.0,
) -> SQLiteAuditStore | PostgresAuditStore:
    """The audit store in the database at ``url`` (see :func:`database_url`); its chain key
    in ``key_file`` when given.

    Raises:
        MissingExtraError: a PostgreSQL URL and the ``postgres`` extra is not installed.
        AuditStoreError: records and no key, or (PostgreSQL) another key than theirs.
    """
    if is_postgres(url):
        assert url is not None
        with requires_extra("postgres", feature=_FEATURE):
            from airlock.tools.postgres import PostgresAuditStore
        key = key_file or Path(os.environ.get(_KEY_ENV) or airlock_home() / "audit.key")
        if key_file is None and not os.environ.get(_KEY_ENV) and not readonly:
            # The key's folder is the state's: the user's alone when this process makes it.
            with contextlib.suppress(OSError):  # the key's loader says why in one line
                make_home(key.parent)
        return PostgresAuditStore(url, key_file=key, readonly=readonly)
    return SQLiteAuditStore(
        _folder(url) / "audit.db", key_file=key_file, readonly=readonly, busy_timeout=busy_timeout
    )


def durable_audit(registry: Registry, store: AuditStore | None) -> AuditLog:
    """The registry's audit log, given a durable store when it has none of its own:
    ``store``, else the one ``AIRLOCK_DATABASE_URL`` names, else the SQLite store
    ``audit.db`` under :func:`airlock_home`. Spans are
    exported over OTLP as well when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_...``)
    is set.

    Raises:
        UsageError: ``store`` is given and the registry already writes to another one.
        MissingExtraError: OTLP is configured and the ``otel`` extra is not installed.
    """
    log = registry.audit
    if log.provisional:
        log.attach(store if store is not None else open_audit_store(database_url()))
    elif store is not None and store is not log.store:
        raise UsageError(
            "the registry already records to its own audit store (Registry(audit=...)); "
            "pass the store to the registry or to the Harness, not to both"
        )
    spans_from_environment(log)
    return log
