"""Least-privilege users: once the schema is migrated, a user granted only the rows of
airlock's tables runs the stores, and an auditor granted only ``SELECT`` verifies the log;
neither needs the right to create tables. A user that may not create them, on a database that
lacks them, is told how to migrate it."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from airlock.tools.postgres import (
    MigrationError,
    PostgresAuditStore,
    PostgresDatabase,
    PostgresLedgerStore,
)
from tests.audit_events import stored_event
from tests.postgres import fresh_schema
from tests.tools.ledger_records import make_preview


@pytest.fixture
def url(postgres_url: str) -> str:
    return fresh_schema(postgres_url)


@pytest.fixture
def as_role(url: str) -> Iterator[Callable[[str], str]]:
    """``as_role(GRANTS)``: the URL of a new login role granted only ``GRANTS`` (``{schema}``
    is the test's schema) and the use of the schema; the roles are dropped at the end."""
    made: list[str] = []
    schema = psycopg.conninfo.conninfo_to_dict(url)["options"].split("=", 1)[1]

    def make(grants: str) -> str:
        role, password = f"least_{secrets.token_hex(4)}", secrets.token_hex(8)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
            made.append(role)
            admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
            for grant in filter(None, grants.format(schema=f'"{schema}"').split(";")):
                admin.execute(f"{grant} TO {role}")
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}"))

    yield make
    with psycopg.connect(url, autocommit=True) as admin:
        for role in made:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


ROWS_ONLY = (
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema};"
    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema}"
)
SELECT_ONLY = "GRANT SELECT ON ALL TABLES IN SCHEMA {schema}"


def _writes_the_ledger(where: str, _: Path) -> None:
    ledger = PostgresLedgerStore(where)
    assert ledger.add_preview(make_preview(1)).id == "pv_1"
    ledger.close()


def _appends_to_the_log(where: str, key: Path) -> None:
    audit = PostgresAuditStore(where, key_file=key)
    audit.append([stored_event(run_id="r1", call_id="c2")])
    assert audit.verify().records == 2
    audit.close()


def _verifies_the_log(where: str, key: Path) -> None:
    audit = PostgresAuditStore(where, key_file=key, readonly=True)
    assert audit.verify().ok
    audit.close()


def _reads_the_ledger(where: str, _: Path) -> None:
    ledger = PostgresLedgerStore(where)
    assert ledger.previews() == []
    ledger.close()


# Who opens the migrated database, and what it must be able to do there.
USERS = [
    ("rows only, writing the ledger", ROWS_ONLY, _writes_the_ledger),
    ("rows only, appending to the audit log", ROWS_ONLY, _appends_to_the_log),
    ("select only, verifying the audit log", SELECT_ONLY, _verifies_the_log),
    ("select only, reading the ledger", SELECT_ONLY, _reads_the_ledger),
]


@pytest.mark.parametrize(("who", "grants", "use"), USERS, ids=[u[0] for u in USERS])
def test_a_user_without_create_rights_opens_a_migrated_database(
    url: str,
    as_role: Callable[[str], str],
    tmp_path: Path,
    who: str,
    grants: str,
    use: Callable[[str, Path], None],
) -> None:
    key = tmp_path / "audit.key"
    owner = PostgresAuditStore(url, key_file=key)  # the first start, as the schema's owner
    owner.append([stored_event(run_id="r1", call_id="c1")])
    owner.close()
    use(as_role(grants), key)


def test_a_user_that_may_not_create_the_tables_is_told_how_to_migrate(
    url: str, as_role: Callable[[str], str]
) -> None:
    with pytest.raises(MigrationError, match="CREATE") as refused:
        PostgresDatabase(as_role(""))
    assert refused.value.code == "migration"
    assert PostgresDatabase(url).applied  # nothing half-applied: the owner migrates it all
