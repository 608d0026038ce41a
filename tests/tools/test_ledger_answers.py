"""What the write path answers when its ledger fails or holds the unexpected, on each store:
a ledger that cannot record a send that happened, free text PostgreSQL would refuse, a
damaged row, and a receipt that belongs to another preview of the same intent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import (
    AmbiguousWriteError,
    LedgerCorruptError,
    LedgerError,
    LedgerIOError,
    LedgerLockedError,
    LedgerUnavailableError,
    ToolError,
)
from tests.tools.stores import Backend

from .test_write_world import ALICE, ASK, World

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(tmp_path: Path, backend: Backend) -> Iterator[World]:
    w = World(tmp_path, database=backend.url)
    yield w
    w.close()


def _fail_moves(
    world: World, monkeypatch: pytest.MonkeyPatch, error: LedgerError, *to: str
) -> None:
    """Make the ledger raise ``error`` for every transition to one of ``to``."""
    real = world.ledger.transition

    def transition(preview_id: str, **kw: Any) -> Any:
        if kw["to"] in to:
            raise error
        return real(preview_id, **kw)

    monkeypatch.setattr(world.ledger, "transition", transition)


# -- a send that happened, a receipt the ledger could not store ---------------------------

LOCKED = LedgerLockedError("the ledger is locked", path="ledger.db")
GONE = LedgerUnavailableError("the ledger cannot be reached", path="db")
DISK = LedgerIOError("the disk is full", path="ledger.db")

AFTER_SEND: list[tuple[str, LedgerError, tuple[str, ...], str]] = [
    ("locked when the receipt is stored", LOCKED, ("committed",), "unknown"),
    ("unreachable when the receipt is stored", GONE, ("committed",), "unknown"),
    ("disk full when the receipt is stored", DISK, ("committed",), "unknown"),
    # Nothing can be recorded: the step stays ``sending``, and its lease lets reconcile in.
    ("locked for the receipt and for marking", LOCKED, ("committed", "unknown"), "sending"),
]


@pytest.mark.parametrize(
    ("name", "error", "failing", "state"), AFTER_SEND, ids=[c[0] for c in AFTER_SEND]
)
async def test_a_ledger_failure_after_the_send_is_an_ambiguous_write(
    world: World,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    error: LedgerError,
    failing: tuple[str, ...],
    state: str,
) -> None:
    preview = await world.prepare("inv_21")
    with monkeypatch.context() as patch:
        _fail_moves(world, patch, error, *failing)
        with pytest.raises(AmbiguousWriteError) as raised:  # never "nothing was written"
            await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert (raised.value.outcome, raised.value.idempotency_key) == ("unknown", preview.key)
    assert world.system.effects(preview.key) == 1
    assert world.ledger.preview(preview.id).state == state
    assert world.ledger.receipts() == []
    if state == "sending":
        world.clock.advance(3600)  # the lease ran out: reconcile takes the step over
        (resolution,) = await world.writes.reconcile()
        assert resolution.outcome == "committed"
    else:
        receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)
        assert receipt.resolved_by == "resend"
    assert world.system.effects(preview.key) == 1  # resent with the same key: one effect
    assert world.ledger.preview(preview.id).state == "committed"


# -- free text: the same on both stores, whatever characters it holds ---------------------

TEXTS: list[tuple[str, str, str]] = [
    ("NUL", "no\x00thanks", "no\\x00thanks"),
    ("ESC and BEL", "\x1b]0;title\x07 ok", "\\x1b]0;title\\x07 ok"),
    ("carriage return", "ok\rforged", "ok\\rforged"),
    ("tab and newline are kept", "one\ttwo\nthree", "one\ttwo\nthree"),
    ("printable text is kept", "päid twice [bold]", "päid twice [bold]"),
]


@pytest.mark.parametrize(("name", "text", "stored"), TEXTS, ids=[t[0] for t in TEXTS])
async def test_a_deny_reason_is_stored_with_controls_escaped(
    world: World, name: str, text: str, stored: str
) -> None:
    preview = await world.prepare("inv_22", approvals=ASK)
    world.writes.deny(preview.id, approver="bob", reason=text)
    denied = world.ledger.preview(preview.id)
    assert (denied.state, denied.error) == ("denied", f"denied: {stored}")
    assert world.ledger.history(preview.id)[-1].how == f"denied by bob: {stored}"


@pytest.mark.parametrize(("name", "text", "stored"), TEXTS, ids=[t[0] for t in TEXTS])
async def test_an_error_text_with_controls_still_marks_the_step_unknown(
    world: World, name: str, text: str, stored: str
) -> None:
    preview = await world.prepare("inv_23")

    def boom(key: str) -> None:
        raise RuntimeError(text)

    world.system.after_commit = boom
    with pytest.raises(AmbiguousWriteError):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    unknown = world.ledger.preview(preview.id)
    assert unknown.state == "unknown"
    assert unknown.error == f"RuntimeError: {stored}"


async def test_an_approval_reason_is_stored_with_controls_escaped(world: World) -> None:
    preview = await world.prepare("inv_24", approvals=ASK)
    world.writes.approve(preview.id, approver="bob", reason="fine\x00\x1b[2J")
    assert world.ledger.approval(preview.id).reason == "fine\\x00\\x1b[2J"


# -- a damaged row -------------------------------------------------------------------------

DAMAGE: list[tuple[str, str, str]] = [
    ("principal not JSON", "principal", "garbage"),
    ("principal not a principal", "principal", '{"user_id": 7}'),
    ("effect not JSON", "effect", "{"),
    ("effects not a list", "effects", "7"),
]


@pytest.mark.parametrize(("name", "column", "value"), DAMAGE, ids=[d[0] for d in DAMAGE])
async def test_a_damaged_row_is_ledger_corrupt_naming_it(
    world: World, name: str, column: str, value: str
) -> None:
    preview = await world.prepare("inv_25")
    world.sql(f"UPDATE previews SET {column} = ? WHERE id = ?", (value, preview.id))
    reads: list[Callable[[], object]] = [
        lambda: world.ledger.preview(preview.id),
        lambda: world.ledger.previews(),
        lambda: world.ledger.previews(states={"approved"}, run_id="run_1"),
    ]
    for read in reads:
        with pytest.raises(LedgerCorruptError) as raised:
            read()
        assert raised.value.code == "ledger_corrupt"
        assert preview.id in raised.value.message
    with pytest.raises(LedgerCorruptError):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert world.system.sends() == 0


async def test_a_damaged_receipt_is_ledger_corrupt_naming_it(world: World) -> None:
    preview = await world.prepare("inv_26")
    await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    world.sql("UPDATE receipts SET data = ? WHERE key = ?", ("{", preview.key))
    with pytest.raises(LedgerCorruptError) as raised:
        world.ledger.receipt(preview.key)
    assert preview.key in raised.value.message


@pytest.mark.parametrize(("name", "column", "value"), DAMAGE, ids=[d[0] for d in DAMAGE])
async def test_reconcile_skips_a_damaged_row_and_resolves_the_others(
    world: World, name: str, column: str, value: str
) -> None:
    lost = await world.prepare("inv_27")
    world.system.inject("lose_reply")
    with pytest.raises(AmbiguousWriteError):
        await world.writes.commit(lost.id, lost.fingerprint, ALICE)
    damaged = await world.prepare("inv_28")
    world.sql(
        f"UPDATE previews SET {column} = ?, state = 'unknown' WHERE id = ?", (value, damaged.id)
    )

    results = {r.preview_id: r for r in await world.writes.reconcile()}

    assert results[lost.id].outcome == "committed"
    skipped = results[damaged.id]
    assert (skipped.outcome, skipped.before, skipped.after) == ("unresolved", "unknown", "unknown")
    assert skipped.tool == lost.tool
    assert damaged.id in skipped.how
    assert "does not read back" in skipped.how
    assert world.system.effects(damaged.key) == 0  # nothing sent for what could not be read


# -- another preview's receipt is no answer -----------------------------------------------


def _deny(world: World, preview_id: str) -> None:
    world.writes.deny(preview_id, approver="bob", reason="not this one")


def _fail(world: World, preview_id: str) -> None:
    world.sql(
        "UPDATE previews SET state = 'failed', error = 'conflict' WHERE id = ?", (preview_id,)
    )


ENDED: list[tuple[str, Callable[[World, str], None], str]] = [
    ("denied", _deny, "denied"),
    ("failed", _fail, "conflict"),
]


@pytest.mark.parametrize(("name", "end", "code"), ENDED, ids=[e[0] for e in ENDED])
async def test_committing_a_preview_that_freed_its_key_answers_from_its_own_state(
    world: World, name: str, end: Callable[[World, str], None], code: str
) -> None:
    first = await world.prepare("inv_29", approvals=ASK)
    end(world, first.id)
    second = await world.prepare("inv_29", approvals=ASK)  # the same intent: the same key
    assert (second.id != first.id, second.key) == (True, first.key)
    world.writes.approve(second.id, approver="bob")
    committed = await world.writes.commit(second.id, second.fingerprint, ALICE)

    with pytest.raises(ToolError) as raised:
        await world.writes.commit(first.id, first.fingerprint, ALICE)

    assert raised.value.code == code
    assert world.ledger.preview(first.id).state == name
    assert world.writes.receipt(first) is None
    assert world.writes.receipt(second) == committed
    assert world.system.effects(first.key) == 1
