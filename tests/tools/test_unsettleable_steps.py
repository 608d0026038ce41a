"""Steps the write path cannot settle: an answer of the system of record that cannot be kept
(text holding a lone surrogate, which a JavaScript service sends when it cuts a string inside
a surrogate pair) and a ledger that fails on one step. The send happened, so the step is
``unknown`` with an audit event and the caller gets ``ambiguous_write``; reconcile reports
such a step ``unresolved`` and settles the others in the same pass."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import (
    AmbiguousWriteError,
    LedgerClosedError,
    LedgerIOError,
    LedgerLockedError,
    LedgerNotADatabaseError,
    LedgerReadOnlyError,
    LedgerReplacedError,
    LedgerUnavailableError,
    Preview,
)
from airlock.tools._audit_chain import AuditStoreError
from tests.tools.stores import Backend

from .test_write_world import ALICE, World

pytestmark = pytest.mark.anyio

# Answers whose text validates as ``str`` but cannot be written as UTF-8.
UNUSABLE = [
    ("a lone high surrogate", json.loads('"succeeded\\ud800"')),
    ("a lone low surrogate", json.loads('"\\udfff"')),
    ("a pair in the wrong order", json.loads('"ok\\udc00\\ud800"')),
]


@pytest.fixture
def world(tmp_path: Path, backend: Backend) -> Iterator[World]:
    w = World(tmp_path, with_lookup=False, database=backend.url)
    yield w
    w.close()


def _answer_with(world: World, invoice: str, status: str) -> None:
    """The system of record applies sends for ``invoice`` and answers with ``status``."""
    real = world.system.send

    def send(key: str, request: Any) -> Any:
        answer = dict(real(key, request))
        if request["invoice_id"] == invoice:
            answer["status"] = status
        return answer

    world.system.send = send  # type: ignore[method-assign]


async def _unknown(world: World, invoice: str) -> Preview:
    """A step whose send got no definite answer (nothing reached the system)."""
    preview = await world.prepare(invoice)
    world.system.inject("fail_before")
    with pytest.raises(AmbiguousWriteError):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    return preview


@pytest.mark.parametrize("status", [u[1] for u in UNUSABLE], ids=[u[0] for u in UNUSABLE])
async def test_an_answer_that_cannot_be_kept_leaves_the_step_unknown(
    world: World, status: str
) -> None:
    _answer_with(world, "inv_9", status)
    preview = await world.prepare("inv_9")

    with pytest.raises(AmbiguousWriteError) as raised:
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert (raised.value.code, raised.value.retryable) == ("ambiguous_write", True)
    step = world.ledger.preview(preview.id)
    assert step is not None
    assert step.state == "unknown"
    assert step.error is not None
    assert "unusable receipt" in step.error
    events = [(e.stage, e.outcome, e.code) for e in world.registry.audit.events()]
    assert ("execute", "unknown", "ambiguous_write") in events
    assert world.system.effects() == 1


def _failing_claims(world: World, preview_id: str, error: Exception) -> None:
    """The ledger raises ``error`` when reconcile claims ``preview_id``."""
    real = world.ledger.transition

    def transition(pid: str, **kw: Any) -> Any:
        if pid == preview_id and kw.get("to") == "sending":
            raise error
        return real(pid, **kw)

    world.ledger.transition = transition


def _unusable_answer(world: World, preview: Preview) -> None:
    _answer_with(world, "inv_9", json.loads('"succeeded\\ud800"'))


# What goes wrong on the newer of two undecided steps (listed first) alone, and the code that
# reconcile reports for it. A store that fails every step is not one of these: see STORE_WIDE.
FAULTS: list[tuple[str, Callable[[World, Preview], None], str]] = [
    ("an answer that cannot be kept", _unusable_answer, "unusable receipt"),
    (
        "a ledger locked by another process",
        lambda w, p: _failing_claims(w, p.id, LedgerLockedError("held", path="db")),
        "ledger_locked",
    ),
    (
        "an error nobody expected",
        lambda w, p: _failing_claims(w, p.id, RuntimeError("a bug")),
        "RuntimeError",
    ),
]


@pytest.mark.parametrize(("fault", "code"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
async def test_a_reconcile_pass_goes_on_past_a_step_it_cannot_settle(
    world: World, fault: Callable[[World, Preview], None], code: str
) -> None:
    older = await _unknown(world, "inv_8")
    world.clock.advance(1)
    newer = await _unknown(world, "inv_9")
    fault(world, newer)
    world.clock.advance(3600)

    resolutions = {r.preview_id: r for r in await world.writes.reconcile()}

    assert (resolutions[older.id].outcome, resolutions[older.id].after) == (
        "committed",
        "committed",
    )
    assert resolutions[newer.id].outcome == "unresolved"
    assert code in resolutions[newer.id].how
    step = world.ledger.preview(newer.id)
    assert step is not None
    assert step.state == "unknown"  # never left 'sending', never marked settled


def _failing_reads(world: World, preview_id: str, error: Exception) -> None:
    """The ledger raises ``error`` when reconcile reads ``preview_id``'s row."""
    real = world.ledger.preview

    def preview(pid: str) -> Any:
        if pid == preview_id:
            raise error
        return real(pid)

    world.ledger.preview = preview


# A store that fails as a whole: every step would fail the same way, so reconcile stops and
# raises (``airlock serve`` must not start committing on top of undecided steps) instead of
# reporting each step ``unresolved`` to a caller that does not read the results.
STORE_WIDE: list[tuple[str, Exception]] = [
    ("a ledger that cannot be reached", LedgerUnavailableError("gone", path="db")),
    ("a ledger that may not be written", LedgerReadOnlyError("read-only", path="db")),
    ("a ledger that is not a database", LedgerNotADatabaseError("not one", path="db")),
    ("a ledger replaced while open", LedgerReplacedError("replaced", path="db")),
    ("a disk that failed", LedgerIOError("disk full", path="db")),
    ("a ledger this process closed", LedgerClosedError("closed", path="db")),
    ("an audit store that refuses appends", AuditStoreError("the tail is not the head")),
]
FAILING_AT: dict[str, Callable[[World, str, Exception], None]] = {
    "read": _failing_reads,
    "claim": _failing_claims,
}


@pytest.mark.parametrize("where", list(FAILING_AT))
@pytest.mark.parametrize("error", [s[1] for s in STORE_WIDE], ids=[s[0] for s in STORE_WIDE])
async def test_a_reconcile_pass_stops_on_a_store_that_fails_every_step(
    world: World, error: Exception, where: str
) -> None:
    preview = await _unknown(world, "inv_9")
    read = world.ledger.preview
    FAILING_AT[where](world, preview.id, error)
    world.clock.advance(3600)

    with pytest.raises(type(error)) as raised:
        await world.writes.reconcile()

    assert raised.value is error
    step = read(preview.id)
    assert step is not None
    assert step.state == "unknown"


# What fails when reconcile, having resolved a step, releases the values it kept for it.
RELEASE_FAULTS: list[tuple[str, Exception]] = [
    ("a ledger locked by another process", LedgerLockedError("held", path="db")),
    ("a ledger that cannot be reached", LedgerUnavailableError("gone", path="db")),
    ("an error nobody expected", RuntimeError("a bug")),
]


@pytest.mark.parametrize(
    "error", [f[1] for f in RELEASE_FAULTS], ids=[f[0] for f in RELEASE_FAULTS]
)
async def test_a_resolved_step_is_reported_once_when_releasing_its_values_fails(
    world: World, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    preview = await _unknown(world, "inv_9")
    world.clock.advance(3600)

    def release(preview_id: str) -> None:
        raise error

    monkeypatch.setattr(world.writes, "_forget_if_settled", release)
    resolutions = await world.writes.reconcile()

    assert [(r.preview_id, r.outcome, r.after) for r in resolutions] == [
        (preview.id, "committed", "committed")
    ]


@pytest.mark.parametrize("text", [u[1] for u in UNUSABLE], ids=[u[0] for u in UNUSABLE])
async def test_an_error_whose_text_cannot_be_kept_still_marks_the_step_unknown(
    world: World, text: str
) -> None:
    # What the system raised echoes its answer; the ledger keeps the text, escaped.
    def send(key: str, request: Any) -> Any:
        raise ConnectionError(f"reset after the request was sent: {text}")

    world.system.send = send  # type: ignore[method-assign]
    preview = await world.prepare("inv_7")

    with pytest.raises(AmbiguousWriteError):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)

    step = world.ledger.preview(preview.id)
    assert step is not None
    assert step.state == "unknown"
    assert step.error is not None
    assert "\\ud" in step.error
