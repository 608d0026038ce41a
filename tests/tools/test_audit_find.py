"""Which calls touched what: the effect index of the audit store, searched by resource,
effect kind, caller and time; and listings that name the records they returned."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, UsageError, network, read, write
from airlock.tools import (
    AuditEvent,
    AuditLog,
    MemoryAuditStore,
    RecordsRead,
    Registry,
    RunAuthority,
    SQLiteAuditStore,
    find_calls,
)
from tests.audit_events import stored_event
from tests.tools.stores import BACKENDS, make_backend


def event(call: str, *effects: str, **kw: Any) -> AuditEvent:
    fields: dict[str, Any] = {"ts": 1_000.0, "run_id": f"run_{call}", "duration_s": 0.001}
    return stored_event(**(fields | kw), call_id=call, effects=effects)


EVENTS = [
    event("get1", "read(billing:invoice/inv_1)", ts=1_000.0),
    event("get12", "read(billing:invoice/inv_12)", ts=2_000.0),
    event("get2", "read(billing:invoice/inv_2)", ts=3_000.0),
    event("list", "read(billing:invoice/*)", tool="billing_invoice_list", caller="code"),
    event("listed", "read(billing:invoice/inv_13)", "read(billing:invoice/inv_2)", caller="code"),
    event("fetch", "network(api.example.com)", tool="web_page_fetch", caller="code"),
    event(
        "preview",
        "write(billing:refund/inv_1)",
        "spend(500 USD)",
        tool="billing_refund_create",
        stage="execute",
        decision="ask",
        outcome="preview",
        code="needs_approval",
    ),
    event(
        "commit",
        "write(billing:refund/inv_1)",
        "spend(500 USD)",
        tool="billing_refund_create",
        final=False,
    ),
    event(
        "denied",
        "read(billing:invoice/inv_14)",
        stage="authorize",
        decision="deny",
        outcome="error",
    ),
]


@pytest.fixture(scope="module", params=BACKENDS)
def store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    root = tmp_path_factory.mktemp("find")
    writable = make_backend(request.param, root, request).audit()
    writable.append(EVENTS)
    yield writable
    writable.close()


# Each case: the question, the calls that answer it (certain ones, then possible ones).
QUESTIONS: list[tuple[str, dict[str, Any], list[str], list[str]]] = [
    ("one record", {"resource": "billing:invoice/inv_1"}, ["get1"], ["list"]),
    (
        "records by prefix (`*` is one or more characters)",
        {"resource": "billing:invoice/inv_1*"},
        ["get12", "listed"],
        ["list"],
    ),
    (
        "every invoice",
        {"resource": "billing:invoice/*"},
        ["get1", "get12", "get2", "list", "listed"],
        [],
    ),
    (
        "a period",
        {"resource": "billing:invoice/inv_*", "since": 1_500.0, "until": 2_500.0},
        ["get12"],
        [],
    ),
    ("a destination", {"resource": "api.example.com"}, ["fetch"], []),
    ("a committed write, not its preview", {"resource": "billing:refund/*"}, ["commit"], []),
    (
        "what was attempted too",
        {"resource": "billing:*/inv_1*", "attempted": True},
        ["get12", "listed", "denied"],
        ["list"],
    ),
    (
        "code that wrote or reached the network",
        {"caller": "code", "kinds": ["write", "network"]},
        ["fetch"],
        [],
    ),
    ("every write that ran", {"kinds": ["write"]}, ["commit"], []),
    ("every spend attempted", {"kinds": ["spend"], "attempted": True}, ["preview", "commit"], []),
    ("one tool", {"tool": "web_page_fetch"}, ["fetch"], []),
    ("nothing there", {"resource": "orders:order/*"}, [], []),
]


@pytest.mark.parametrize(
    ("name", "question", "certain", "possible"), QUESTIONS, ids=[q[0] for q in QUESTIONS]
)
def test_find_answers_with_certain_and_possible_calls(
    store: Any,
    name: str,
    question: dict[str, Any],
    certain: list[str],
    possible: list[str],
) -> None:
    found = find_calls(store, **question)
    assert [f.call_id for f in found if f.certain] == certain, name
    assert [f.call_id for f in found if not f.certain] == possible, name
    for call in found:
        assert call.matched
        assert call.record == 1 + [e.call_id for e in EVENTS].index(call.call_id)


def test_find_names_the_matching_effects_only(store: Any) -> None:
    [listed] = [f for f in find_calls(store, resource="billing:invoice/inv_1*") if f.certain][1:]
    assert listed.matched == ("read(billing:invoice/inv_13)",)


# (what a tool recorded, the resource asked about, how the call is listed: None when not at
# all). A recorded pattern is listed as possible only when it can stand for a target inside
# the resource; one that cannot (`*` stops at `/`, a literal part differs) is no match.
OVERLAPS: list[tuple[str, str, str | None]] = [
    ("billing:invoice/inv_1", "billing:invoice/inv_1", "certain"),
    ("billing:invoice/inv_12", "billing:invoice/inv_1*", "certain"),
    ("billing:invoice/inv_1*", "billing:invoice/inv_*", "certain"),
    ("billing:invoice/*", "billing:invoice/inv_1", "possible"),
    ("billing:**", "billing:invoice/inv_1", "possible"),
    ("billing:*/inv_1", "billing:invoice/inv_1", "possible"),
    ("billing:*/*", "billing:invoice/inv_1", "possible"),
    ("billing:invoice/inv_*", "billing:invoice/inv_1*", "possible"),
    ("billing:invoice/*_1", "billing:invoice/inv_*", "possible"),
    ("billing:**/inv_1", "billing:*/inv_1", "possible"),
    ("billing:*", "billing:invoice/inv_1", None),  # one segment: it cannot hold the `/`
    ("billing:*/inv_2", "billing:invoice/inv_1", None),
    ("billing:invoice/*/x", "billing:invoice/inv_1", None),
    ("billing:invoice/inv_2*", "billing:invoice/inv_1*", None),
    ("billing:*", "billing:*/inv_1", None),
    ("billing:invoice/*", "billing:invoice/", None),  # `*` is one or more characters
    ("billing:invoice/**", "billing:invoice/a/b/c", "possible"),
]


@pytest.mark.parametrize(("recorded", "resource", "listed"), OVERLAPS)
def test_a_recorded_pattern_is_possible_only_when_it_can_match_the_resource(
    tmp_path: Path, recorded: str, resource: str, listed: str | None
) -> None:
    store = SQLiteAuditStore(tmp_path / "audit.db")
    try:
        store.append([event("c1", f"read({recorded})")])
        found = find_calls(store, resource=resource)
    finally:
        store.close()
    assert [("certain" if f.certain else "possible") for f in found] == ([listed] if listed else [])


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ({"resource": "billing:invoice/inv_1 OR 1=1"}, "must be 1-256 characters"),
        ({"resource": ""}, "must be 1-256 characters"),
        ({"kinds": ["delete"]}, "unknown"),
    ],
)
def test_find_refuses_what_is_not_a_question(
    store: Any, question: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        find_calls(store, **question)


# -- listings that name the records they returned ------------------------------------------


class Row(BaseModel):
    invoice_id: str
    amount_minor: int


class Page(BaseModel):
    invoices: list[Row]
    count: int


class NotAList(BaseModel):
    invoices: Row


ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read"}))
GRANT = Grant(
    scopes=frozenset({"billing.read"}),
    effects=(read("billing:invoice/*"), network("api.billing.example")),
)
RECORDS_READ = RecordsRead("invoices", read("billing:invoice/{invoice_id}"))


def listing(rows: list[dict[str, Any]], **options: Any) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    options = {"records": RECORDS_READ, "output": Page} | options

    @registry.tool(
        effects=[read("billing:invoice/*"), network("api.billing.example")],
        scope="billing.read",
        callers={"direct", "code"},
        **options,
    )
    def billing_invoice_list(
        status: Annotated[str, Field(max_length=10, pattern="^[a-z]+$")],
    ) -> dict[str, Any]:
        """List the invoices of your account. Use it to scan many invoices at once. It does
        not return notes or card details."""
        return {"invoices": rows, "count": len(rows)}

    return registry


async def call_effects(registry: Registry) -> tuple[str, ...]:
    ctx = RunAuthority(principal=ALICE, grant=GRANT).context("code", "c1")
    await registry.call("billing_invoice_list", {"status": "paid"}, ctx)
    [recorded] = registry.audit.events()
    return recorded.effects


@pytest.mark.anyio
async def test_a_listing_records_one_read_per_record_it_returned() -> None:
    rows = [{"invoice_id": "inv_1", "amount_minor": 5}, {"invoice_id": "inv_7", "amount_minor": 9}]
    assert await call_effects(listing(rows)) == (
        "network(api.billing.example)",
        "read(billing:invoice/inv_1)",
        "read(billing:invoice/inv_7)",
    )


@pytest.mark.anyio
async def test_an_empty_listing_read_no_record() -> None:
    assert await call_effects(listing([])) == ("network(api.billing.example)",)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "rows",
    [
        [{"invoice_id": "inv/../x", "amount_minor": 1}],  # not one id segment
        [{"invoice_id": "inv_*", "amount_minor": 1}],  # a wildcard is not a record
    ],
    ids=["path", "wildcard"],
)
async def test_records_that_cannot_name_themselves_keep_the_pattern(
    rows: list[dict[str, Any]],
) -> None:
    assert "read(billing:invoice/*)" in await call_effects(listing(rows))


@pytest.mark.anyio
async def test_without_records_a_listing_keeps_its_pattern() -> None:
    rows = [{"invoice_id": "inv_1", "amount_minor": 5}]
    effects = await call_effects(listing(rows, records=None))
    assert "read(billing:invoice/*)" in effects


# Each case: a records declaration that does not fit the tool, and what the refusal says.
BAD_RECORDS: list[tuple[str, dict[str, Any], str]] = [
    ("no such field", {"records": RecordsRead("rows", RECORDS_READ.effect)}, "not a field of Page"),
    ("not a list", {"output": NotAList}, "must be a list of pydantic models"),
    (
        "placeholder not a field",
        {"records": RecordsRead("invoices", read("billing:invoice/{id}"))},
        "not fields of Row",
    ),
    (
        "outside the declared reads",
        {"records": RecordsRead("invoices", read("orders:order/{invoice_id}"))},
        "not covered",
    ),
    (
        "not a read",
        {"records": RecordsRead("invoices", write("billing:invoice/{invoice_id}"))},
        "must be a read",
    ),
]


@pytest.mark.parametrize(
    ("name", "options", "message"), BAD_RECORDS, ids=[b[0] for b in BAD_RECORDS]
)
def test_a_records_declaration_that_does_not_fit_is_refused_at_registration(
    name: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        listing([], **options)


def test_find_reads_a_large_log_through_its_indexes(tmp_path: Path) -> None:
    store = SQLiteAuditStore(tmp_path / "audit.db", synchronous="OFF")
    store.append([event(f"c{i}", f"read(billing:invoice/inv_{i})") for i in range(3000)])
    plan = store.read(
        lambda conn: conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM audit_effects x JOIN audit_events e "
            "ON e.id = x.event_id WHERE x.prefix IS NULL AND x.target >= ? AND x.target < ?",
            ("billing:invoice/inv_1", "billing:invoice/inv_2"),
        ).fetchall()
    )
    assert any("audit_effects_target" in str(row) for row in plan), plan
    found = find_calls(store, resource="billing:invoice/inv_29*")
    assert [f.call_id for f in found] == [
        f"c{i}" for i in range(3000) if str(i).startswith("29") and i > 29
    ]
    store.close()


def test_find_reads_a_large_postgres_log_through_its_indexes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_backend("postgres", tmp_path, request).audit()
    store.append([event(f"c{i}", f"read(billing:invoice/inv_{i})") for i in range(3000)])
    store.read(lambda conn: conn.execute("ANALYZE audit_effects"))
    plan = store.read(
        lambda conn: conn.execute(
            "EXPLAIN SELECT event_id FROM audit_effects "
            "WHERE prefix IS NULL AND target >= ? AND target < ?",
            ("billing:invoice/inv_29", "billing:invoice/inv_2:"),
        ).fetchall()
    )
    assert any("audit_effects_target" in str(row) for row in plan), plan
    found = find_calls(store, resource="billing:invoice/inv_29*")
    assert [f.call_id for f in found] == [
        f"c{i}" for i in range(3000) if str(i).startswith("29") and i > 29
    ]
    store.close()
