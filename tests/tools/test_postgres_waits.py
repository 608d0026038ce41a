"""Every wait on PostgreSQL is bounded, and a connection the server closed is replaced.

A lock held by another session, a statement that runs too long and a transaction left idle
each end in ``ledger_locked`` (retryable) within the store's limits, instead of holding the
caller (on the write path: the whole event loop) until the other session lets go. A server
restart or ``pg_terminate_backend`` costs the pool its connections, not its callers an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

from airlock.policies import UsageError
from airlock.tools import LedgerError, Preview
from airlock.tools import _postgres_connection as connection_module
from airlock.tools._postgres_connection import map_postgres_errors
from airlock.tools._postgres_session import KEEPALIVES, LIMITS_ENV, SessionLimits, connect_arguments
from airlock.tools.postgres import PostgresAuditStore, PostgresDatabase, PostgresLedgerStore
from tests.audit_events import stored_event
from tests.postgres import fresh_schema
from tests.tools.ledger_records import make_approval, make_preview

# Long enough for any store operation on a loopback server, short enough that a test that
# would hang fails instead.
_GUARD = 60.0


@pytest.fixture
def url(postgres_url: str) -> str:
    return fresh_schema(postgres_url)


def _outcome(operation: Callable[[], object]) -> BaseException | None:
    """What ``operation`` raised (``None``: it returned), run in a thread so that a wait
    without end fails the test rather than hanging it."""
    caught: list[BaseException | None] = []

    def run() -> None:
        try:
            operation()
        except BaseException as exc:
            caught.append(exc)
        else:
            caught.append(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(_GUARD)
    assert caught, f"still waiting after {_GUARD:g} s: the wait has no bound"
    return caught[0]


def _approved(ledger: PostgresLedgerStore) -> Preview:
    preview = ledger.add_preview(make_preview(1))
    return ledger.transition(
        preview.id,
        expect={"prepared"},
        to="approved",
        at=2.0,
        actor="bob",
        how="approved",
        approval=make_approval(preview),
    )


def _claim(ledger: PostgresLedgerStore, preview: Preview) -> Callable[[], object]:
    return lambda: ledger.transition(
        preview.id,
        expect={"approved"},
        to="sending",
        at=3.0,
        actor="me",
        how="claimed",
        consume_approval=True,
        owner="me",
        lease_until=100.0,
    )


@pytest.fixture
def stores(url: str, tmp_path: Path) -> Iterator[tuple[PostgresDatabase, Any, Any]]:
    database = PostgresDatabase(url, lock_timeout=0.5, statement_timeout=1.0)
    ledger = PostgresLedgerStore(database)
    audit = PostgresAuditStore(database, key_file=tmp_path / "audit.key")
    yield database, ledger, audit
    database.close()


# What another session holds (an operator's psql left in BEGIN, a harness frozen
# mid-transaction), and the store operation that needs it.
HELD = [
    ("a step's row", "SELECT id FROM previews WHERE id = 'pv_1' FOR UPDATE", "transition"),
    ("the audit log's head", "LOCK TABLE audit_head IN EXCLUSIVE MODE", "append"),
    ("the previews table, for a read", "LOCK TABLE previews IN ACCESS EXCLUSIVE MODE", "read"),
]


@pytest.mark.parametrize(("what", "statement", "operation"), HELD, ids=[h[0] for h in HELD])
def test_a_lock_held_by_another_session_ends_in_a_retryable_error(
    url: str, stores: tuple[PostgresDatabase, Any, Any], what: str, statement: str, operation: str
) -> None:
    _, ledger, audit = stores
    preview = _approved(ledger)
    operations: dict[str, Callable[[], object]] = {
        "transition": _claim(ledger, preview),
        "append": lambda: audit.append([stored_event(run_id="r1", call_id="c1")]),
        "read": lambda: ledger.preview(preview.id),
    }
    with psycopg.connect(url) as holder:  # not autocommit: the lock is held until rollback
        holder.execute(statement)
        raised = _outcome(operations[operation])
        holder.rollback()
    assert isinstance(raised, LedgerError), raised
    assert (raised.code, raised.retryable) == ("ledger_locked", True)
    assert "another process" in raised.message
    assert _outcome(operations[operation]) is None  # released: the same call now succeeds


def test_a_statement_past_the_statement_timeout_ends_in_a_retryable_error(
    stores: tuple[PostgresDatabase, Any, Any],
) -> None:
    database, _, _ = stores
    raised = _outcome(lambda: database.read(lambda conn: conn.execute("SELECT pg_sleep(30)")))
    assert isinstance(raised, LedgerError), raised
    assert (raised.code, raised.retryable) == ("ledger_locked", True)
    # Not a lock wait: a long audit find or export needs a longer limit, not another try.
    assert "longer than statement_timeout" in raised.message
    assert "statement_timeout%3D" in raised.message  # how to raise it
    assert "another process" not in raised.message


# What the server reports, and what the error must say: a lock wait is someone else's (try
# again); a statement past its limit is this request's own length (raise the limit).
CANCELLED = [
    (
        "a lock wait",
        errors.LockNotAvailable("canceling statement due to lock timeout"),
        "another process",
        "statement_timeout",
    ),
    (
        "a statement past statement_timeout",
        errors.QueryCanceled("canceling statement due to statement timeout"),
        "longer than statement_timeout",
        "another process",
    ),
    (
        "a transaction left idle",
        errors.IdleInTransactionSessionTimeout("terminating connection due to idle timeout"),
        "sit idle",
        "another process",
    ),
]


@pytest.mark.parametrize(
    ("error", "says", "not_says"), [c[1:] for c in CANCELLED], ids=[c[0] for c in CANCELLED]
)
def test_a_cancelled_statement_says_why(error: Exception, says: str, not_says: str) -> None:
    with pytest.raises(LedgerError) as raised, map_postgres_errors("postgresql://h/db", "x"):
        raise error
    assert (raised.value.code, raised.value.retryable) == ("ledger_locked", True)
    assert says in raised.value.message
    assert not_says not in raised.value.message


def test_a_transaction_left_idle_loses_its_session_and_its_locks(url: str) -> None:
    database = PostgresDatabase(url, idle_in_transaction_timeout=0.2)
    ledger = PostgresLedgerStore(database)
    preview = _approved(ledger)
    with pytest.raises(LedgerError) as ended, database.transaction() as conn:  # noqa: PT012
        conn.execute("SELECT id FROM previews WHERE id = %s FOR UPDATE", (preview.id,))
        # This process stops mid-transaction (frozen, in a debugger) for longer than the
        # server lets a transaction sit idle; the server ends the session.
        deadline = time.monotonic() + _GUARD
        while _holds_a_row_lock(url) and time.monotonic() < deadline:
            time.sleep(0.05)
        conn.execute("SELECT 1")
    assert ended.value.code in ("ledger_locked", "ledger_unavailable")
    assert _outcome(_claim(ledger, preview)) is None  # its row lock went with it
    database.close()


def _holds_a_row_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as other:
        row = other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
            "AND query LIKE 'SELECT id FROM previews%%'"
        ).fetchone()
    return row is not None and row[0] > 0


# The limits every connection of the store carries, as the server reports them.
LIMITS = [
    ("lock_timeout", "5s"),
    ("statement_timeout", "30s"),
    ("idle_in_transaction_session_timeout", "1min"),
]


@pytest.mark.parametrize(("setting", "shown"), LIMITS, ids=[s for s, _ in LIMITS])
def test_the_pool_and_the_migrating_connection_carry_the_limits(
    url: str, monkeypatch: pytest.MonkeyPatch, setting: str, shown: str
) -> None:
    at_migration: list[str] = []

    def migrate(conn: psycopg.Connection[Any]) -> list[int]:
        at_migration.append(_show(conn, setting))
        return []

    PostgresDatabase(url).close()  # the schema, migrated for real
    monkeypatch.setattr(connection_module, "migrate_schema", migrate)
    database = PostgresDatabase(url)
    assert at_migration == [shown]
    assert database.read(lambda conn: _show(conn, setting)) == shown
    database.close()


def _show(conn: psycopg.Connection[Any], setting: str) -> str:
    row = conn.execute(f"SHOW {setting}").fetchone()
    assert row is not None
    return str(row[0])


def test_the_pool_notices_a_vanished_server_through_tcp_keepalives(url: str) -> None:
    database = PostgresDatabase(url)
    with database.connection() as conn:
        options = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
    database.close()
    assert {k: options[k] for k in KEEPALIVES} == {k: str(v) for k, v in KEEPALIVES.items()}


def test_what_the_url_sets_wins_over_the_defaults(url: str) -> None:
    # The URL's options (here: the test's schema, then a lock timeout) are kept, after ours.
    database = PostgresDatabase(f"{url}%20-clock_timeout%3D7s")
    ledger = PostgresLedgerStore(database)
    assert ledger.previews() == []  # the schema of the URL: migrated, and found
    assert database.read(lambda conn: _show(conn, "lock_timeout")) == "7s"
    database.close()


def test_the_servers_limits_apply_when_the_deployment_says_so(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Behind PgBouncer, which refuses a startup ``options`` it does not track, airlock must
    # send none: the server's (or the pooler's) settings apply. The URL's own options (here:
    # the test's schema) are left to libpq as they are.
    monkeypatch.setenv(LIMITS_ENV, "server")
    database = PostgresDatabase(url)
    ledger = PostgresLedgerStore(database)
    assert ledger.previews() == []  # the URL's schema: migrated, and found
    with database.connection() as conn:
        sent = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
        shown = {setting: _show(conn, setting) for setting, _ in LIMITS}
    database.close()
    assert "lock_timeout" not in sent["options"]
    assert shown == {setting: "0" for setting, _ in LIMITS}  # the server's defaults


# What the deployment sets (environment and URL), and the ``options`` airlock passes to libpq
# itself (``None``: none, so libpq sends only the URL's or PGOPTIONS', if any).
SENT = [
    ("the defaults", {}, "", "-c lock_timeout=5000 -c statement_timeout=30000"),
    ("the defaults, then the URL's", {}, "?options=-csearch_path%3Ds", "-csearch_path=s"),
    ("the server's limits", {LIMITS_ENV: "server"}, "", None),
    ("the server's limits, the URL's own", {LIMITS_ENV: "server"}, "?options=-cx%3D1", None),
    ("the server's limits, PGOPTIONS", {LIMITS_ENV: "server", "PGOPTIONS": "-cx=1"}, "", None),
    ("airlock's limits, said so", {LIMITS_ENV: "airlock"}, "", "-c lock_timeout=5000"),
]


@pytest.mark.parametrize(
    ("environ", "query", "options"), [s[1:] for s in SENT], ids=[s[0] for s in SENT]
)
def test_the_limits_sent_at_connect_follow_the_deployment(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], query: str, options: str | None
) -> None:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    arguments = connect_arguments(f"postgresql://h/db{query}", SessionLimits())
    if options is None:
        assert "options" not in arguments
    else:
        assert options in arguments["options"]
    assert arguments["keepalives"] == 1  # the socket's own, never the server's business


def test_an_unknown_choice_of_limits_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIMITS_ENV, "off")
    with pytest.raises(UsageError) as refused:
        connect_arguments("postgresql://h/db", SessionLimits())
    assert LIMITS_ENV in str(refused.value)
    assert "'server'" in str(refused.value)


def test_connections_the_server_closed_are_replaced_before_they_are_used(url: str) -> None:
    # A server restart, a failover or pg_terminate_backend closes every pooled connection.
    database = PostgresDatabase(url, min_size=3, max_size=3)
    ledger = PostgresLedgerStore(database)
    with database.connection() as a, database.connection() as b, database.connection() as c:
        pids = [conn.info.backend_pid for conn in (a, b, c)]
    with psycopg.connect(url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
    for n in range(1, 7):  # more operations than the pool held dead connections
        ledger.add_preview(make_preview(n))
    assert [p.id for p in ledger.previews()] == [f"pv_{n}" for n in range(6, 0, -1)]
    database.close()


def test_a_connection_lost_while_committing_says_the_change_may_have_been_written(
    url: str,
) -> None:
    # Whether the server committed before the connection went is unknown to this side (a
    # failover, a cut network): the error must not claim that nothing was written.
    database = PostgresDatabase(url)
    ledger = PostgresLedgerStore(database)
    with pytest.raises(LedgerError) as lost, database.transaction() as conn:  # noqa: PT012
        conn.execute("SELECT 1")
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (conn.info.backend_pid,))
    assert lost.value.code == "ledger_unavailable"
    assert "may or may not have been written" in lost.value.message
    assert ledger.add_preview(make_preview(1)).id == "pv_1"  # the pool replaced it
    database.close()
