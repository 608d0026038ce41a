"""What the PostgreSQL stores add to the shared suites: migrations applied once and in order by
however many processes start at once, a chain key checked against the database, claims taken
over from another host when their lease runs out, and the tests' own server, which under
CI=true must run rather than skip."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from psycopg import errors

from airlock.policies import UsageError
from airlock.tools import LedgerClosedError, LedgerError
from airlock.tools._postgres_connection import _MAPPED, map_postgres_errors
from airlock.tools.postgres import (
    MigrationError,
    PostgresAuditStore,
    PostgresDatabase,
    PostgresLedgerStore,
    migrations,
    redact_url,
)
from tests.postgres import fresh_schema, require_postgres
from tests.public_api import assert_public_api
from tests.tools.stores import LEDGER_TABLES, Backend, run_sql

from .test_write_world import World

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def url(postgres_url: str) -> str:
    return fresh_schema(postgres_url)


def test_the_migrations_ship_in_the_package_numbered_in_order() -> None:
    found = migrations()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert [m.name for m in found[:2]] == ["ledger", "audit"]
    every_table = " ".join(m.sql for m in found)
    for table in (*LEDGER_TABLES, "audit_events", "audit_effects", "audit_programs", "audit_head"):
        assert f"CREATE TABLE {table} (" in every_table


def test_migrations_are_applied_once_and_recorded(url: str) -> None:
    first = PostgresDatabase(url)
    assert first.applied == [m.version for m in migrations()]
    first.close()
    again = PostgresDatabase(url)
    assert again.applied == []
    again.close()
    recorded = run_sql(url, "SELECT version, name FROM airlock_migrations ORDER BY version")
    assert recorded == [(m.version, m.name) for m in migrations()]


def _open(url: str, out: Any) -> None:
    database = PostgresDatabase(url)
    out.put(database.applied)
    database.close()


def test_processes_starting_at_once_migrate_once(url: str) -> None:
    out = SPAWN.Queue()
    children = [SPAWN.Process(target=_open, args=(url, out)) for _ in range(4)]
    for child in children:
        child.start()
    applied = [out.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    assert sorted(applied, key=len) == [[], [], [], [m.version for m in migrations()]]


def test_a_database_migrated_by_a_newer_airlock_is_refused(url: str) -> None:
    PostgresDatabase(url).close()
    run_sql(url, "INSERT INTO airlock_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(MigrationError, match="version 999") as refused:
        PostgresDatabase(url)
    assert refused.value.code == "migration"


def test_a_writer_with_another_chain_key_is_refused_before_it_writes(
    url: str, tmp_path: Path
) -> None:
    first = PostgresAuditStore(url, key_file=tmp_path / "a.key")
    first.close()
    (tmp_path / "b.key").write_text("cd" * 32)
    with pytest.raises(UsageError, match="not the one") as refused:
        PostgresAuditStore(url, key_file=tmp_path / "b.key")
    assert refused.value.code == "audit_store"
    reader = PostgresAuditStore(url, key_file=tmp_path / "b.key", readonly=True)
    with pytest.raises(LedgerError) as refused:
        reader.append([])
    assert refused.value.code == "ledger_readonly"
    reader.close()


def test_the_ledger_and_audit_store_can_share_one_pool(url: str, tmp_path: Path) -> None:
    database = PostgresDatabase(url, max_size=2)
    ledger = PostgresLedgerStore(database)
    audit = PostgresAuditStore(database, key_file=tmp_path / "k")
    assert ledger.previews() == []
    assert audit.verify().ok
    ledger.close()
    audit.close()
    assert ledger.previews() == []  # the owner of the pool closes it, not the stores
    database.close()
    with pytest.raises(LedgerClosedError, match="closed") as closed:
        ledger.previews()
    assert (closed.value.code, closed.value.retryable) == ("ledger_closed", False)


def test_a_password_never_appears_in_what_is_shown() -> None:
    assert redact_url("postgresql://app:s3cret@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert redact_url("postgresql://app@db/x") == "postgresql://app@db/x"


@pytest.mark.anyio
async def test_a_claim_from_another_host_is_taken_over_once_its_lease_runs_out(
    tmp_path: Path, backend: Backend
) -> None:
    # This host cannot tell whether a process elsewhere still runs: only the lease says.
    world = World(tmp_path, database=backend.url)
    preview = await world.prepare("inv_35")
    world.ledger.transition(
        preview.id,
        expect={"approved"},
        to="sending",
        at=world.clock(),
        actor="elsewhere@1.000@:4242",
        how="claimed on another host",
        consume_approval=True,
        owner="elsewhere@1.000@:4242",
        lease_until=world.clock() + 60,
    )
    [waiting] = await world.writes.reconcile()
    assert (waiting.outcome, waiting.after) == ("in_flight", "sending")
    assert world.system.sends() == 0

    world.clock.advance(61)
    [resolved] = await world.writes.reconcile()
    assert (resolved.outcome, resolved.after) == ("committed", "committed")
    assert world.system.effects() == 1
    assert len(world.ledger.receipts()) == 1
    world.close()


def test_without_a_server_the_tests_fail_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="must run, not skip"):
        require_postgres("no server here")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require_postgres("no server here")
    require_postgres(None)


@pytest.mark.parametrize(
    ("raised", "code"),
    [(classes[0], kind.code) for classes, kind, _ in _MAPPED]
    + [(classes[-1], kind.code) for classes, kind, _ in _MAPPED]
    + [(errors.SyntaxError, "ledger_error")],
)
def test_every_error_of_the_driver_becomes_a_ledger_error_with_its_code(
    raised: type[BaseException], code: str
) -> None:
    url = "postgresql://app:s3cret@db.internal/x"
    with pytest.raises(LedgerError) as mapped, map_postgres_errors(url, "the ledger"):
        raise raised("what the server said\nDETAIL: more")
    assert mapped.value.code == code
    assert "s3cret" not in str(mapped.value)
    assert mapped.value.path == "postgresql://app:***@db.internal/x"
    assert str(mapped.value).startswith("the ledger at ")


def test_a_constraint_the_store_relies_on_passes_through() -> None:
    with pytest.raises(errors.UniqueViolation), map_postgres_errors("postgresql://h/x", "s"):
        raise errors.UniqueViolation("duplicate key")


def test_a_server_that_does_not_answer_is_ledger_unavailable() -> None:
    with pytest.raises(LedgerError) as refused:
        PostgresLedgerStore(PostgresDatabase("postgresql://a@127.0.0.1:1/x", timeout=2))
    assert refused.value.code == "ledger_unavailable"
    assert "AIRLOCK_DATABASE_URL" in str(refused.value)


def test_the_postgres_module_api_is_pinned() -> None:
    assert_public_api(
        "airlock.tools.postgres",
        [
            "Migration",
            "MigrationError",
            "PostgresAuditStore",
            "PostgresDatabase",
            "PostgresLedgerStore",
            "migrate",
            "migrations",
            "redact_url",
        ],
    )
