"""Programs in real containers calling tools through the bridge, judged from the host."""

from __future__ import annotations

import textwrap
import time
from dataclasses import replace

import pytest

from airlock.bridge import BridgeLimits, ToolSession
from airlock.policies import Grant, Principal, read
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, RETRY_AFTER_S, build_registry
from tests.conftest import Sandbox

pytestmark = pytest.mark.docker


def session(**overrides: object) -> ToolSession:
    registry = build_registry(audit=AuditLog(MemoryAuditStore()))
    base = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
    return replace(base, **overrides)  # type: ignore[arg-type]


def test_bulk_read_returns_only_the_summary(sandbox: Sandbox) -> None:
    tools = session()
    program = textwrap.dedent("""
        totals = []
        for n in range(1, 201):
            totals.append(tools.records_item_get(record_id=f"rec_{n}")["total"])
        big = [t for t in totals if t > 1500]
        f"read {len(totals)} records, sum {sum(totals)}\\n{len(big)} above 1500"
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    assert result.value == "read 200 records, sum 201000\n50 above 1500"
    assert result.tool_calls == 200
    events = tools.registry.audit.events(run_id=tools.run_id)
    code_calls = [e for e in events if e.caller == "code" and e.tool == "records_item_get"]
    assert len(code_calls) == 200
    assert all(e.outcome == "ok" for e in code_calls)
    assert len({e.call_id for e in code_calls}) == 200
    assert all(e.call_id.startswith(f"{tools.run_id}:") for e in code_calls)


def test_fan_out_runs_concurrently_and_matches_ids(sandbox: Sandbox) -> None:
    tools = session()
    program = textwrap.dedent("""
        import asyncio
        async def main():
            ids = [f"rec_{n}" for n in range(1, 101)]
            records = await asyncio.gather(*(tools.records_slow_get.aio(record_id=i) for i in ids))
            return [(i, r["record_id"]) for i, r in zip(ids, records)]
        pairs = asyncio.run(main())
        {"all_match": all(a == b for a, b in pairs), "count": len(pairs)}
    """)
    began = time.perf_counter()
    result = sandbox.run(program, tools=tools)
    elapsed = time.perf_counter() - began
    assert result.ok, result.error
    assert result.value == {"all_match": True, "count": 100}
    assert elapsed < 100 * 0.05 / 4, f"100 reads of 50 ms took {elapsed:.2f} s"


def test_batch_returns_results_in_order_with_errors_in_place(sandbox: Sandbox) -> None:
    tools = session()
    program = textwrap.dedent("""
        items = [{"record_id": "rec_3"}, {"record_id": "rec_7777"}, {"record_id": "rec_999"}, {"record_id": "rec_1"}]
        out = tools.records_item_get.batch(items, return_errors=True)
        [r["record_id"] if isinstance(r, dict) else r.code for r in out]
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    assert result.value == ["rec_3", "not_found", "not_found", "rec_1"]
    assert result.tool_calls == 4


def test_an_empty_batch_costs_no_call(sandbox: Sandbox) -> None:
    # The guest answers it: no frame, so nothing counts against the run's calls (the host
    # counts a batch frame as one call at least).
    tools = session(limits=BridgeLimits(max_calls=1))
    result = sandbox.run("[tools.records_item_get.batch([]) for _ in range(5)]\n", tools=tools)
    assert result.ok, result.error
    assert result.value == [[]] * 5
    assert tools.calls == 0


def test_unknown_tool_is_indistinguishable(sandbox: Sandbox) -> None:
    tools = session()
    # The program forges calls past its namespace, straight onto the bridge.
    program = textwrap.dedent("""
        conn = tools.records_item_get._connection
        out = {}
        for name in ("records_item_delete", "records_secret_get", "records_nothing_here"):
            try:
                conn.wait(conn.submit({"type": "call", "tool": name, "args": {"record_id": "rec_1"}}))
                out[name] = "ran"
            except tools.ToolError as exc:
                out[name] = [exc.code, exc.message.replace(name, "NAME"), exc.retryable]
        out
    """)
    result = sandbox.run(program, tools=tools, language_mode="full")
    assert result.ok, result.error
    answers = list(result.value.values())  # type: ignore[union-attr]
    assert answers[0][0] == "unknown_tool"
    assert answers[0] == answers[1] == answers[2]


# Tools a program was not given, reached through its namespace: a write tool, a read hidden
# from the principal, a read the harness left out (``tool_names``) and a name that does not
# exist. Each is a typed ``unknown_tool`` the program can catch, in both language modes and
# every call form, and none reaches the host.
UNOFFERED = [
    # (name, tool, language mode, call)
    ("write", "records_item_delete", "restricted", "tools.{tool}(record_id='rec_1')"),
    ("write_full", "records_item_delete", "full", "tools.{tool}(record_id='rec_1')"),
    ("write_aio", "records_item_delete", "restricted", "asyncio.run(fan_out())"),
    ("write_batch", "records_item_delete", "restricted", "tools.{tool}.batch([{{'record_id': 'rec_1'}}])"),
    ("write_getattr", "records_item_delete", "restricted", "getattr(tools, '{tool}')(record_id='rec_1')"),
    ("hidden", "records_secret_get", "restricted", "tools.{tool}(record_id='rec_1')"),
    ("hidden_full", "records_secret_get", "full", "tools.{tool}.aio(record_id='rec_1')"),
    ("left_out", "records_blob_get", "restricted", "tools.{tool}(size=1)"),
    ("missing", "billing_refund_create", "restricted", "tools.{tool}(invoice_id='in_1')"),
    ("missing_full", "billing_refund_create", "full", "tools.{tool}(invoice_id='in_1')"),
]  # fmt: skip

UNOFFERED_PROGRAM = """
import asyncio
async def fan_out():
    return await asyncio.gather(tools.{tool}.aio(record_id="rec_1"))
try:
    {call}
    outcome = "ran"
except tools.UnknownTool as exc:
    outcome = [exc.code, exc.retryable, isinstance(exc, tools.ToolError), exc.message]
outcome
"""


@pytest.mark.parametrize(("name", "tool", "mode", "call"), UNOFFERED, ids=[c[0] for c in UNOFFERED])
def test_a_tool_the_program_was_not_given_is_unknown_tool(
    sandbox: Sandbox, name: str, tool: str, mode: str, call: str
) -> None:
    invoked: list[str] = []
    tools = session(
        registry=build_registry(invoked=invoked),
        tool_names=frozenset({"records_item_get", "records_archive_get"}),
    )
    program = UNOFFERED_PROGRAM.format(tool=tool, call=call.format(tool=tool))
    result = sandbox.run(program, tools=tools, language_mode=mode)
    assert result.ok, result.error
    code, retryable, is_tool_error, message = result.value  # type: ignore[misc]
    assert (code, retryable, is_tool_error) == ("unknown_tool", False, True)
    assert f"no tool named {tool!r} is available" in message
    assert "records_item_get" in message  # what it can call instead
    # Judged from the host: the call never crossed the bridge, no handler ran, and the
    # attempt is on record as a refusal (it used to leave no trace).
    assert result.tool_calls == 0
    assert invoked == []
    events = tools.registry.audit.events(run_id=tools.run_id)
    assert [(e.caller, e.tool, e.stage, e.decision, e.code) for e in events] == [
        ("code", tool, "lookup", "deny", "unknown_tool")
    ]


def test_unoffered_tools_are_refused_identically(sandbox: Sandbox) -> None:
    program = textwrap.dedent("""
        out = []
        for name in ("records_item_delete", "records_secret_get", "records_nothing_here"):
            try:
                getattr(tools, name)(record_id="rec_1")
                out.append("ran")
            except tools.ToolError as exc:
                out.append([exc.code, exc.message.replace(name, "NAME")])
        out.append([getattr(tools, "records_item_delete", None), "records_item_delete" in dir(tools)])
        out
    """)
    result = sandbox.run(program, tools=session())
    assert result.ok, result.error
    first, second, third, probes = result.value  # type: ignore[misc]
    assert first[0] == "unknown_tool"
    assert first == second == third
    assert probes == [None, False]  # getattr with a default answers as for any object


def test_refused_names_are_recorded_once_each_and_bounded(sandbox: Sandbox) -> None:
    program = textwrap.dedent("""
        for round in range(3):
            for n in range(100):
                try:
                    getattr(tools, f"records_probe{n}_get")
                except tools.UnknownTool:
                    pass
        "probed"
    """)
    tools = session()
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    refused = [e for e in tools.registry.audit.events(run_id=tools.run_id) if e.stage == "lookup"]
    # 64 names one by one, then one record for the rest; each name once however often it
    # was tried; all as the program's (code) attempts that admission never saw.
    assert [e.tool for e in refused] == [f"records_probe{n}_get" for n in range(64)] + ["*"]
    assert {(e.caller, e.code, e.outcome) for e in refused} == {("code", "unknown_tool", "error")}
    assert len({e.call_id for e in refused}) == 65


@pytest.mark.parametrize("mode", ["restricted", "full"])
def test_an_uncaught_unknown_tool_names_the_tool_in_the_result(sandbox: Sandbox, mode: str) -> None:
    invoked: list[str] = []
    tools = session(registry=build_registry(invoked=invoked))
    result = sandbox.run(
        "tools.records_item_delete(record_id='rec_1')\n", tools=tools, language_mode=mode
    )
    assert result.status == "error"
    assert result.error is not None
    assert (result.error.type, result.error.code) == ("UnknownTool", "unknown_tool")
    assert "'records_item_delete'" in result.error.message
    assert "NoneType" not in result.error.message
    assert "records_item_delete" in result.reason()
    assert invoked == []  # nothing ran; the attempt alone is on record
    events = tools.registry.audit.events(run_id=tools.run_id)
    assert [(e.tool, e.stage, e.code) for e in events] == [
        ("records_item_delete", "lookup", "unknown_tool")
    ]


def test_call_outside_the_grant_is_denied(sandbox: Sandbox) -> None:
    result = sandbox.run(
        textwrap.dedent("""
            try:
                tools.records_archive_get(record_id="rec_1")
                outcome = "ran"
            except tools.Denied as exc:
                outcome = exc.code
            outcome
        """),
        tools=session(),
    )
    assert result.value == "denied"


def test_program_cannot_change_its_principal_or_grant(sandbox: Sandbox) -> None:
    tools = session()
    program = textwrap.dedent("""
        conn = tools.records_item_get._connection
        out = []
        forged = [
            {"type": "call", "tool": "records_item_get", "args": {"record_id": "rec_999"},
             "principal": {"user_id": "bob", "tenant_id": "globex", "scopes": ["records.admin"]}},
            {"type": "call", "tool": "records_item_get",
             "args": {"record_id": "rec_999", "tenant_id": "globex"}},
            {"type": "call", "tool": "records_secret_get", "args": {"record_id": "rec_1"},
             "grant": {"scopes": ["records.admin"], "effects": ["read(**)"]}, "caller": "direct"},
        ]
        for frame in forged:
            try:
                conn.wait(conn.submit(frame))
                out.append("ran")
            except tools.ToolError as exc:
                out.append(exc.code)
        out
    """)
    result = sandbox.run(program, tools=tools, language_mode="full")
    assert result.ok, result.error
    assert result.value == ["not_found", "invalid_input", "unknown_tool"]
    events = tools.registry.audit.events(run_id=tools.run_id)
    assert {e.user_id for e in events} == {"alice"}
    assert {e.caller for e in events} == {"code"}


def test_typed_errors_and_the_abort_signal(sandbox: Sandbox) -> None:
    tools = session(limits=BridgeLimits(max_calls=3))
    program = textwrap.dedent("""
        seen = []
        try:
            tools.records_item_get(record_id="rec_404")
        except tools.NotFound as exc:
            seen.append(exc.code)
        try:
            tools.records_item_get(record_id="../admin")
        except tools.InvalidInput as exc:
            seen.append(exc.code)
        tools.records_item_get(record_id="rec_1")
        while True:
            try:
                tools.records_item_get(record_id="rec_2")
            except Exception:
                seen.append("swallowed")
    """)
    result = sandbox.run(program, tools=tools)
    assert result.status == "limit_exceeded"
    assert result.limit == "calls"
    assert result.tool_calls == 3


def test_a_program_reads_the_issues_of_invalid_input(sandbox: Sandbox) -> None:
    program = textwrap.dedent("""
        try:
            tools.records_item_get(record_id="../admin")
            outcome = "ran"
        except tools.InvalidInput as exc:
            outcome = [exc.code, exc.retryable, [[i["field"], i["reason"]] for i in exc.issues]]
        outcome
    """)
    result = sandbox.run(program, tools=session())
    assert result.ok, result.error
    assert result.value == [
        "invalid_input",
        False,
        [["record_id", "String should match pattern '^rec_[0-9]{1,6}$'"]],
    ]


def test_a_program_reads_retry_after_of_rate_limited(sandbox: Sandbox) -> None:
    tools = session()
    program = textwrap.dedent("""
        try:
            tools.records_limited_get(record_id="rec_1")
            outcome = "ran"
        except tools.RateLimited as exc:
            outcome = [exc.code, exc.retryable, exc.retry_after]
        outcome
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    assert result.value == ["rate_limited", True, RETRY_AFTER_S]
    # The operator's detail stays in the audit log on the host.
    events = tools.registry.audit.events(run_id=tools.run_id)
    assert [e.code for e in events if e.tool == "records_limited_get"] == ["rate_limited"]
    assert "quota" not in str(result.value)


WRITES_CALL_FRAMES = """
import json, os, struct, time
for n in range(1, 10):
    body = json.dumps({"type": "call", "id": n, "tool": "records_slow_get",
                       "args": {"record_id": "rec_1"}}).encode()
    os.write(tools._connection.fileno(), struct.pack(">I", len(body)) + body)
time.sleep(30)
"""
LIMITS = [
    ("call_budget", BridgeLimits(max_calls=50),
     "while True:\n    tools.records_item_get(record_id='rec_1')\n", "calls"),
    # Every call the guest makes waits there for a place (test_guest_call_limits.py): call
    # frames a full-mode program writes to the bridge itself meet the host's limit.
    ("in_flight", BridgeLimits(max_in_flight=4, max_concurrency=2), WRITES_CALL_FRAMES,
     "in_flight"),
    ("bytes_in", BridgeLimits(max_bytes_in=200_000),
     "while True:\n    try:\n        tools.records_item_get(record_id='x' * 5000)\n    except tools.InvalidInput:\n        pass\n", "bytes"),
    ("bytes_out", BridgeLimits(max_bytes_out=3_000_000),
     "while True:\n    tools.records_blob_get(size=1_000_000)\n", "bytes"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "limits", "program", "limit"), LIMITS, ids=[c[0] for c in LIMITS])
def test_run_limits_stop_the_run_and_the_host_recovers(
    sandbox: Sandbox, name: str, limits: BridgeLimits, program: str, limit: str
) -> None:
    tools = session(limits=limits)
    mode = "full" if program is WRITES_CALL_FRAMES else "restricted"  # (it reaches the socket)
    result = sandbox.run(program, tools=tools, timeout_s=20, language_mode=mode)
    assert result.status == "limit_exceeded", (result.status, result.error)
    assert result.limit == limit
    assert result.duration_s < 15
    ends = [e for e in tools.registry.audit.events(run_id=tools.run_id) if e.stage == "bridge"]
    assert [e.code for e in ends] == ["limit_exceeded"]
    again = sandbox.run("tools.records_item_get(record_id='rec_7')['total']\n", tools=session())
    assert again.value == 70


def test_deadline_with_calls_in_flight(sandbox: Sandbox) -> None:
    tools = session(registry=build_registry(slow_s=30))
    program = "tools.records_slow_get(record_id='rec_1')\n"
    result = sandbox.run(program, tools=tools, timeout_s=1)
    assert result.limit == "timeout"
    assert result.duration_s < 5


def test_other_principals_see_other_tools(sandbox: Sandbox) -> None:
    admin = Principal(
        user_id="root", tenant_id="acme", scopes=frozenset({"records.read", "records.admin"})
    )
    grant = Grant(scopes=admin.scopes, effects=(read("records:**"),))
    registry = build_registry()
    result = sandbox.run(
        "sorted(dir(tools))\n",
        tools=ToolSession(registry=registry, principal=admin, grant=grant),
    )
    assert "records_secret_get" in result.value  # type: ignore[operator]
    assert "records_item_delete" not in result.value  # type: ignore[operator]
