"""What a session leaves in the audit log: durable by default under $AIRLOCK_HOME, each
program's text by hash, who approved each write, writes counted as exercised only once
committed, and every call as an OpenTelemetry span."""

from __future__ import annotations

import http.server
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from airlock import Budget, Harness, MissingExtraError
from airlock.harness import EXECUTE_CODE, AuditSpans, airlock_home
from airlock.inventory import exercised
from airlock.policies import UsageError
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import (
    AuditLog,
    MemoryAuditStore,
    SQLiteAuditStore,
    approve_preview,
    program_hash,
)
from tests.airlock.session_world import ALICE, World, policy
from tests.tools.billing import Handled, build_registry

pytestmark = pytest.mark.anyio

REFUND = "billing_refund_create"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_airlock_home_reads_the_environment(tmp_path: Path) -> None:
    assert airlock_home({"AIRLOCK_HOME": str(tmp_path)}) == tmp_path
    assert airlock_home({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "airlock"
    assert airlock_home({}) == Path.home() / ".local" / "state" / "airlock"


async def test_a_harness_without_a_store_writes_audit_db_under_airlock_home(home: Path) -> None:
    tools = registry_with_default_log()
    harness = Harness(tools, policy(), ScriptedBackend([]))
    assert isinstance(harness.audit.store, SQLiteAuditStore)
    session = harness.session(ALICE)
    await session.call("billing_invoice_get", {"invoice_id": "inv_1"})
    # Durable when the call returned: another reader sees it at once.
    reader = SQLiteAuditStore(home / "audit.db", readonly=True)
    [stored] = reader.query(run_id=session.run_id)
    assert stored.effects == ("read(billing:invoice/inv_1)",)
    assert reader.verify().ok
    reader.close()
    assert (home / "audit.db.key").exists()


def test_a_store_given_to_the_harness_and_another_to_the_registry_is_refused() -> None:
    tools = build_registry(Handled())  # its own memory store
    with pytest.raises(UsageError, match="not to both"):
        Harness(tools, policy(), ScriptedBackend([]), audit=MemoryAuditStore())


def test_a_memory_store_keeps_a_harness_off_the_disk(home: Path) -> None:
    Harness(registry_with_default_log(), policy(), ScriptedBackend([]), audit=MemoryAuditStore())
    assert not home.exists()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, ScriptedBackend(lambda program, profile: ok_result(len(program))))
    yield w
    w.close()


async def test_each_program_text_is_stored_by_its_hash(world: World) -> None:
    session = world.session()
    program = "answer = 6 * 7\nanswer\n"
    await session.call(EXECUTE_CODE, {"code": program})
    await session.call(EXECUTE_CODE, {"code": program})
    records = [e for e in world.registry.audit.events(run_id=session.run_id)]
    assert [e.tool for e in records] == [EXECUTE_CODE, EXECUTE_CODE]
    assert {e.args_hash for e in records} == {program_hash(program)}
    assert world.registry.audit.program(program_hash(program)) == program


async def test_a_write_is_exercised_once_committed_and_names_its_approver(world: World) -> None:
    session = world.session()
    paused = await session.call(REFUND, {"invoice_id": "inv_3", "reason": "duplicate"})
    assert paused.code == "needs_approval"
    events = world.registry.audit.events(run_id=session.run_id)
    assert [(e.outcome, e.exercised) for e in events] == [("preview", False)]
    assert exercised(events) == []  # a proposed write changed nothing

    preview_id = session.pending()[0].preview_id
    approve_preview(world.ledger, preview_id, approver="bob", now=time.time())  # elsewhere
    committed = await session.resume()
    assert committed.code is None, committed.content

    events = world.registry.audit.events(run_id=session.run_id)
    [done] = exercised(events)
    assert (done.tool, done.stage, done.outcome, done.final) == (REFUND, "done", "ok", False)
    assert done.approver == "bob"
    assert "write(billing:refund/inv_3)" in done.effects


async def test_an_approval_in_process_and_by_policy_name_the_approver(tmp_path: Path) -> None:
    (tmp_path / "ask").mkdir()
    (tmp_path / "allow").mkdir()
    asked = World(tmp_path / "ask", ScriptedBackend([]))
    allowed = World(tmp_path / "allow", ScriptedBackend([]), action="allow")
    try:
        session = asked.session()
        await session.call(REFUND, {"invoice_id": "inv_3", "reason": "duplicate"})
        assert asked.harness.writes is not None
        asked.harness.writes.approve(session.pending()[0].preview_id, approver="carol")
        [approval] = [e for e in asked.registry.audit.events() if e.stage == "authorize"]
        assert (approval.approver, approval.decision, approval.final) == ("carol", "allow", False)

        await allowed.session().call(REFUND, {"invoice_id": "inv_4", "reason": "duplicate"})
        approvers = {e.stage: e.approver for e in allowed.registry.audit.events() if not e.final}
        assert approvers == {"authorize": "policy:refunds-allow", "done": "policy:refunds-allow"}
    finally:
        asked.close()
        allowed.close()


# -- OpenTelemetry -------------------------------------------------------------------------


async def test_every_call_and_program_is_a_span_of_its_runs_trace(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    world = World(tmp_path, ScriptedBackend([ok_result(1)]))
    world.registry.audit.add_sink(AuditSpans(provider))
    try:
        session = world.session()
        await session.call(EXECUTE_CODE, {"code": "1"})
        await session.call("billing_invoice_get", {"invoice_id": "inv_1"})
        await session.call("billing_invoice_get", {"invoice_id": "inv_404"})
        world.registry.audit.flush()
        deadline = time.monotonic() + 5
        while len(exporter.get_finished_spans()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # sinks run on the writer thread after the write
    finally:
        world.close()
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["airlock.program", "airlock.tool_call", "airlock.tool_call"]
    assert len({s.context.trace_id for s in spans}) == 1  # one trace per run
    program, found, missing = (dict(s.attributes or {}) for s in spans)
    assert program["airlock.args_hash"] == program_hash("1")
    assert found["airlock.tool"] == "billing_invoice_get"
    assert found["airlock.caller"] == "direct"
    assert found["airlock.principal"] == "alice@acme"
    assert found["enduser.id"] == "alice"
    assert found["airlock.effects"] == ("read(billing:invoice/inv_1)",)
    assert found["airlock.outcome"] == "ok"
    assert (missing["airlock.outcome"], missing["airlock.code"]) == ("error", "not_found")
    assert spans[2].status.status_code.name == "ERROR"
    assert spans[1].end_time >= spans[1].start_time


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that keeps what it was sent."""

    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Collector.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


async def test_spans_go_over_otlp_when_the_endpoint_is_set(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    Collector.received.clear()
    try:
        tools = registry_with_default_log()
        harness = Harness(tools, policy(), ScriptedBackend([]))
        await harness.session(ALICE).call("billing_invoice_get", {"invoice_id": "inv_1"})
        harness.audit.close()  # flushes the audit log, then the span exporter
    finally:
        server.shutdown()
    [(path, body)] = Collector.received
    assert path == "/v1/traces"
    assert b"airlock.tool_call" in body
    assert b"read(billing:invoice/inv_1)" in body


def registry_with_default_log() -> Any:
    tools = build_registry(Handled())
    tools.audit = AuditLog()  # what Registry() gives: provisional, in memory
    return tools


def test_otlp_configured_without_the_extra_says_which_to_install(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    tools = build_registry(Handled())
    with pytest.raises(MissingExtraError) as caught:
        Harness(tools, policy(), ScriptedBackend([]))
    message = str(caught.value)
    assert "pip install 'airlock[otel]'" in message
    assert "\n" not in message
    assert caught.value.extra == "otel"


async def test_a_call_refused_for_the_budget_is_recorded_too(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(calls=1))
    try:
        session = world.session()
        await session.call("billing_invoice_get", {"invoice_id": "inv_1"})
        refused = await session.call("billing_invoice_get", {"invoice_id": "inv_2"})
        assert refused.code == "limit_exceeded"
        events = world.registry.audit.events(run_id=session.run_id)
        assert [(e.outcome, e.code, e.rule) for e in events] == [
            ("ok", None, "default"),
            ("error", "limit_exceeded", "budget"),
        ]
        assert len({e.call_id for e in events}) == 2
    finally:
        world.close()


def test_audit_spans_without_opentelemetry_say_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'airlock\[otel\]'"):
        AuditSpans()
