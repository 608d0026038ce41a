"""A write's sync ``commit`` and reconcile's sync ``lookup`` past their timeouts: their
threads run on, counted against the tool like a handler's, and once the tool has
``MOST_OUTLIVING`` of them a commit or a reconcile of its steps changes nothing (the step stays
as it was, nothing is sent) instead of starting one more thread."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.tools import (
    AmbiguousWriteError,
    MemoryAuditStore,
    Preview,
    Registry,
    UpstreamError,
    WritePath,
)
from airlock.tools import _worker_threads as worker_threads
from airlock.tools._audit_log import AuditLog
from airlock.tools._worker_threads import MOST_OUTLIVING, MOST_OUTLIVING_IN_PROCESS, outliving
from airlock.tools.testing import Refund, SystemOfRecord, refund_tool
from tests.tools.stores import open_ledger

from .test_write_world import ALICE, INVOICES, TOOL, Clock, context

pytestmark = pytest.mark.anyio


class HangingRig:
    """A refund tool whose sync commit and lookup block while :attr:`hang` says so (until
    :attr:`gate` opens), with a timeout of 0.2 s. Its prepare is async: a preview needs no
    worker thread, which a loaded machine may not start within 0.2 s."""

    def __init__(
        self,
        root: Path,
        *,
        async_commit: bool = False,
        async_lookup: bool = False,
        timeout: float = 0.2,
    ) -> None:
        self.system = SystemOfRecord(root / "system.db")
        self.gate = threading.Event()
        self.hang: set[str] = set()  # "commit", "lookup"
        self.started: list[str] = []  # the keys whose sync commit's code ran
        base = refund_tool(self.system, INVOICES, timeout=timeout)
        assert base.write is not None
        assert base.write.lookup is not None
        real_prepare = base.write.prepare
        real_commit, real_lookup = base.write.commit, base.write.lookup

        def blocking(kind: str, real: Callable[[Refund, str], Any]) -> Callable[..., Any]:
            def call(effect: Refund, key: str) -> Any:  # sync: run in a worker thread
                if kind == "commit":
                    self.started.append(key)
                if kind in self.hang:
                    self.gate.wait(30)
                return real(effect, key)

            return call

        async def prepare_async(args: Any, principal: Any) -> Any:
            return real_prepare(args, principal)

        async def commit_async(effect: Refund, key: str) -> Any:
            return real_commit(effect, key)

        async def lookup_async(effect: Refund, key: str) -> Any:
            return real_lookup(effect, key)

        contract = dataclasses.replace(
            base.write,
            prepare=prepare_async,
            commit=commit_async if async_commit else blocking("commit", real_commit),
            lookup=lookup_async if async_lookup else blocking("lookup", real_lookup),
        )
        self.spec = dataclasses.replace(base, write=contract)
        self.registry = Registry(audit=AuditLog(MemoryAuditStore()))
        self.registry.register(self.spec)
        self.ledger = open_ledger(str(root))
        self.writes = WritePath(self.registry, self.ledger, clock=Clock())

    async def approved(self, n: int) -> Preview:
        args = {"invoice_id": f"inv_{n}", "reason": "duplicate"}
        return await self.writes.preview_call(TOOL, args, context())  # (approved by rule)

    def state(self, preview: Preview) -> tuple[str, int]:
        stored = self.ledger.preview(preview.id)
        assert stored is not None
        return stored.state, stored.attempts

    def close(self) -> None:
        """Let every hanging call go on, and close the ledger and the system."""
        self.gate.set()
        self.ledger.close()
        self.system.close()

    async def released(self) -> None:
        self.hang.clear()
        self.gate.set()
        with anyio.fail_after(10):
            while outliving(self.spec):
                await anyio.sleep(0.01)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[HangingRig]:
    r = HangingRig(tmp_path)
    yield r
    r.close()


async def _timed_out_commits(rig: HangingRig) -> list[Preview]:
    """``MOST_OUTLIVING`` steps whose sync commit ran past its timeout: each ``unknown``."""
    rig.hang.add("commit")
    steps = []
    for n in range(1, MOST_OUTLIVING + 1):
        step = await rig.approved(n)
        for _ in range(5):  # a commit whose thread did not start in time sent nothing: again
            with pytest.raises((AmbiguousWriteError, UpstreamError)) as raised:
                await rig.writes.commit(step.id, step.fingerprint, ALICE)
            if isinstance(raised.value, AmbiguousWriteError):
                break
            assert "not sent" in raised.value.message, raised.value.message
        else:
            pytest.fail(f"the commit of {step.id} never started its thread")
        steps.append(step)
    assert outliving(rig.spec) == MOST_OUTLIVING
    return steps


async def test_a_commit_once_its_tool_has_too_many_threads_running_on_changes_nothing(
    rig: HangingRig,
) -> None:
    waiting = await rig.approved(30)
    await _timed_out_commits(rig)

    with pytest.raises(UpstreamError) as raised:
        await rig.writes.commit(waiting.id, waiting.fingerprint, ALICE)

    wire = raised.value.to_wire()
    assert (wire["retryable"], wire["outcome"]) == (True, "error")
    assert rig.state(waiting) == ("approved", 0)  # not claimed: its approval still stands
    assert outliving(rig.spec) == MOST_OUTLIVING  # no thread more
    await rig.released()
    receipt = await rig.writes.commit(waiting.id, waiting.fingerprint, ALICE)
    assert receipt.preview_id == waiting.id
    assert rig.system.effects(waiting.key) == 1


# (case, what hangs as reconcile runs: its steps were left unknown by commits that hung)
RECONCILED = [
    ("resend_refused_while_commits_run_on", "commit"),
    ("lookup_counted_and_refused", "lookup"),
]


@pytest.mark.parametrize(("case", "hangs"), RECONCILED, ids=[c[0] for c in RECONCILED])
async def test_reconcile_starts_no_more_threads_than_the_bound(
    rig: HangingRig, case: str, hangs: str
) -> None:
    steps = await _timed_out_commits(rig)
    if hangs == "lookup":  # the commits' threads end; now every lookup hangs
        await rig.released()
        rig.gate.clear()
        rig.hang.add("lookup")
        more = await rig.approved(30)
        rig.system.inject("lose_reply")
        with pytest.raises(AmbiguousWriteError):
            await rig.writes.commit(more.id, more.fingerprint, ALICE)
        steps.append(more)
    before = {step.id: rig.state(step) for step in steps}

    with anyio.fail_after(30):
        results = await rig.writes.reconcile()

    assert outliving(rig.spec) <= MOST_OUTLIVING
    refused = [r for r in results if "past their timeouts" in r.how]
    assert refused, [r.how for r in results]
    for resolution in refused:  # not claimed: nothing sent, no attempt counted
        assert resolution.outcome == "unresolved"
        step = next(s for s in steps if s.id == resolution.preview_id)
        assert rig.state(step) == before[step.id]
    await rig.released()
    results = await rig.writes.reconcile()
    assert {r.outcome for r in results} == {"committed"}
    assert all(rig.system.effects(step.key) == 1 for step in steps)


async def test_reconcile_claims_nothing_when_a_resend_would_meet_the_bound(
    tmp_path: Path,
) -> None:
    # An async lookup starts no thread, but a step it does not find is resent through the
    # sync commit: at the commit's bound, the step is left as it was, not claimed.
    rig = HangingRig(tmp_path, async_lookup=True)
    try:
        steps = await _timed_out_commits(rig)
        before = {step.id: rig.state(step) for step in steps}

        results = await rig.writes.reconcile()

        assert [r.outcome for r in results] == ["unresolved"] * len(steps)
        assert all("past their timeouts" in r.how for r in results), [r.how for r in results]
        assert {step.id: rig.state(step) for step in steps} == before
        await rig.released()
        results = await rig.writes.reconcile()
        assert {r.outcome for r in results} == {"committed"}
        assert all(rig.system.effects(step.key) == 1 for step in steps)
    finally:
        rig.close()


async def test_a_commit_that_meets_the_bound_as_its_thread_starts_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit passed the check before its claim and waits for a worker thread; the tool
    # reaches its bound meanwhile (other commits timed out): its code never runs.
    rig = HangingRig(tmp_path, timeout=5.0)
    step = await rig.approved(1)
    limiter = anyio.to_thread.current_default_thread_limiter()
    total, limiter.total_tokens = limiter.total_tokens, 1
    busy = threading.Event()
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.to_thread.run_sync, busy.wait)  # holds the one token
            await anyio.sleep(0.05)
            tasks.start_soon(_commit_expecting_no_answer, rig, step)
            await anyio.sleep(0.05)  # claimed, and waiting for the token
            assert rig.state(step) == ("sending", 1)
            monkeypatch.setitem(worker_threads._OUTLIVING, rig.spec.name, MOST_OUTLIVING)
            busy.set()
        assert rig.started == []  # never ran: nothing sent, and its claim given back
        assert rig.state(step) == ("approved", 0)
        assert rig.ledger.history(step.id)[-1].how.startswith("not sent")
    finally:
        busy.set()
        limiter.total_tokens = total
        rig.close()


async def _commit_expecting_no_answer(rig: HangingRig, step: Preview) -> None:
    with pytest.raises(UpstreamError) as raised:  # not sent: still approved, retryable
        await rig.writes.commit(step.id, step.fingerprint, ALICE)
    assert (raised.value.retryable, raised.value.outcome) == (True, "error")


# (case, whether the tool's commit is async: it starts no thread, so no bound refuses it)
COMMIT_KINDS = [("sync_refused", False), ("async_sent", True)]


@pytest.mark.parametrize(("case", "is_async"), COMMIT_KINDS, ids=[c[0] for c in COMMIT_KINDS])
async def test_only_a_sync_commit_is_refused_at_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, is_async: bool
) -> None:
    rig = HangingRig(tmp_path, async_commit=is_async)
    try:
        step = await rig.approved(1)
        monkeypatch.setattr(worker_threads, "_in_process", MOST_OUTLIVING_IN_PROCESS)
        if is_async:
            receipt = await rig.writes.commit(step.id, step.fingerprint, ALICE)
            assert receipt.preview_id == step.id
        else:
            with pytest.raises(UpstreamError):
                await rig.writes.commit(step.id, step.fingerprint, ALICE)
            assert rig.state(step) == ("approved", 0)
    finally:
        rig.close()
