"""What a program's proposals become: a change already committed in the run is told as
such, in no batch and no total; proposals the ledger could not hold as one batch each wait
as a paused write of the session, which commits the one a person approves and tells the
model, and the model is told exactly that."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock import Harness, Session
from airlock.sandbox import RunResult
from airlock.sandbox.testing import ok_result
from airlock.tools import (
    LEDGER_ERRORS,
    approve_preview,
    batch_items,
    deny_preview,
    spend_totals,
)
from tests.airlock.harness.batch_world import PEEK, REFUND, body
from tests.airlock.harness.test_program_endings import EndingBackend
from tests.airlock.session_world import ALICE, policy
from tests.tools.test_proposals import PROPOSING, ProposalWorld

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ProposalWorld]:
    w = ProposalWorld(tmp_path)
    yield w
    w.close()


def _session(
    world: ProposalWorld,
    root: Path,
    invoices: tuple[str, ...],
    backend: EndingBackend | None = None,
) -> Session:
    backend = backend or EndingBackend(lambda artifacts: ok_result("done"), invoices=invoices)
    harness = Harness(
        world.registry, policy(), backend, writes=world.writes, artifacts=root / "store"
    )
    return harness.session(ALICE, grant=PROPOSING)


async def _commit_directly(world: ProposalWorld, session: Session, invoice: str) -> str:
    """A refund the model asked for directly, approved and committed; its preview id."""
    paused = body(await session.call(REFUND, {"invoice_id": invoice, "reason": "duplicate"}))
    approve_preview(world.ledger, paused["preview_id"], approver="bob", now=time.time())
    assert body(await session.resume(paused["preview_id"]))["status"] == "committed"
    return str(paused["preview_id"])


# (case, what the program proposes: inv_1 was committed in the run before)
REPROPOSED = [
    ("only the committed change", ("inv_1",)),
    ("the committed change and a new one", ("inv_1", "inv_2")),
    ("a new one and the committed change", ("inv_2", "inv_1")),
]


@pytest.mark.parametrize(("case", "invoices"), REPROPOSED, ids=[row[0] for row in REPROPOSED])
async def test_a_change_committed_in_the_run_is_told_as_such_and_batched_with_nothing(
    tmp_path: Path, world: ProposalWorld, case: str, invoices: tuple[str, ...]
) -> None:
    session = _session(world, tmp_path, invoices)
    committed = await _commit_directly(world, session, "inv_1")

    answer = await session.call("execute_code", {"code": "..."})

    note = body(answer)["proposals"]
    assert world.system.effects() == 1  # nothing was sent again
    assert (note["already_committed"], note["already_committed_ids"]) == (1, [committed])
    assert "already committed" in note["message"]
    new = len(invoices) - 1
    if not new:  # nothing new: no batch, nothing waits
        assert note["status"] == "already_committed"
        assert "batch_id" not in note
        assert "total" not in note
        assert answer.code is None, answer.content
        assert session.pending_batches() == []
        return
    [batch_id] = session.pending_batches()
    assert (note["status"], note["batch_id"], note["count"]) == ("needs_approval", batch_id, new)
    items = [item.preview_id for item in batch_items(world.ledger, batch_id, now=time.time())]
    assert committed not in items
    assert items == note["preview_ids"]
    fresh = [world.ledger.preview(preview_id) for preview_id in items]
    assert note["total"] == spend_totals([p for p in fresh if p is not None])


def _unstorable(world: ProposalWorld, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    def fail(batch: object) -> None:
        raise LEDGER_ERRORS[code]("/srv/secret/ledger.db is gone", path="/srv/secret/ledger.db")

    monkeypatch.setattr(world.ledger, "add_batch", fail)


@pytest.mark.parametrize("code", sorted(LEDGER_ERRORS))
async def test_proposals_the_ledger_cannot_batch_each_wait_and_are_committed_when_approved(
    tmp_path: Path, world: ProposalWorld, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    _unstorable(world, monkeypatch, code)
    session = _session(world, tmp_path, ("inv_1", "inv_2"))

    answer = await session.call("execute_code", {"code": "..."})

    said = body(answer)
    note = said["proposals"]
    assert (answer.code, answer.retryable) == (code, False)  # the proposals wait: no rerun
    assert (note["status"], note["held"]) == ("not_held", "each")
    assert "each waits" in note["message"]
    assert "do not propose them again" in note["message"]
    assert "do not wait for approval" not in answer.content
    assert [p.preview_id for p in session.pending()] == note["preview_ids"]
    assert session.pending_batches() == []

    first = note["preview_ids"][0]
    approve_preview(world.ledger, first, approver="bob", now=time.time())
    told = body(await session.call(*PEEK))["settled_writes"]

    assert [(t["status"], t["preview_id"]) for t in told] == [("committed", first)]
    assert world.system.effects() == 1
    assert [p.preview_id for p in session.pending()] == note["preview_ids"][1:]


async def test_proposals_that_cannot_be_held_at_all_are_told_as_stored_for_the_operator(
    tmp_path: Path, world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unstorable(world, monkeypatch, "ledger_locked")
    session = _session(world, tmp_path, ("inv_1", "inv_2"))
    session._batches.paused_writes = None  # (a batches object no session's writes back)

    answer = await session.call("execute_code", {"code": "..."})

    note = body(answer)["proposals"]
    assert (answer.code, answer.retryable) == ("ledger_locked", False)
    assert (note["status"], note["held"]) == ("not_held", "none")
    assert "prepared" in note["message"]
    assert "approvals list" in note["message"]
    assert "do not propose them again" in note["message"]
    assert session.pending() == []
    states = [world.ledger.preview(p) for p in note["preview_ids"]]
    assert [p.state for p in states if p is not None] == ["prepared", "prepared"]


async def _pause_directly(session: Session, invoice: str) -> str:
    """A refund the model asked for directly, paused for approval; its preview id."""
    paused = body(await session.call(REFUND, {"invoice_id": invoice, "reason": "duplicate"}))
    return str(paused["preview_id"])


# (case, how inv_1 already waits, what the next program proposes)
WAITING = [
    ("a paused write proposed alone", "paused", ("inv_1",)),
    ("a paused write proposed with a new one", "paused", ("inv_1", "inv_2")),
    ("a batch item proposed alone", "batch", ("inv_1",)),
    ("a batch item proposed with a new one", "batch", ("inv_2", "inv_1")),
]


@pytest.mark.parametrize(("case", "how", "invoices"), WAITING, ids=[row[0] for row in WAITING])
async def test_a_change_that_already_waits_is_held_where_it_waits_and_told_once(
    tmp_path: Path, world: ProposalWorld, case: str, how: str, invoices: tuple[str, ...]
) -> None:
    backend = EndingBackend(lambda artifacts: ok_result("done"), invoices=("inv_1",))
    session = _session(world, tmp_path, invoices, backend)
    if how == "paused":
        waiting = await _pause_directly(session, "inv_1")
        held_before: list[str] = []
    else:  # a program proposed it before
        first = body(await session.call("execute_code", {"code": "..."}))["proposals"]
        [waiting] = first["preview_ids"]
        held_before = [first["batch_id"]]
    backend.invoices = invoices

    answer = await session.call("execute_code", {"code": "..."})

    note = body(answer)["proposals"]
    assert (note["already_waiting"], note["already_waiting_ids"]) == (1, [waiting])
    assert "already wait" in note["message"]
    new_batches = [b for b in session.pending_batches() if b not in held_before]
    for batch_id in new_batches:
        items = [i.preview_id for i in batch_items(world.ledger, batch_id, now=time.time())]
        assert waiting not in items
    if len(invoices) == 1:
        assert note["status"] == "already_waiting"
        assert new_batches == []
    else:
        assert note["status"] == "needs_approval"
        assert [note["batch_id"]] == new_batches

    # Approved, it is committed once and told once.
    approve_preview(world.ledger, waiting, approver="bob", now=time.time())
    told = [
        t
        for _ in range(2)
        for t in body(await session.call(*PEEK)).get("settled_writes") or []
        if t.get("preview_id") == waiting
        or any(waiting in ids for ids in t.get("preview_ids", {}).values())
    ]
    assert world.system.effects() == 1
    assert len(told) == 1, told


class SettlingBackend(EndingBackend):
    """Proposes as :class:`EndingBackend`, then ``decide`` judges the paused write and the
    session settles it before the program ends, as the watcher of `serve` and `chat` does."""

    session: Session | None = None
    paused = ""
    decide: str = "approve"

    async def run(self, program: str, **kwargs: Any) -> RunResult:
        result = await super().run(program, **kwargs)
        assert self.session is not None
        ledger = self.session._writes.ledger  # type: ignore[union-attr]
        if self.decide == "approve":
            approve_preview(ledger, self.paused, approver="bob", now=time.time())
        else:
            deny_preview(ledger, self.paused, approver="bob", reason="no", now=time.time())
        await self.session.settle_writes()
        return result


# (case, how the paused inv_1 is judged while a program proposes it, what the program
# proposes, the note's status, the key naming inv_1 in the note, the state of inv_1 after)
SETTLED_MEANWHILE = [
    ("committed, proposed alone", "approve", ("inv_1",), "already_committed", "committed"),
    (
        "committed, proposed with a new one",
        "approve",
        ("inv_1", "inv_2"),
        "needs_approval",
        "committed",
    ),
    ("denied, proposed alone", "deny", ("inv_1",), "already_ended", "denied"),
    ("denied, proposed with a new one", "deny", ("inv_2", "inv_1"), "needs_approval", "denied"),
]


@pytest.mark.parametrize(
    ("case", "decide", "invoices", "status", "state"),
    SETTLED_MEANWHILE,
    ids=[row[0] for row in SETTLED_MEANWHILE],
)
async def test_a_change_settled_while_the_program_ran_is_told_as_it_ended_in_no_batch(
    tmp_path: Path,
    world: ProposalWorld,
    case: str,
    decide: str,
    invoices: tuple[str, ...],
    status: str,
    state: str,
) -> None:
    backend = SettlingBackend(lambda artifacts: ok_result("done"), invoices=invoices)
    session = _session(world, tmp_path, invoices, backend)
    paused = await _pause_directly(session, "inv_1")
    backend.session, backend.paused, backend.decide = session, paused, decide

    answer = await session.call("execute_code", {"code": "..."})

    note = body(answer)["proposals"]
    key = "already_committed" if state == "committed" else "already_ended"
    assert (note["status"], note[key], note[f"{key}_ids"]) == (status, 1, [paused])
    for batch_id in session.pending_batches():
        items = [i.preview_id for i in batch_items(world.ledger, batch_id, now=time.time())]
        assert paused not in items
    assert answer.code == ("needs_approval" if len(invoices) > 1 else None)
    assert world.ledger.preview(paused).state == state  # type: ignore[union-attr]
    told = [
        t
        for _ in range(2)
        for t in body(await session.call(*PEEK)).get("settled_writes") or []
        if t.get("preview_id") == paused
        or any(paused in ids for ids in t.get("preview_ids", {}).values())
    ]
    assert told == []  # told once, with the program's answer
    assert world.system.effects() == (state == "committed")


class CountingBackend(EndingBackend):
    """Proposes as :class:`EndingBackend`, then counts each preview the ledger is asked for
    after the program ended (what the session re-reads to tell where each proposal stands)."""

    reread: list[str]

    async def run(self, program: str, **kwargs: Any) -> RunResult:
        result = await super().run(program, **kwargs)
        tools = kwargs["tools"]
        ledger = tools.writes.ledger
        self.reread = []
        read = ledger.preview

        def counted(preview_id: str) -> Any:
            self.reread.append(preview_id)
            return read(preview_id)

        ledger.preview = counted  # the instance's own: gone with the world
        return result


async def test_fresh_proposals_are_not_read_again_when_the_program_ends(
    tmp_path: Path, world: ProposalWorld
) -> None:
    """Only a change the session held before the program may have moved meanwhile (its
    settling runs while the program does): one query per proposal would block the event
    loop once per proposal, at every program's end."""
    invoices = tuple(f"inv_{n}" for n in range(1, 21))
    backend = CountingBackend(lambda artifacts: ok_result("done"), invoices=("inv_1",))
    session = _session(world, tmp_path, invoices, backend)
    paused = await _pause_directly(session, "inv_1")
    backend.invoices = invoices

    answer = await session.call("execute_code", {"code": "..."})

    note = body(answer)["proposals"]
    assert (note["status"], note["count"], note["already_waiting_ids"]) == (
        "needs_approval",
        19,
        [paused],
    )
    assert backend.reread.count(paused) == 1
    fresh = set(note["preview_ids"])
    assert [p for p in backend.reread if p in fresh] == []
