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
from airlock.tools._audit_log import AuditLog
from airlock.tools._worker_threads import MOST_OUTLIVING, outliving
from airlock.tools.testing import Refund, SystemOfRecord, refund_tool
from tests.tools.stores import open_ledger

from .test_write_world import ALICE, INVOICES, TOOL, Clock, context

pytestmark = pytest.mark.anyio


class HangingRig:
    """A refund tool whose sync commit and lookup block while :attr:`hang` says so (until
    :attr:`gate` opens), with a timeout of 0.05 s."""

    def __init__(self, root: Path) -> None:
        self.system = SystemOfRecord(root / "system.db")
        self.gate = threading.Event()
        self.hang: set[str] = set()  # "commit", "lookup"
        base = refund_tool(self.system, INVOICES, timeout=0.05)
        assert base.write is not None
        assert base.write.lookup is not None
        real_commit, real_lookup = base.write.commit, base.write.lookup

        def blocking(kind: str, real: Callable[[Refund, str], Any]) -> Callable[..., Any]:
            def call(effect: Refund, key: str) -> Any:  # sync: run in a worker thread
                if kind in self.hang:
                    self.gate.wait(30)
                return real(effect, key)

            return call

        contract = dataclasses.replace(
            base.write,
            commit=blocking("commit", real_commit),
            lookup=blocking("lookup", real_lookup),
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
    r.gate.set()
    r.ledger.close()
    r.system.close()


async def _timed_out_commits(rig: HangingRig) -> list[Preview]:
    """``MOST_OUTLIVING`` steps whose sync commit ran past its timeout: each ``unknown``."""
    rig.hang.add("commit")
    steps = []
    for n in range(1, MOST_OUTLIVING + 1):
        step = await rig.approved(n)
        with pytest.raises(AmbiguousWriteError):
            await rig.writes.commit(step.id, step.fingerprint, ALICE)
        steps.append(step)
    assert outliving(rig.spec) == MOST_OUTLIVING
    return steps


async def test_a_commit_once_its_tool_has_too_many_threads_running_on_changes_nothing(
    rig: HangingRig,
) -> None:
    waiting = await rig.approved(30)  # (its prepare, a sync one too, is refused after)
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
