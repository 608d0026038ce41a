"""Which database a harness uses: SQLite files by default, PostgreSQL by URL, and a missing
``postgres`` extra named in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airlock import MissingExtraError
from airlock.harness import DATABASE_ENV, database_url, open_audit_store, open_ledger
from airlock.policies import UsageError
from airlock.tools import SQLiteAuditStore, SQLiteLedgerStore
from tests.postgres import fresh_schema


def test_the_option_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATABASE_ENV, raising=False)
    assert database_url() is None
    monkeypatch.setenv(DATABASE_ENV, "postgresql://a@h/db")
    assert database_url() == "postgresql://a@h/db"
    assert database_url("sqlite:///tmp/x") == "sqlite:///tmp/x"


@pytest.mark.parametrize("bad", ["mysql://a@h/db", "/var/lib/airlock", "postgresql:/x"])
def test_what_is_not_a_database_url_is_refused_with_the_forms_to_use(bad: str) -> None:
    with pytest.raises(UsageError, match=r"postgresql://USER@HOST/DB") as refused:
        database_url(bad)
    assert repr(bad) in str(refused.value)


def test_without_a_url_the_stores_are_sqlite_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    ledger = open_ledger(None)
    assert isinstance(ledger, SQLiteLedgerStore)
    assert Path(ledger.path) == tmp_path / "home" / "ledger.db"
    ledger.close()
    audit = open_audit_store(f"sqlite://{tmp_path / 'elsewhere'}")
    assert isinstance(audit, SQLiteAuditStore)
    assert audit.path == tmp_path / "elsewhere" / "audit.db"
    audit.close()


def test_a_postgres_url_opens_both_stores_there(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airlock.tools.postgres import PostgresAuditStore, PostgresLedgerStore

    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path))
    url = fresh_schema(postgres_url)
    ledger = open_ledger(url)
    audit = open_audit_store(url)
    assert isinstance(ledger, PostgresLedgerStore)
    assert isinstance(audit, PostgresAuditStore)
    assert audit.key_file == tmp_path / "audit.key"
    assert (tmp_path / "audit.key").stat().st_mode & 0o777 == 0o600
    ledger.close()
    audit.close()


def test_without_the_postgres_extra_the_error_names_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m.startswith(("psycopg", "airlock.tools.postgres"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "airlock.tools._postgres_ledger", raising=False)
    monkeypatch.delitem(sys.modules, "airlock.tools._postgres_audit", raising=False)
    monkeypatch.delitem(sys.modules, "airlock.tools._postgres_connection", raising=False)
    monkeypatch.delitem(sys.modules, "airlock.tools._postgres_migrations", raising=False)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    for opener in (open_ledger, open_audit_store):
        with pytest.raises(MissingExtraError) as missing:
            opener("postgresql://a@127.0.0.1:1/db")
        assert missing.value.extra == "postgres"
        assert "\n" not in str(missing.value)
        assert str(missing.value).endswith("pip install 'airlock[postgres]'")
