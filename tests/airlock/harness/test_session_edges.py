"""A session at its edges: concurrent calls and ``write_status`` against the call budget, a
ledger that fails while writes wait, a tool name no UTF-8 can hold, and a program's result
too large for the model while its proposals wait and its files are stored."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock import Budget, Harness, ModelResult, Session
from airlock.bridge import ToolSession
from airlock.policies import SandboxProfile
from airlock.sandbox import (
    EngineUnavailable,
    RunResult,
    SandboxClosed,
    SandboxError,
    SandboxFailure,
    SocketPathTooLong,
)
from airlock.sandbox._artifacts import ArtifactReceiver
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import LEDGER_ERRORS, approve_preview
from tests.airlock.session_world import ALICE, World, policy
from tests.tools.test_proposals import PROPOSING, ProposalWorld

pytestmark = pytest.mark.anyio

REFUND = "billing_refund_create"
READ = ("billing_invoice_get", {"invoice_id": "inv_1"})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


async def pause(session: Session, invoice: str = "inv_3") -> str:
    result = await session.call(REFUND, {"invoice_id": invoice, "reason": "duplicate"})
    assert result.code == "needs_approval", result.content
    return str(body(result)["preview_id"])


# -- the call budget -------------------------------------------------------------------------


async def test_concurrent_calls_never_pass_the_call_budget_while_a_write_waits(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(calls=3))
    try:
        session = world.session()
        await pause(session)  # each call first settles it: an await before the call counts
        codes: list[str | None] = []

        async def one() -> None:
            codes.append((await session.call(*READ)).code)

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(one)
    finally:
        world.close()
    assert (codes.count(None), codes.count("limit_exceeded")) == (2, 18)


async def test_write_status_is_a_call_the_budget_counts_and_resume_is_not(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(calls=2))
    try:
        session = world.session()
        preview_id = await pause(session)
        first = await session.write_status(preview_id)
        refused = [await session.write_status(preview_id) for _ in range(3)]
        polled = await session.resume(preview_id)  # the application's own, while it waits
        events = world.registry.audit.events(run_id=session.run_id)
    finally:
        world.close()
    assert first.code == "needs_approval"
    assert [(r.code, body(r)["limit"]) for r in refused] == [("limit_exceeded", "calls")] * 3
    assert polled.code == "needs_approval"
    refusals = [(e.tool, e.code) for e in events if e.rule == "budget"]
    assert refusals == [("write_status", "limit_exceeded")] * 3


# -- a ledger that fails while writes wait ---------------------------------------------------


async def _read(session: Session, preview_id: str) -> ModelResult:
    return await session.call(*READ)


async def _program(session: Session, preview_id: str) -> ModelResult:
    return await session.call("execute_code", {"code": "1"})


async def _resume(session: Session, preview_id: str) -> ModelResult:
    return await session.resume(preview_id)


async def _write_status(session: Session, preview_id: str) -> ModelResult:
    return await session.write_status(preview_id)


ENTRIES = {"read": _read, "execute_code": _program, "resume": _resume, "status": _write_status}


def _failing(code: str) -> Callable[..., Any]:
    def fail(*args: object, **kwargs: object) -> None:
        raise LEDGER_ERRORS[code]("/srv/secret/ledger.db is gone", path="/srv/secret/ledger.db")

    return fail


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("code", sorted(LEDGER_ERRORS))
async def test_a_ledger_error_while_a_write_waits_is_answered_never_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, code: str
) -> None:
    world = World(tmp_path, ScriptedBackend([ok_result(1)]))
    try:
        session = world.session()
        preview_id = await pause(session)
        monkeypatch.setattr(world.ledger, "preview", _failing(code))
        answer = await ENTRIES[entry](session, preview_id)
    finally:
        world.close()
    assert (answer.is_error, answer.code) == (True, code)
    assert answer.retryable is LEDGER_ERRORS[code].retryable
    assert "secret" not in answer.content  # the path is the operator's, in the log


async def test_a_replaced_ledger_file_is_answered_for_each_entry(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([ok_result(1)]))
    try:
        session = world.session()
        preview_id = await pause(session)
        shutil.copy(tmp_path / "ledger.db", tmp_path / "copy.db")
        os.replace(tmp_path / "copy.db", tmp_path / "ledger.db")
        codes = {name: (await entry(session, preview_id)).code for name, entry in ENTRIES.items()}
    finally:
        world.close()
    assert codes == dict.fromkeys(ENTRIES, "ledger_replaced")


async def test_a_write_committed_before_the_ledger_failed_is_told_all_the_same(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = world.session()
    first, second = await pause(session, "inv_3"), await pause(session, "inv_4")
    for preview_id in (first, second):
        approve_preview(world.ledger, preview_id, approver="bob", now=time.time())
    found = world.ledger.preview

    def fails_on_second(preview_id: str) -> Any:
        if preview_id == second:
            raise LEDGER_ERRORS["ledger_locked"]("locked", path="ledger.db")
        return found(preview_id)

    monkeypatch.setattr(world.ledger, "preview", fails_on_second)
    failed = await session.call(*READ)
    monkeypatch.setattr(world.ledger, "preview", found)
    later = await session.call(*READ)

    assert failed.code == "ledger_locked"
    told = [
        [(s["preview_id"], s["status"]) for s in body(r)["settled_writes"]] for r in (failed, later)
    ]
    assert told == [[(first, "committed")], [(second, "committed")]]
    assert world.system.sends() == 2


# -- text no UTF-8 can hold ------------------------------------------------------------------

NAMES = ["\ud800", "billing_\udfff_get", "x" * 63 + "\ud83dy", "\udc80execute_code"]


@pytest.mark.parametrize("name", NAMES, ids=["lone", "inside", "cut_at_64", "escaped_byte"])
async def test_a_name_with_a_lone_surrogate_is_an_unknown_tool(world: World, name: str) -> None:
    session = world.session()
    answer = await session.call(name, {})
    answer.content.encode()  # sendable as it is
    assert (answer.code, body(answer)["name"]) == ("unknown_tool", name[:64])
    assert (await session.call(*READ)).code is None


async def test_a_program_value_with_a_lone_surrogate_comes_back_as_it_is(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([ok_result("a\ud800b")]))
    try:
        answer = await world.session().call("execute_code", {"code": "x"})
    finally:
        world.close()
    answer.content.encode()
    assert (answer.code, body(answer)["value"]) == (None, "a\ud800b")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, ScriptedBackend([]))
    yield w
    w.close()


# -- a sandbox that cannot run the program ---------------------------------------------------

SANDBOX_FAILURES: list[tuple[str, SandboxError, bool, str]] = [
    ("engine down", EngineUnavailable("no answer"), True, "try again shortly"),
    ("a container failed", SandboxFailure("it died"), True, "try again shortly"),
    ("backend closed", SandboxClosed(), False, "do not retry"),
    ("socket path too long", SocketPathTooLong("/t" * 60, limit=107), False, "do not retry"),
]


@pytest.mark.parametrize(
    ("case", "error", "retryable", "told"), SANDBOX_FAILURES, ids=[c[0] for c in SANDBOX_FAILURES]
)
async def test_a_sandbox_that_cannot_run_the_program_says_whether_to_try_again(
    tmp_path: Path, case: str, error: SandboxError, retryable: bool, told: str
) -> None:
    def fail(program: str, profile: SandboxProfile) -> RunResult:
        raise error

    world = World(tmp_path, ScriptedBackend(fail))
    try:
        result = await world.session().call("execute_code", {"code": "1"})
    finally:
        world.close()
    assert (result.code, result.retryable) == ("sandbox_unavailable", retryable)
    assert told in result.content


# -- a result too large for the model --------------------------------------------------------


class LeavingBackend(ScriptedBackend):
    """Proposes a refund of each of ``invoices`` and stores ``files`` with the host's own
    receiver, as a program of the Docker backend would; its value is ``value``."""

    def __init__(self, value: object, *, invoices: tuple[str, ...], files: list[str]) -> None:
        super().__init__([])
        self.value, self.invoices, self.files = value, invoices, files

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
        inputs: Any = None,
        artifacts: Path | None = None,
    ) -> RunResult:
        assert tools is not None
        for order, invoice in enumerate(self.invoices, 1):
            ctx = tools.context(f"{tools.call_prefix}:{order}", time.monotonic() + 30)
            args = {"invoice_id": invoice, "reason": "duplicate"}
            await tools.propose(REFUND, args, ctx, order=order)
        refs: tuple[Any, ...] = ()
        if self.files:
            assert artifacts is not None
            receiver = ArtifactReceiver(artifacts, max_files=100, max_bytes=1 << 20)
            for name in self.files:
                receiver.receive(name, 0, b"report " * 10, end=True)
            refs = receiver.finish()
        return ok_result(self.value).model_copy(update={"artifacts": refs})


LONG = [
    f"charts/region_{n:03d}_monthly_sales_by_product_line_and_sales_channel_with_returns.png"
    for n in range(64)
]
BIG = "x" * 40_000
TOO_LARGE = [
    # case, value, invoices, files, result_bytes: what the answer keeps
    ("proposals", BIG, ("inv_1", "inv_2"), [], 32_000, "full"),
    ("one_file", BIG, (), ["report.csv"], 32_000, "full"),
    ("both", BIG, ("inv_1",), ["report.csv", "tables/a.csv"], 32_000, "full"),
    ("many_files", 1, ("inv_1",), LONG, 32_000, "names"),
    ("small_cap", BIG, ("inv_1", "inv_2"), LONG, 1_000, "counts"),
]


@pytest.mark.parametrize(
    ("case", "value", "invoices", "files", "cap", "kept"),
    TOO_LARGE,
    ids=[c[0] for c in TOO_LARGE],
)
async def test_a_result_too_large_keeps_the_proposals_and_the_files(
    tmp_path: Path,
    case: str,
    value: object,
    invoices: tuple[str, ...],
    files: list[str],
    cap: int,
    kept: str,
) -> None:
    proposals = ProposalWorld(tmp_path)
    backend = LeavingBackend(value, invoices=invoices, files=files)
    harness = Harness(
        proposals.registry,
        policy(),
        backend,
        writes=proposals.writes,
        budget=Budget(result_bytes=cap),
        artifacts=tmp_path / "store",
    )
    try:
        session = harness.session(ALICE, grant=PROPOSING)
        answer = await session.call("execute_code", {"code": "..."})
        waiting = session.pending_batches()
    finally:
        proposals.close()
    said = body(answer)
    assert (answer.code, said["limit_bytes"]) == ("result_too_large", cap)
    assert "value" not in said
    assert [ref.name for ref in answer.artifacts] == sorted(files)
    assert all(Path(ref.path).is_file() for ref in answer.artifacts)
    if invoices:
        [batch_id] = waiting
        note = said["proposals"]
        assert (note["batch_id"], note["count"], note["status"]) == (
            batch_id,
            len(invoices),
            "needs_approval",
        )
        assert ("preview_ids" in note) is (kept == "full")
    else:
        assert "proposals" not in said
    if not files:
        assert not {"artifacts", "artifacts_count"} & set(said)
    elif kept == "full":
        assert said["artifacts"] == [
            ref.model_dump(include={"name", "size_bytes", "media_type", "sha256", "uri", "path"})
            for ref in answer.artifacts
        ]
    elif kept == "names":
        assert said["artifacts"] == [{"name": r.name, "uri": r.uri} for r in answer.artifacts]
    else:
        folder = answer.artifacts[0].uri.removesuffix(answer.artifacts[0].name)
        assert (said["artifacts_count"], said["artifacts_uri"]) == (len(files), folder)
        assert folder == f"airlock://artifacts/{Path(answer.artifacts[0].path).parent.parent.name}/"
    if kept != "counts":
        assert len(answer.content.encode()) <= cap
