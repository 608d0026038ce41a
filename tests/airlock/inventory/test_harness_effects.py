"""The harness's own connections as the inventory lists them: where the audit log and the
ledger are (SQLite files or a database a URL names, never its password), where audit spans
go, and the listeners airlock's commands open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airlock.inventory import HarnessConnection, harness_connections

HOME = Path("/srv/airlock")


def _connections(**given: Any) -> dict[str, HarnessConnection]:
    found = harness_connections(
        home=HOME,
        model_endpoint="https://api.anthropic.com/v1/messages",
        model_credential="ANTHROPIC_API_KEY",
        mcp_host="127.0.0.1",
        docker_host=None,
        **given,
    )
    return {c.name: c for c in found}


# database URL -> (direction, kind, target and locked_as of both stores, credential)
STORES: dict[str | None, tuple[str, str, tuple[str, str], str | None]] = {
    None: ("local", "sqlite file", ("/srv/airlock/audit.db", "/srv/airlock/ledger.db"), None),
    "sqlite:///var/db/airlock": (
        "local",
        "sqlite file",
        ("/var/db/airlock/audit.db", "/var/db/airlock/ledger.db"),
        None,
    ),
    "postgresql://airlock@db.example.net/airlock": (
        "outbound",
        "postgresql",
        ("postgresql://db.example.net/airlock",) * 2,
        None,
    ),
    # sslmode is no secret: a downgrade (require -> disable) changes what is locked.
    "postgresql://airlock:s3cret@db.example.net:6432/airlock?sslmode=require&password=x": (
        "outbound",
        "postgresql",
        ("postgresql://db.example.net:6432/airlock?sslmode=require",) * 2,
        "AIRLOCK_DATABASE_URL",
    ),
    # A service names its host and port in a service file: the service is where it connects.
    "postgresql://airlock@/airlock?service=prod": (
        "outbound",
        "postgresql",
        ("postgresql://$PGHOST/airlock?service=prod",) * 2,
        None,
    ),
    "postgresql://u@db.example.net/x?servicefile=/etc/pg.conf&service=a&hostaddr=10.0.0.1": (
        "outbound",
        "postgresql",
        ("postgresql://db.example.net/x?servicefile=/etc/pg.conf&service=a&hostaddr=10.0.0.1",) * 2,
        None,
    ),
    # A port alone names no host: libpq still takes PGHOST.
    "postgresql://u@:5433/x": (
        "outbound",
        "postgresql",
        ("postgresql://$PGHOST:5433/x",) * 2,
        None,
    ),
    "postgres://ops%40corp:pw@DB.Example.NET/Ledger": (
        "outbound",
        "postgresql",
        ("postgresql://db.example.net/Ledger",) * 2,
        "AIRLOCK_DATABASE_URL",
    ),
    "postgresql://u@h1:5433,h2/x": (
        "outbound",
        "postgresql",
        ("postgresql://h1:5433,h2/x",) * 2,
        None,
    ),
    "postgresql://u@/airlock?host=/var/run/postgresql&port=5433&user=u": (
        "outbound",
        "postgresql",
        ("postgresql:///airlock?host=/var/run/postgresql&port=5433",) * 2,
        None,
    ),
    # No host: libpq takes PGHOST, else its local socket; it may be another machine.
    "postgresql:///airlock": (
        "outbound",
        "postgresql",
        ("postgresql://$PGHOST/airlock",) * 2,
        None,
    ),
}


@pytest.mark.parametrize("url", list(STORES), ids=str)
def test_the_stores_are_where_the_database_url_says(url: str | None) -> None:
    direction, kind, (audit, ledger), credential = STORES[url]
    found = _connections(database=url)
    for name, where in (("audit store", audit), ("ledger", ledger)):
        store = found[name]
        assert (store.direction, store.kind, store.credential) == (direction, kind, credential)
        assert store.target == where
        if url is not None:
            assert store.locked_as == where
    assert found["audit store"].locked_as == ("$AIRLOCK_HOME/audit.db" if url is None else audit)


@pytest.mark.parametrize("url", [u for u in STORES if u is not None])
def test_no_password_or_user_name_is_listed(url: str) -> None:
    text = " ".join(c.model_dump_json() for c in _connections(database=url).values())
    for secret in (
        "s3cret",
        "password=x",
        "ops%40corp",
        "ops@corp",
        "user=u",
        "airlock@",
        "pw@",
    ):
        assert secret not in text


# libpq's variables fill what the URL leaves out and move the connection as the URL would.
# name: (URL, environment, what both stores lock, credential)
LIBPQ: dict[str, tuple[str, dict[str, str], str, str | None]] = {
    "PGHOSTADDR and PGPORT beside a named host": (
        "postgresql://airlock@db.example.net/airlock",
        {"PGHOSTADDR": "127.0.0.1", "PGPORT": "55432"},
        "postgresql://db.example.net/airlock?hostaddr=$PGHOSTADDR(127.0.0.1)&port=$PGPORT(55432)",
        None,
    ),
    "PGHOST when the URL names no host": (
        "postgresql:///airlock",
        {"PGHOST": "db2.example.net"},
        "postgresql://$PGHOST(db2.example.net)/airlock",
        None,
    ),
    "PGHOST beside a port alone": (
        "postgresql://u@:5433/a",
        {"PGHOST": "db2.example.net"},
        "postgresql://$PGHOST(db2.example.net):5433/a",
        None,
    ),
    "the URL's host wins over PGHOST": (
        "postgresql://u@db.example.net/a",
        {"PGHOST": "db2.example.net"},
        "postgresql://db.example.net/a",
        None,
    ),
    "host= wins over PGHOST": (
        "postgresql:///a?host=/run/pg",
        {"PGHOST": "db2.example.net"},
        "postgresql:///a?host=/run/pg",
        None,
    ),
    "the URL's port wins over PGPORT": (
        "postgresql://u@h1,h2:6432/a",
        {"PGPORT": "1"},
        "postgresql://h1,h2:6432/a",
        None,
    ),
    "the URL's hostaddr wins over PGHOSTADDR": (
        "postgresql://u@h/a?hostaddr=10.0.0.1",
        {"PGHOSTADDR": "10.9.9.9"},
        "postgresql://h/a?hostaddr=10.0.0.1",
        None,
    ),
    "PGSERVICE and its file": (
        "postgresql://u@/a",
        {"PGSERVICE": "reports", "PGSERVICEFILE": "/etc/pg_service.conf"},
        "postgresql://$PGHOST/a?service=$PGSERVICE(reports)"
        "&servicefile=$PGSERVICEFILE(/etc/pg_service.conf)",
        None,
    ),
    "the URL's service wins over PGSERVICE, and its file is read": (
        "postgresql://u@/a?service=prod",
        {"PGSERVICE": "reports", "PGSERVICEFILE": "/etc/x"},
        "postgresql://$PGHOST/a?service=prod&servicefile=$PGSERVICEFILE(/etc/x)",
        None,
    ),
    "no service: the service file is never read": (
        "postgresql://u@h/a",
        {"PGSERVICEFILE": "/etc/x"},
        "postgresql://h/a",
        None,
    ),
    "PGSSLMODE when the URL names none": (
        "postgresql://u@h/a",
        {"PGSSLMODE": "disable"},
        "postgresql://h/a?sslmode=$PGSSLMODE(disable)",
        None,
    ),
    "the URL's sslmode wins over PGSSLMODE": (
        "postgresql://u@h/a?sslmode=verify-full",
        {"PGSSLMODE": "disable"},
        "postgresql://h/a?sslmode=verify-full",
        None,
    ),
    "PGPASSWORD is sent when the URL holds no password": (
        "postgresql://u@h/a",
        {"PGPASSWORD": "pw-env"},
        "postgresql://h/a",
        "PGPASSWORD",
    ),
    "the URL's password wins over PGPASSWORD": (
        "postgresql://u:x@h/a",
        {"PGPASSWORD": "pw-env"},
        "postgresql://h/a",
        "AIRLOCK_DATABASE_URL",
    ),
    "set empty is unset": (
        "postgresql://u@h/a",
        {"PGHOSTADDR": "", "PGPORT": "", "PGPASSWORD": ""},
        "postgresql://h/a",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(LIBPQ))
def test_libpq_variables_move_the_stores_as_the_url_would(case: str) -> None:
    url, environ, where, credential = LIBPQ[case]
    found = _connections(database=url, environ=environ)
    for name in ("audit store", "ledger"):
        store = found[name]
        assert (store.target, store.locked_as, store.credential) == (where, where, credential)
        assert "pw-env" not in store.model_dump_json()
    # SQLite stores are files: libpq's variables do not move them.
    assert _connections(environ=environ)["ledger"] == _connections()["ledger"]


# OTLP endpoint, headers variable -> where the spans go (no user info, no query) and the
# credentials sent (the endpoint's user and password go as basic authentication)
SPANS: dict[tuple[str, str | None], tuple[str, str | None]] = {
    ("https://collector.example.net:4318/v1/traces", None): (
        "https://collector.example.net:4318/v1/traces",
        None,
    ),
    ("https://collector.example.net:4318/v1/traces", "OTEL_EXPORTER_OTLP_HEADERS"): (
        "https://collector.example.net:4318/v1/traces",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ),
    ("https://op:tok@collector.example.net/v1/traces?k=v", None): (
        "https://collector.example.net/v1/traces",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ),
    ("https://op:tok@collector.example.net/v1/traces?k=v", "OTEL_EXPORTER_OTLP_HEADERS"): (
        "https://collector.example.net/v1/traces",
        "OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_ENDPOINT",
    ),
}


@pytest.mark.parametrize(("endpoint", "headers"), list(SPANS))
def test_audit_spans_are_an_outbound_destination(endpoint: str, headers: str | None) -> None:
    assert "audit spans" not in _connections()
    spans = _connections(spans_endpoint=endpoint, spans_credential=headers)["audit spans"]
    assert (spans.direction, spans.kind) == ("outbound", "otlp/http")
    where, credential = SPANS[endpoint, headers]
    assert spans.target == spans.locked_as == where
    assert spans.credential == credential
    assert "tok" not in spans.model_dump_json()


def test_the_spans_credential_names_the_variable_that_holds_the_endpoint() -> None:
    endpoint = "https://op:tok@collector.example.net/v1/traces"
    variable = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    spans = _connections(spans_endpoint=endpoint, spans_variable=variable)["audit spans"]
    assert spans.credential == variable


def test_the_approval_page_is_an_inbound_listener() -> None:
    assert "approval page" not in _connections()
    page = _connections(approval_page=("127.0.0.1", 8470))["approval page"]
    assert (page.direction, page.kind) == ("inbound", "http")
    assert page.locked_as == "http://127.0.0.1:8470; with --port PORT: http://127.0.0.1:PORT"
    assert "airlock approvals serve" in page.used_by
