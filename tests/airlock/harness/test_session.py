"""Session logic with a scripted sandbox: the tool list, execute_code results, direct calls,
errors, budget, concurrency."""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock import Budget, ModelResult, ModelToolSurface, Session, handle_block, handle_turn
from airlock.harness import NoToolsWarning
from airlock.policies import Principal, SandboxProfile
from airlock.sandbox import ProgramError, RunResult
from airlock.sandbox.testing import ScriptedBackend, ok_result
from tests.airlock.session_world import ALICE, CAROL, NOBODY, World

pytestmark = pytest.mark.anyio


def run_result(**fields: Any) -> RunResult:
    base: dict[str, Any] = {"status": "ok", "exit_status": 0, "has_value": False, "duration_s": 0}
    return RunResult.model_validate(base | fields)


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend([ok_result({"duplicates": ["inv_1"]}, stdout="checked 2\n")])


@pytest.fixture
def world(tmp_path: Path, backend: ScriptedBackend) -> Iterator[World]:
    w = World(tmp_path, backend)
    yield w
    w.close()


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


# -- the tool list -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("principal", "direct", "code"),
    [
        (
            ALICE,
            [
                "billing_broken_get",
                "billing_export_make",
                "billing_invoice_get",
                "billing_refund_create",
                "billing_slow_wait",
                "notes_note_get",
                "notes_note_wait",
                "orders_order_inspect",
                "orders_status_get",
            ],
            ["billing_invoice_get", "notes_note_get", "orders_status_get"],
        ),
        (
            CAROL,
            [
                "billing_broken_get",
                "billing_export_make",
                "billing_invoice_get",
                "billing_slow_wait",
            ],
            ["billing_invoice_get", "billing_export_make"],
        ),
        (NOBODY, [], []),  # no policy entry: an empty grant, only execute_code
    ],
    ids=["alice", "carol", "nobody"],
)
def test_tool_list_holds_only_what_the_principal_can_use(
    world: World, principal: Principal, direct: list[str], code: list[str]
) -> None:
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        tools = world.session(principal).tools()
    names = [t.name for t in tools]
    # A principal that reaches no tool is told so at session creation; the others are not.
    assert [type(w.message) for w in warned] == ([NoToolsWarning] if not direct else [])

    assert names == ["execute_code", *direct]
    # hidden (billing.admin), and outside the grant (write on invoices): never listed
    assert "billing_invoice_audit" not in names
    assert "billing_invoice_void" not in names
    api = tools[0].description
    for name in code:
        assert f"def {name}(" in api
    assert "def billing_invoice_audit(" not in api
    assert "def billing_refund_create(" not in api  # writes never callable from code
    if not code:
        assert "No tools are callable from code" in api


def test_execute_code_describes_limits_and_what_a_program_cannot_do(world: World) -> None:
    execute = world.session().tools()[0]

    # Programs only read, but orders_status_get, which they may call, reaches the network.
    assert not execute.read_only
    assert execute.open_world
    assert not execute.destructive
    assert execute.input_schema == {
        "type": "object",
        "properties": {"code": execute.input_schema["properties"]["code"]},
        "required": ["code"],
        "additionalProperties": False,
    }
    text = execute.description
    for phrase in ("network", "/tmp", "10 s wall clock", "256 MiB", "result_too_large",
                   "call the write tool directly", "For a single lookup"):  # fmt: skip
        assert phrase in text


@pytest.mark.parametrize(
    ("call", "advice"),
    [
        (("execute_code", {"code": "pass"}), "print less: what it prints comes back too"),
        (("billing_export_make", {"size": 600}), "ask for fewer records or narrower fields"),
    ],
    ids=["program", "tool"],
)
async def test_an_answer_over_the_cap_says_how_its_kind_is_made_smaller(
    tmp_path: Path, call: tuple[str, dict[str, Any]], advice: str
) -> None:
    run = ok_result("x" * 300, stdout="y" * 300)  # neither alone over the cap
    world = World(tmp_path, ScriptedBackend([run]), budget=Budget(result_bytes=512))
    try:
        result = await world.session().call(*call)
    finally:
        world.close()
    assert result.code == "result_too_large", result.content
    assert body(result)["message"].endswith(advice)


def test_write_tool_is_listed_with_strict_schema_and_hints(world: World) -> None:
    tools = {t.name: t for t in world.session().tools()}
    refund = tools["billing_refund_create"]

    assert (refund.read_only, refund.destructive, refund.idempotent) == (False, True, True)
    assert refund.input_schema["additionalProperties"] is False
    assert set(refund.input_schema["required"]) == {"invoice_id", "reason"}
    read_tool = tools["billing_invoice_get"]
    assert (read_tool.read_only, read_tool.destructive, read_tool.open_world) == (
        True,
        False,
        False,
    )


def test_session_satisfies_the_model_tool_surface(world: World) -> None:
    surface: ModelToolSurface = world.session()
    assert surface.tools()[0].name == "execute_code"


# -- execute_code ------------------------------------------------------------------------


async def test_program_value_and_stdout_return(world: World, backend: ScriptedBackend) -> None:
    session = world.session()
    result = await session.call("execute_code", {"code": "1"})

    assert (result.is_error, result.code) == (False, None)
    assert body(result) == {"value": {"duplicates": ["inv_1"]}, "stdout": "checked 2\n"}
    tools = backend.sessions[0]
    assert tools is not None
    assert (tools.principal, tools.grant, tools.run_id) == (
        session.principal,
        session.grant,
        session.run_id,
    )
    assert backend.calls[0][0] == "1"
    # the program is offered the same tools the model was told about, nothing more
    assert [stub.name for stub in tools.stubs()] == [
        "billing_broken_get",
        "billing_export_make",
        "billing_invoice_get",
        "billing_slow_wait",
        "notes_note_get",
        "notes_note_wait",
        "orders_order_inspect",
        "orders_status_get",
    ]


@pytest.mark.parametrize(
    ("run", "code", "fields"),
    [
        (
            run_result(
                status="error",
                exit_status=1,
                error=ProgramError(type="KeyError", message="'total'", line=3),
            ),
            "program_error",
            {"type": "KeyError", "line": 3},
        ),
        (
            run_result(status="limit_exceeded", exit_status=137, limit="timeout"),
            "limit_exceeded",
            {"limit": "timeout"},
        ),
        (
            run_result(status="limit_exceeded", exit_status=137, limit="memory"),
            "limit_exceeded",
            {"limit": "memory"},
        ),
        (
            run_result(
                status="invalid_program",
                exit_status=2,
                error=ProgramError(type="InvalidProgram", message="import of os is not allowed"),
            ),
            "invalid_program",
            {},
        ),
        (run_result(status="protocol_error", exit_status=1), "protocol_error", {}),
        (
            ok_result("x" * 40_000),
            "result_too_large",
            {"limit_bytes": 32_000},
        ),
    ],
    ids=["raised", "timeout", "memory", "refused", "protocol", "too-large"],
)
async def test_program_failures_become_stable_codes(
    tmp_path: Path, run: RunResult, code: str, fields: dict[str, Any]
) -> None:
    world = World(tmp_path, ScriptedBackend([run]))
    try:
        result = await world.session().call("execute_code", {"code": "pass"})
    finally:
        world.close()

    assert (result.is_error, result.code, result.retryable) == (True, code, False)
    answer = body(result)
    assert answer["error"] == code
    assert answer["message"].count(";") >= 1  # what happened; what to do next
    assert fields.items() <= answer.items()
    if code == "result_too_large":
        assert answer["size_bytes"] > 40_000  # the size is reported, nothing is cut


@pytest.mark.parametrize(
    ("run", "code"),
    [
        (ok_result({"n": 1}), None),
        (run_result(status="limit_exceeded", exit_status=137, limit="timeout"), "limit_exceeded"),
    ],
    ids=["ok", "limit"],
)
async def test_each_program_leaves_one_audit_record_with_its_hash(
    tmp_path: Path, run: RunResult, code: str | None
) -> None:
    world = World(tmp_path, ScriptedBackend([run]))
    program = "tools.billing_invoice_get(invoice_id='inv_1')"
    try:
        session = world.session()
        await session.call("execute_code", {"code": program})
        events = world.registry.audit.events(run_id=session.run_id)
    finally:
        world.close()

    [event] = [e for e in events if e.tool == "execute_code"]
    assert (event.caller, event.stage, event.code) == ("direct", "done", code)
    assert event.outcome == ("ok" if code is None else "error")
    assert event.args_hash == hashlib.blake2b(program.encode(), digest_size=16).hexdigest()
    assert event.detail is not None
    assert event.detail.startswith(f"program {run.status}, 0 tool calls")
    assert event.effects == ()  # a program exercises only its tool calls' effects
    assert program not in repr(event)  # the hash, never the text


async def test_long_stdout_is_cut_and_says_so(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([ok_result(1, stdout="y" * 10_000)]))
    try:
        result = await world.session().call("execute_code", {"code": "pass"})
    finally:
        world.close()

    answer = body(result)
    assert len(answer["stdout"]) == 4_000
    assert answer["stdout_truncated"] is True
    assert answer["stdout_bytes"] == 10_000


@pytest.mark.parametrize(
    "arguments",
    [{}, {"code": 3}, {"code": ""}, {"code": "1", "network": True}],
    ids=["missing", "not-text", "empty", "extra"],
)
async def test_execute_code_arguments_are_strict(
    world: World, backend: ScriptedBackend, arguments: dict[str, Any]
) -> None:
    result = await world.session().call("execute_code", arguments)

    assert (result.is_error, result.code) == (True, "invalid_input")
    assert body(result)["issues"]
    assert backend.calls == []


async def test_program_deadline_never_outlives_the_session(tmp_path: Path) -> None:
    backend = ScriptedBackend([ok_result(1)])
    world = World(tmp_path, backend, budget=Budget(seconds=3))
    try:
        await world.session().call("execute_code", {"code": "1"})
    finally:
        world.close()
    assert backend.calls[0][1].timeout_s <= 3


# -- direct calls ------------------------------------------------------------------------


async def test_direct_read_returns_the_shaped_result(world: World) -> None:
    session = world.session()
    result = await session.call("billing_invoice_get", {"invoice_id": "inv_1"})

    assert (result.is_error, result.code) == (False, None)
    assert result.content == '{"invoice_id":"inv_1","amount_minor":1200}'
    events = world.registry.audit.events(run_id=session.run_id)
    assert [(e.caller, e.tool, e.outcome) for e in events] == [
        ("direct", "billing_invoice_get", "ok")
    ]


@pytest.mark.parametrize(
    ("name", "arguments", "code", "retryable"),
    [
        ("no_such_tool", {}, "unknown_tool", False),
        ("billing_invoice_audit", {"invoice_id": "inv_1"}, "unknown_tool", False),  # hidden
        ("billing_invoice_void", {"invoice_id": "inv_1"}, "unknown_tool", False),  # no grant
        ("billing_invoice_get", {"invoice_id": "inv_9"}, "not_found", False),  # other tenant
        ("billing_invoice_get", {"invoice_id": "INV"}, "invalid_input", False),
        ("billing_invoice_get", {"invoice_id": "inv_1", "x": 1}, "invalid_input", False),
        ("billing_slow_wait", {"seconds": 1}, "timeout", True),
        ("billing_broken_get", {"n": 1}, "upstream", True),
        ("billing_export_make", {"size": 5_000}, "result_too_large", False),
    ],
    ids=[
        "missing",
        "hidden",
        "ungranted",
        "tenant",
        "pattern",
        "extra",
        "timeout",
        "broken",
        "too-large",
    ],
)
async def test_direct_errors_have_stable_codes(
    world: World, name: str, arguments: dict[str, Any], code: str, retryable: bool
) -> None:
    result = await world.session().call(name, arguments)

    assert (result.is_error, result.code, result.retryable) == (True, code, retryable)
    answer = body(result)
    assert (answer["error"], answer["retryable"]) == (code, retryable)
    assert answer["message"]
    assert "password" not in result.content  # operator detail stays in the log
    assert "detail" not in answer


async def test_unknown_tool_answers_the_same_for_missing_hidden_and_ungranted(
    world: World,
) -> None:
    session = world.session()
    answers = [
        body(await session.call(name, {}))
        for name in ("billing_zzz_get", "billing_invoice_audit", "billing_invoice_void")
    ]
    for answer in answers:
        del answer["name"], answer["message"]
    assert answers[0] == answers[1] == answers[2] == {"error": "unknown_tool", "retryable": False}
    events = world.registry.audit.events(run_id=session.run_id)
    assert [(e.tool, e.stage, e.code) for e in events] == [
        ("billing_zzz_get", "lookup", "unknown_tool"),
        ("billing_invoice_audit", "lookup", "unknown_tool"),
        ("billing_invoice_void", "lookup", "unknown_tool"),
    ]


async def test_non_object_arguments_are_invalid_input(world: World) -> None:
    result = await world.session().call("billing_invoice_get", ["inv_1"])  # type: ignore[arg-type]
    assert result.code == "invalid_input"


# -- concurrency and budget --------------------------------------------------------------


async def test_calls_of_one_turn_run_concurrently(world: World) -> None:
    session = world.session()
    results: dict[int, ModelResult] = {}

    async def one(n: int) -> None:
        results[n] = await session.call("notes_note_wait", {"note_id": f"note_{n}"})

    began = time.perf_counter()
    async with anyio.create_task_group() as group:
        for n in range(5):
            group.start_soon(one, n)
    elapsed = time.perf_counter() - began

    assert elapsed < 0.2 * 3  # five 0.2 s reads, not one after another
    assert {n: body(r)["note_id"] for n, r in results.items()} == {n: f"note_{n}" for n in range(5)}


async def test_call_budget_is_enforced(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(calls=2))
    try:
        session = world.session()
        for _ in range(2):
            assert not (await session.call("billing_invoice_get", {"invoice_id": "inv_1"})).is_error
        result = await session.call("billing_invoice_get", {"invoice_id": "inv_1"})
    finally:
        world.close()

    assert (result.code, body(result)["limit"]) == ("limit_exceeded", "calls")


async def test_byte_budget_is_enforced(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(bytes=1024, result_bytes=800))
    try:
        session = world.session()
        first = await session.call("billing_export_make", {"size": 600})
        second = await session.call("billing_export_make", {"size": 600})
        later = [
            await session.call("billing_invoice_get", {"invoice_id": "inv_1"}) for _ in range(12)
        ]
    finally:
        world.close()

    # ~600 bytes fit; a second ~600 would pass the 1024 total: refused by the session's
    # bytes (not as too large: it is under the per-result cap), with its size
    assert (first.code, second.code) == (None, "limit_exceeded")
    assert body(second)["limit"] == "bytes"
    assert body(second)["size_bytes"] == len(first.content.encode())
    assert later[0].code is None  # small results still fit
    assert later[-1].code == "limit_exceeded"
    assert body(later[-1])["limit"] == "bytes"


async def test_time_budget_is_enforced(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(seconds=0.05))
    try:
        session = world.session()
        await anyio.sleep(0.1)
        result = await session.call("billing_invoice_get", {"invoice_id": "inv_1"})
    finally:
        world.close()
    assert (result.code, body(result)["limit"]) == ("limit_exceeded", "time")


def test_sessions_get_distinct_run_ids_and_keep_a_given_one(world: World) -> None:
    assert world.session().run_id != world.session().run_id
    assert world.session(run_id="run_fixed").run_id == "run_fixed"


def test_grant_defaults_to_the_policy_and_profile_to_the_sandbox(tmp_path: Path) -> None:
    profile = SandboxProfile(timeout_s=4)
    world = World(tmp_path, ScriptedBackend([], profile=profile))
    try:
        session: Session = world.session()
        assert session.grant == world.harness.policy.grant_for(ALICE)
        assert world.harness.profile == profile
    finally:
        world.close()


# -- provider blocks ---------------------------------------------------------------------


async def test_handle_answers_provider_blocks_with_their_ids(world: World) -> None:
    session = world.session()
    single = await handle_block(
        session,
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "billing_invoice_get",
            "input": {"invoice_id": "inv_2"},
        },
    )
    turn = await handle_turn(
        session,
        [
            {"type": "text", "text": "Looking both up."},
            {"type": "tool_use", "id": "toolu_a", "name": "nope", "input": {}},
            {
                "type": "tool_use",
                "id": "toolu_b",
                "name": "billing_invoice_get",
                "input": {"invoice_id": "inv_1"},
            },
        ],
    )

    assert single["type"] == "tool_result"
    assert single["tool_use_id"] == "toolu_1"
    assert [(b["tool_use_id"], b.get("is_error", False)) for b in turn] == [
        ("toolu_a", True),
        ("toolu_b", False),
    ]
