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
    "postgresql://airlock:s3cret@db.example.net:6432/airlock?sslmode=require&password=x": (
        "outbound",
        "postgresql",
        ("postgresql://db.example.net:6432/airlock",) * 2,
        "AIRLOCK_DATABASE_URL",
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
        "sslmode",
    ):
        assert secret not in text


# OTLP endpoint given -> where the spans go (no user info, no query)
SPANS = {
    "https://collector.example.net:4318/v1/traces": "https://collector.example.net:4318/v1/traces",
    "https://op:tok@collector.example.net/v1/traces?k=v": "https://collector.example.net/v1/traces",
}


@pytest.mark.parametrize("endpoint", list(SPANS))
def test_audit_spans_are_an_outbound_destination(endpoint: str) -> None:
    assert "audit spans" not in _connections()
    spans = _connections(spans_endpoint=endpoint, spans_credential="OTEL_EXPORTER_OTLP_HEADERS")[
        "audit spans"
    ]
    assert (spans.direction, spans.kind) == ("outbound", "otlp/http")
    assert spans.target == spans.locked_as == SPANS[endpoint]
    assert spans.credential == "OTEL_EXPORTER_OTLP_HEADERS"
    assert "tok" not in spans.model_dump_json()


def test_the_approval_page_is_an_inbound_listener() -> None:
    assert "approval page" not in _connections()
    page = _connections(approval_page=("127.0.0.1", 8470))["approval page"]
    assert (page.direction, page.kind) == ("inbound", "http")
    assert page.locked_as == "http://127.0.0.1:8470; with --port PORT: http://127.0.0.1:PORT"
    assert "airlock approvals serve" in page.used_by
