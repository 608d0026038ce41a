"""The harness end to end with the real sandbox: execute_code programs in containers call
read tools through the bridge; writes pause for approval and commit once."""

from __future__ import annotations

import json
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import airlock
from airlock import Harness, ModelResult, Session, harness
from airlock.bridge import ToolSession
from airlock.harness import NoToolsWarning
from airlock.policies import Grant, Principal, SandboxProfile, UsageError, parse_policy
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import Registry, SQLiteLedgerStore, WritePath, approve_preview
from airlock.tools.testing import SystemOfRecord
from tests.airlock.session_world import ALICE, World, policy, registry
from tests.conftest import Sandbox
from tests.public_api import assert_public_api


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


# The harness's public API, changed only on purpose: a name added or removed fails this test.
HARNESS_API = [
    "DATABASE_ENV",
    "EXECUTE_CODE",
    "HARNESS_CODES",
    "ArtifactStore",
    "AuditSpans",
    "Budget",
    "CommitAuthority",
    "ExecuteCodeArgs",
    "Harness",
    "HarnessCode",
    "ModelResult",
    "ModelTool",
    "ModelToolSurface",
    "NoToolsWarning",
    "PendingWrite",
    "Session",
    "airlock_home",
    "database_url",
    "failure",
    "is_postgres",
    "open_audit_store",
    "open_ledger",
]


def test_public_api_is_pinned() -> None:
    assert_public_api(harness, HARNESS_API)
    # The root re-exports the names a session needs (pinned in tests/airlock), the same objects.
    for name in ("Budget", "Harness", "ModelResult", "ModelTool", "ModelToolSurface", "Session"):
        assert name in airlock.__all__
        assert getattr(airlock, name) is getattr(harness, name)


DENY_ALL = """
version = 1
[principals.alice]
scopes = ["billing.read", "notes.read"]
effects = ["read(billing:**)", "read(notes:note/*)", "network(api.orders.example)"]
[[principals.alice.rules]]
id = "frozen"
action = "deny"
"""


@pytest.mark.parametrize(
    ("principal", "rules", "reason"),
    [
        (Principal(user_id="alice", tenant_id="acme"), None, "it has no scopes; its tools need"),
        (
            Principal(user_id="mallory", tenant_id="acme", scopes=frozenset({"billing.read"})),
            None,
            "every tool is refused, first billing_broken_get: the grant lacks scope 'billing.read'",
        ),
        (
            ALICE,
            DENY_ALL,
            "every tool is refused, first billing_broken_get: approval rule(s) frozen deny "
            "every call",
        ),
    ],
    ids=["no-scopes", "not-in-the-policy", "every-call-denied"],
)
def test_a_session_that_reaches_no_tool_warns_why(
    tmp_path: Path, principal: Principal, rules: str | None, reason: str
) -> None:
    system = SystemOfRecord(tmp_path / "system.db")
    chosen = policy() if rules is None else parse_policy(rules)
    try:
        harness = Harness(registry(system), chosen, ScriptedBackend([]))
        with pytest.warns(NoToolsWarning) as warned:
            session = harness.session(principal)
    finally:
        system.close()
    assert [t.name for t in session.tools()] == ["execute_code"]
    # Only this warning's count is the claim: a ResourceWarning from an earlier test's object,
    # collected while the block runs, lands in the same list.
    [warning] = [w for w in warned.list if issubclass(w.category, NoToolsWarning)]
    found = warning.message
    assert isinstance(found, NoToolsWarning)
    assert found.reason.startswith(reason), found.reason
    assert (found.user_id, found.tenant_id, found.scopes) == (
        principal.user_id,
        principal.tenant_id,
        principal.scopes,
    )
    text = str(found)
    assert f"principal {principal.user_id!r} in tenant 'acme'" in text
    assert f"(scopes: {', '.join(sorted(principal.scopes)) or 'none'})" in text
    assert warning.filename == __file__  # points at the caller of Harness.session


def test_a_session_that_reaches_a_tool_does_not_warn(tmp_path: Path) -> None:
    system = SystemOfRecord(tmp_path / "system.db")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Harness(registry(system), policy(), ScriptedBackend([])).session(ALICE)
            Harness(Registry(), policy(), ScriptedBackend([])).session(ALICE)  # no tools at all
    finally:
        system.close()


def test_harness_without_ledger_offers_no_write_tools(tmp_path: Path) -> None:
    system = SystemOfRecord(tmp_path / "system.db")
    try:
        harness = Harness(registry(system), policy(), ScriptedBackend([]))
        names = [t.name for t in harness.session(ALICE).tools()]
    finally:
        system.close()
    assert "billing_refund_create" not in names
    assert "billing_invoice_get" in names


def test_harness_uses_an_attached_write_path_or_refuses_a_second(tmp_path: Path) -> None:
    system = SystemOfRecord(tmp_path / "system.db")
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    other = SQLiteLedgerStore(tmp_path / "other.db")
    try:
        tools = registry(system)
        writes = WritePath(tools, ledger)
        harness = Harness(tools, policy(), ScriptedBackend([]), ledger, writes=writes)
        assert harness.writes is writes
        with pytest.raises(UsageError):
            Harness(tools, policy(), ScriptedBackend([]), other)  # would attach a second
        with pytest.raises(UsageError):
            Harness(tools, policy(), ScriptedBackend([]), other, writes=writes)
    finally:
        ledger.close()
        other.close()
        system.close()


# -- real containers ---------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path, sandbox: Sandbox) -> Iterator[World]:
    w = World(tmp_path, sandbox.backend)
    yield w
    w.close()


def call(sandbox: Sandbox, session: Session, name: str, arguments: dict[str, Any]) -> ModelResult:
    return sandbox.loop.call(session.call(name, arguments))


@pytest.mark.docker
def test_execute_code_reads_through_the_bridge(sandbox: Sandbox, world: World) -> None:
    session = world.session()
    program = textwrap.dedent("""
        amounts = {}
        for invoice in ["inv_1", "inv_2", "inv_9", "inv_404"]:
            try:
                amounts[invoice] = tools.billing_invoice_get(invoice_id=invoice)["amount_minor"]
            except tools.NotFound:
                amounts[invoice] = None
        print("read", len(amounts))
        amounts
    """)
    result = call(sandbox, session, "execute_code", {"code": program})

    assert (result.is_error, result.code) == (False, None), result.content
    assert body(result) == {
        "value": {"inv_1": 1200, "inv_2": 50, "inv_9": None, "inv_404": None},
        "stdout": "read 4\n",
    }
    events = world.registry.audit.events(run_id=session.run_id)
    reads = [e for e in events if e.tool == "billing_invoice_get"]
    assert all(e.call_id.startswith(f"{session.run_id}:m1-") for e in reads)
    assert len({e.call_id for e in reads}) == 4
    assert [(e.caller, e.outcome) for e in reads] == [("code", "ok")] * 2 + [("code", "error")] * 2


@pytest.mark.docker
@pytest.mark.parametrize(
    ("program", "code", "field"),
    [
        ("raise ValueError('boom')", "program_error", ("type", "ValueError")),
        ("'x' * 50_000", "result_too_large", ("limit_bytes", 32_000)),
        # a write is not callable from code: the program fails, nothing is prepared
        (
            "tools.billing_refund_create(invoice_id='inv_1', reason='duplicate')",
            "program_error",
            ("tool_error", "unknown_tool"),
        ),
        ("import socket", "invalid_program", None),
    ],
    ids=["raises", "too-large", "write-from-code", "import"],
)
def test_program_failures_in_real_containers(
    sandbox: Sandbox, world: World, program: str, code: str, field: tuple[str, object] | None
) -> None:
    result = call(sandbox, world.session(), "execute_code", {"code": program})

    assert (result.is_error, result.code) == (True, code), result.content
    if field is not None:
        assert body(result)[field[0]] == field[1]
    assert world.ledger.previews() == []
    assert world.system.sends() == 0


@pytest.mark.docker
def test_a_program_past_its_deadline_is_a_limit_hit(tmp_path: Path, sandbox: Sandbox) -> None:
    world = World(tmp_path, sandbox.backend, profile=SandboxProfile(timeout_s=1.5))
    try:
        result = call(sandbox, world.session(), "execute_code", {"code": "while True:\n    pass"})
    finally:
        world.close()
    assert (result.is_error, result.code) == (True, "limit_exceeded")
    assert body(result)["limit"] == "timeout"


@pytest.mark.docker
def test_find_in_code_then_write_pauses_and_commits_after_approval(
    sandbox: Sandbox, world: World
) -> None:
    session = world.session()
    found = call(
        sandbox,
        session,
        "execute_code",
        {"code": "[i for i in ['inv_1', 'inv_2'] "
                 "if tools.billing_invoice_get(invoice_id=i)['amount_minor'] > 100]"},
    )  # fmt: skip
    assert body(found)["value"] == ["inv_1"]

    paused = call(sandbox, session, "billing_refund_create",
                  {"invoice_id": "inv_1", "reason": "duplicate"})  # fmt: skip
    assert paused.code == "needs_approval"
    preview_id = body(paused)["preview_id"]
    approve_preview(world.ledger, preview_id, approver="bob", now=time.time())

    receipt = sandbox.loop.call(session.resume(preview_id))
    again = sandbox.loop.call(session.resume(preview_id))
    assert body(receipt)["receipt"]["amount_minor"] == 1001
    assert again.content == receipt.content
    assert world.system.effects() == 1


# -- session mode: one kept container per conversation -----------------------------------


@pytest.mark.docker
def test_kept_session_programs_build_on_earlier_state(sandbox: Sandbox, world: World) -> None:
    kept = world.harness.session(ALICE, keep_state=True)
    plain = world.session()
    try:
        steps = [
            "counts = {'a': 1}\ndef double(x):\n    return 2 * x",
            "double(counts['a']) + 40",
            "def amount(i):\n    return tools.billing_invoice_get(invoice_id=i)['amount_minor']",
            "[amount('inv_1'), amount('inv_2')]",
        ]
        values = [body(call(sandbox, kept, "execute_code", {"code": s})) for s in steps]
        forgotten = call(sandbox, plain, "execute_code", {"code": "counts"})
    finally:
        sandbox.loop.call(kept.close())

    assert [v.get("value") for v in values] == [None, 42, None, [1200, 50]]
    assert not any("state_reset" in v for v in values)
    assert (forgotten.code, body(forgotten)["type"]) == ("program_error", "NameError")
    assert "Top-level variables and functions stay" in kept.tools()[0].description
    assert "keep state from one run to the next" in plain.tools()[0].description


@pytest.mark.docker
def test_kept_state_ends_after_idle_time_and_after_a_limit_hit(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    world = World(tmp_path, sandbox.backend, profile=SandboxProfile(timeout_s=1.5))
    world.harness.idle_timeout = 0.5
    session = world.harness.session(ALICE, keep_state=True)
    try:
        assert not call(sandbox, session, "execute_code", {"code": "x = 1"}).is_error
        time.sleep(1.5)  # idle past the timeout: the container goes
        after_idle = call(sandbox, session, "execute_code", {"code": "x"})
        call(sandbox, session, "execute_code", {"code": "y = 2"})
        stopped = call(sandbox, session, "execute_code", {"code": "while True:\n    pass"})
        after_limit = call(sandbox, session, "execute_code", {"code": "y"})
    finally:
        sandbox.loop.call(session.close())
        world.close()

    assert (after_idle.code, body(after_idle)["state_reset"]) == ("program_error", True)
    assert stopped.code == "limit_exceeded"
    assert (after_limit.code, body(after_limit)["state_reset"]) == ("program_error", True)


@pytest.mark.docker
def test_a_kept_sandbox_refuses_another_principal(sandbox: Sandbox, world: World) -> None:
    kept = sandbox.backend.keep(ALICE, idle_timeout=30)
    bob = ALICE.model_copy(update={"user_id": "bob"})
    tools = ToolSession(registry=world.registry, principal=bob, grant=Grant())
    try:
        with pytest.raises(UsageError, match="belongs to 'alice'"):
            sandbox.loop.call(kept.run("1", tools=tools))
        assert sandbox.loop.call(kept.run("1")).value == 1
        assert kept.alive
    finally:
        sandbox.loop.call(kept.close())
    assert not kept.alive


def test_keep_state_needs_a_backend_that_can_keep(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]))
    try:
        with pytest.raises(UsageError, match="keep"):
            world.harness.session(ALICE, keep_state=True)
    finally:
        world.close()
