"""A claimed step whose send certainly never started (its thread met the tool's bound as it
was about to start, or its timeout or a cancellation passed while it waited for a worker
thread) goes back to the state it was claimed from: the attempt is taken back, an approval
the claim used is usable again, and nothing is sent. Nothing about it is undecided."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import pytest

from airlock.tools import (
    AmbiguousWriteError,
    MemoryAuditStore,
    Preview,
    Registry,
    StepStateError,
    ToolError,
    UpstreamError,
    WritePath,
)
from airlock.tools import _worker_threads as worker_threads
from airlock.tools._audit_log import AuditLog
from airlock.tools._errors import CommitInFlightError
from airlock.tools._step_owner import owner_token
from airlock.tools._worker_threads import MOST_OUTLIVING
from tests.tools.ledger_records import make_approval, make_preview
from tests.tools.stores import Backend
from tests.tools.test_commit_threads import HangingRig
from tests.tools.test_reach_forms import World, ctx
from tests.tools.test_write_world import ALICE, Clock

pytestmark = pytest.mark.anyio

TOOL = "billing_refund_create"

Ending = Literal["bound", "timeout", "cancel"]
"""How a call waiting for a worker thread ends without its code running: the tool meets its
bound as the thread is about to start (``NotSent``), its timeout passes, or it is cancelled."""


async def _waiting_for_a_thread(
    call: Callable[[], Awaitable[Any]],
    ending: Ending,
    *,
    tool: str,
    timeout: float = 0.0,
    waiting: Callable[[], None] = lambda: None,
) -> BaseException | None:
    """Run ``call()`` while the process's one worker thread is busy, end its wait as
    ``ending`` says (``waiting()`` runs once it waits), and return what it raised."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    total, limiter.total_tokens = limiter.total_tokens, 1
    busy = threading.Event()
    raised: list[BaseException] = []
    scope = anyio.CancelScope()

    async def calling() -> None:
        with scope:
            try:
                await call()
            except Exception as exc:
                raised.append(exc)
            except BaseException as exc:  # the cancellation: the scope takes it
                raised.append(exc)
                raise

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.to_thread.run_sync, busy.wait)  # holds the one thread
            await anyio.sleep(0.05)
            tasks.start_soon(calling)
            await anyio.sleep(0.05)  # claimed, and waiting for the thread
            waiting()
            if ending == "bound":  # its tool reaches its bound meanwhile
                worker_threads._OUTLIVING[tool] = MOST_OUTLIVING
            elif ending == "timeout":
                await anyio.sleep(timeout * 2)
            else:
                scope.cancel()
                await anyio.sleep(0.05)
            busy.set()
    finally:
        busy.set()
        limiter.total_tokens = total
        worker_threads._OUTLIVING.pop(tool, None)
    return raised[0] if raised else None


def _rig(root: Path, backend: Backend, **kw: Any) -> HangingRig:
    """A :class:`HangingRig` whose ledger is ``backend``'s."""
    rig = HangingRig(root, **kw)
    if backend.name != "sqlite":
        rig.ledger.close()
        rig.registry = Registry(audit=AuditLog(MemoryAuditStore()))
        rig.registry.register(rig.spec)
        rig.ledger = backend.ledger()
        rig.writes = WritePath(rig.registry, rig.ledger, clock=Clock())
    return rig


def _stored(ledger: Any, step: Preview) -> Preview:
    stored = ledger.preview(step.id)
    assert stored is not None
    return stored


def _execute_events(registry: Registry, step: Preview) -> list[tuple[str, str | None]]:
    return [
        (e.outcome, e.code)
        for e in registry.audit.events()
        if e.call_id == step.id and e.stage == "execute"
    ]


# (case, how the commit's wait for a thread ends, the tool's timeout)
COMMITS: list[tuple[str, Ending, float]] = [
    ("refused_late", "bound", 5.0),
    ("timed_out_waiting", "timeout", 0.2),
    ("cancelled_waiting", "cancel", 5.0),
]


@pytest.mark.parametrize(("case", "ending", "timeout"), COMMITS, ids=[c[0] for c in COMMITS])
async def test_an_approved_commit_that_never_started_stays_approved(
    tmp_path: Path, backend: Backend, case: str, ending: Ending, timeout: float
) -> None:
    rig = _rig(tmp_path, backend, timeout=timeout)
    try:
        step = await rig.approved(1)

        def claimed() -> None:
            assert rig.state(step) == ("sending", 1)

        raised = await _waiting_for_a_thread(
            lambda: rig.writes.commit(step.id, step.fingerprint, ALICE),
            ending,
            tool=rig.spec.name,
            timeout=timeout,
            waiting=claimed,
        )

        assert rig.started == []  # its code never ran
        assert rig.system.sends(step.key) == 0
        assert rig.state(step) == ("approved", 0)
        approval = rig.ledger.approval(step.id)
        assert approval is not None
        assert approval.consumed_at is None  # usable again
        last = rig.ledger.history(step.id)[-1]
        assert (last.from_state, last.to_state) == ("sending", "approved")
        assert last.how.startswith("not sent"), last.how
        assert _execute_events(rig.registry, step)[-1] == ("error", "upstream")
        if ending == "cancel":
            assert isinstance(raised, anyio.get_cancelled_exc_class())  # still a cancellation
        else:
            assert isinstance(raised, UpstreamError), raised
            wire = raised.to_wire()
            assert (wire["retryable"], wire["outcome"]) == (True, "error")
            assert "not sent" in raised.message
            assert "still approved" in raised.message

        receipt = await rig.writes.commit(step.id, step.fingerprint, ALICE)  # later, as told

        assert (receipt.key, receipt.resolved_by) == (step.key, "send")
        assert rig.system.effects(step.key) == 1
        assert rig.system.sends(step.key) == 1
    finally:
        rig.close()


async def test_a_first_send_refused_after_a_commit_that_never_started_fails_the_step(
    tmp_path: Path, backend: Backend
) -> None:
    # The commit that was not sent counted no send: the next one is the first, so a refusal
    # of it proves nothing happened, and the step ends failed (not unknown for good).
    rig = _rig(tmp_path, backend, timeout=5.0)
    try:
        step = await rig.approved(1)
        await _waiting_for_a_thread(
            lambda: rig.writes.commit(step.id, step.fingerprint, ALICE), "bound", tool=TOOL
        )
        assert rig.state(step) == ("approved", 0)
        # The same tool in another process, whose system now refuses the refund.
        assert rig.spec.write is not None
        refusing = dataclasses.replace(rig.spec.write, commit=_refused)
        registry = Registry(audit=AuditLog(MemoryAuditStore()))
        registry.register(dataclasses.replace(rig.spec, write=refusing))
        writes = WritePath(registry, rig.ledger, clock=Clock())

        with pytest.raises(UpstreamError) as refused:
            await writes.commit(step.id, step.fingerprint, ALICE)

        assert refused.value.outcome == "error"
        assert rig.state(step) == ("failed", 1)
    finally:
        rig.close()


def _refused(effect: Any, key: str) -> Any:
    raise UpstreamError("the invoice is closed: no refund", outcome="error")


async def test_a_resend_that_never_started_leaves_the_step_unknown_as_it_was(
    tmp_path: Path, backend: Backend
) -> None:
    rig = _rig(tmp_path, backend, timeout=5.0)
    try:
        step = await rig.approved(1)
        rig.system.inject("fail_before")  # no answer, nothing done: unknown, one attempt
        with pytest.raises(AmbiguousWriteError):
            await rig.writes.commit(step.id, step.fingerprint, ALICE)
        assert rig.state(step) == ("unknown", 1)

        raised = await _waiting_for_a_thread(
            lambda: rig.writes.commit(step.id, step.fingerprint, ALICE), "bound", tool=TOOL
        )

        assert isinstance(raised, UpstreamError), raised
        wire = raised.to_wire()
        assert (wire["retryable"], wire["outcome"]) == (True, "unknown")
        assert "not sent" in raised.message
        assert "earlier send may have acted" in raised.message
        assert rig.state(step) == ("unknown", 1)
        assert _execute_events(rig.registry, step)[-1] == ("error", "upstream")
        approval = rig.ledger.approval(step.id)
        assert approval is not None
        assert approval.consumed_at is not None  # the first send used it

        receipt = await rig.writes.commit(step.id, step.fingerprint, ALICE)

        assert receipt.resolved_by == "resend"
        assert rig.system.effects(step.key) == 1
    finally:
        rig.close()


# (case, whether the lookup is async: a step it does not find is resent with the sync commit)
RECONCILED = [("lookup_not_sent", False), ("resend_not_sent", True)]


@pytest.mark.parametrize(("case", "async_lookup"), RECONCILED, ids=[c[0] for c in RECONCILED])
async def test_reconcile_gives_back_a_claim_it_never_sent(
    tmp_path: Path, case: str, async_lookup: bool
) -> None:
    rig = HangingRig(tmp_path, async_lookup=async_lookup, timeout=5.0)
    try:
        step = await rig.approved(1)
        rig.system.inject("fail_before")
        with pytest.raises(AmbiguousWriteError):
            await rig.writes.commit(step.id, step.fingerprint, ALICE)
        results: list[Any] = []

        async def reconcile() -> None:
            results.extend(await rig.writes.reconcile())

        raised = await _waiting_for_a_thread(reconcile, "bound", tool=TOOL)

        assert raised is None
        assert [(r.outcome, r.after) for r in results] == [("unresolved", "unknown")]
        assert "not sent" in results[0].how, results[0].how
        assert rig.state(step) == ("unknown", 1)  # the attempt taken back
        assert rig.system.sends(step.key) == 1  # the first one only
        results = await rig.writes.reconcile()
        assert [r.outcome for r in results] == ["committed"]
        assert rig.system.effects(step.key) == 1
    finally:
        rig.close()


# -- an approved read -------------------------------------------------------------------------

URL = "https://evil.example/page"  # (a rule asks a person about this host)
READ = "web_page_fetch"


async def approved_read(world: World) -> Preview:
    """A read of :data:`URL` (with a secret) a person approved."""
    asked = await world.writes.call(READ, {"url": URL, "token": "tok_1"}, ctx())
    assert isinstance(asked, Preview)
    world.writes.approve(asked.id, approver="carol", fingerprint=asked.fingerprint)
    return asked


def _assert_still_approved_and_unrun(world: World, asked: Preview) -> None:
    assert world.fetched.urls == []
    stored = _stored(world.ledger, asked)
    assert (stored.state, stored.attempts) == ("approved", 0)
    approval = world.ledger.approval(asked.id)
    assert approval is not None
    assert approval.consumed_at is None


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.ledger.close()


@pytest.mark.parametrize("ending", ["bound", "timeout", "cancel"])
async def test_an_approved_read_that_never_started_stays_approved(
    world: World, ending: Ending
) -> None:
    asked = await approved_read(world)
    # (the read's deadline: its run's, 0.2 s away, when it times out)
    short = dataclasses.replace(ctx(), deadline=time.monotonic() + 0.2)
    run_ctx = short if ending == "timeout" else ctx()

    raised = await _waiting_for_a_thread(
        lambda: world.writes.run_read(asked.id, asked.fingerprint, run_ctx),
        ending,
        tool=READ,
        timeout=0.2,
    )

    _assert_still_approved_and_unrun(world, asked)
    if ending == "cancel":
        assert isinstance(raised, anyio.get_cancelled_exc_class())
    else:
        assert isinstance(raised, ToolError), raised
        wire = raised.to_wire()
        assert (wire["code"], wire["retryable"], wire["outcome"]) == ("upstream", True, "error")

    receipt = await world.writes.run_read(asked.id, asked.fingerprint, ctx())  # as told

    assert receipt.data["url"] == URL
    assert (world.fetched.urls, world.fetched.tokens) == ([URL], ["tok_1"])  # its secret kept


# -- the ledger operation, on both stores ---------------------------------------------------


@pytest.fixture
def store(backend: Backend) -> Iterator[Any]:
    s = backend.ledger()
    yield s
    s.close()


def _claimed(store: Any, *, resent: bool = False) -> Preview:
    """A step claimed by ``h:1`` at 5.0, from ``approved`` (consuming its approval, at 5.0),
    or (``resent``) from ``unknown`` after a first send claimed at 3.0."""
    step = store.add_preview(make_preview())
    step = store.transition(
        step.id,
        expect={"prepared"},
        to="approved",
        at=2,
        actor="t",
        how="t",
        approval=make_approval(step),
    )
    if resent:
        step = store.transition(
            step.id,
            expect={"approved"},
            to="sending",
            at=3.0,
            actor="t",
            how="t",
            consume_approval=True,
            owner="h:0",
        )
        step = store.transition(step.id, expect={"sending"}, to="unknown", at=4, actor="t", how="t")
    return store.transition(  # type: ignore[no-any-return]
        step.id,
        expect={step.state},
        to="sending",
        at=5.0,
        actor="t",
        how="claimed",
        consume_approval=not resent,
        owner="h:1",
        lease_until=40.0,
    )


def _release(store: Any, step: Preview, **kw: Any) -> Preview:
    given: dict[str, Any] = {
        "to": "approved",
        "expect_attempts": 1,
        "expect_owner": "h:1",
        "at": 6.0,
        "actor": "h:1",
        "how": "not sent: no worker thread",
    }
    return store.release_claim(step.id, **(given | kw))  # type: ignore[no-any-return]


def test_a_released_claim_makes_its_approval_usable_exactly_once(store: Any) -> None:
    step = _claimed(store)

    back = _release(store, step)

    assert back == store.preview(step.id)
    assert (back.state, back.attempts, back.owner, back.lease_until) == ("approved", 0, None, None)
    assert back.updated == 6.0
    assert store.approval(step.id).consumed_at is None
    last = store.history(step.id)[-1]
    assert (last.from_state, last.to_state, last.at) == ("sending", "approved", 6.0)
    assert (last.actor, last.how) == ("h:1", "not sent: no worker thread")
    again = store.transition(
        step.id,
        expect={"approved"},
        expect_attempts=0,
        to="sending",
        at=7.0,
        actor="t",
        how="t",
        consume_approval=True,
        owner="h:2",
    )
    assert again.attempts == 1
    assert store.approval(step.id).consumed_at == 7.0
    store.transition(step.id, expect={"sending"}, to="unknown", at=8, actor="t", how="t")
    with pytest.raises(StepStateError):  # consumed again: not a second time
        store.transition(
            step.id,
            expect={"unknown"},
            to="sending",
            at=9,
            actor="t",
            how="t",
            consume_approval=True,
        )


def test_a_released_resend_goes_back_to_unknown_with_its_attempts(store: Any) -> None:
    step = _claimed(store, resent=True)
    assert step.attempts == 2

    back = _release(store, step, to="unknown", expect_attempts=2, error="resend not sent")

    assert back == store.preview(step.id)
    assert (back.state, back.attempts, back.lease_until, back.error) == (
        "unknown",
        1,
        None,
        "resend not sent",
    )
    assert store.approval(step.id).consumed_at == 3.0  # the first send's, still used


# (case, how the step stands, what the release expects)
REFUSED: list[tuple[str, str, dict[str, Any]]] = [
    ("not_sending", "settled", {}),
    ("other_attempts", "claimed", {"expect_attempts": 2}),
    ("other_owner", "claimed", {"expect_owner": "h:9"}),
    ("approved_after_a_send", "resent", {"expect_attempts": 2}),  # it was sent before
    ("approval_used_by_another_claim", "approval_moved", {}),
]


@pytest.mark.parametrize(("case", "stands", "expects"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_release_of_another_claim_is_refused_and_changes_nothing(
    backend: Backend, store: Any, case: str, stands: str, expects: dict[str, Any]
) -> None:
    step = _claimed(store, resent=stands == "resent")
    if stands == "settled":
        step = store.transition(
            step.id, expect={"sending"}, to="unknown", at=5.5, actor="t", how="t"
        )
    if stands == "approval_moved":  # (not this claim's: consumed at another time)
        backend.sql("UPDATE approvals SET consumed_at = 4.5", store="ledger")
    approval = store.approval(step.id)
    history = store.history(step.id)

    with pytest.raises(StepStateError):
        _release(store, step, **expects)

    assert store.preview(step.id) == step
    assert store.approval(step.id) == approval
    assert store.history(step.id) == history


# the run's time left as the read is asked for, how long its claim takes -> the code, what the
# message says: none left (refused before the claim), or none once the claim is written (a
# busy disk, a locked database: the claim is given back)
SPENT_RUNS = [
    (-1.0, 0.0, "timeout", "still approved"),
    (0.02, 0.05, "upstream", "its run's time was used up"),
]


@pytest.mark.parametrize(("left_s", "claim_s", "code", "says"), SPENT_RUNS)
async def test_an_approved_read_of_a_run_out_of_time_stays_approved(
    world: World, left_s: float, claim_s: float, code: str, says: str
) -> None:
    asked = await approved_read(world)
    sender = world.writes._sender
    claim = sender.claim

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        time.sleep(claim_s)
        return claim(*args, **kwargs)

    sender.claim = slow_claim  # type: ignore[method-assign]
    short = dataclasses.replace(ctx(), deadline=time.monotonic() + left_s)

    with pytest.raises(ToolError) as raised:
        await world.writes.run_read(asked.id, asked.fingerprint, short)

    wire = raised.value.to_wire()
    assert (wire["code"], wire["retryable"], wire["outcome"]) == (code, True, "error")
    assert says in wire["message"]
    _assert_still_approved_and_unrun(world, asked)
    sender.claim = claim  # type: ignore[method-assign]
    receipt = await world.writes.run_read(asked.id, asked.fingerprint, ctx())  # as told
    assert receipt.data["url"] == URL


async def test_an_approved_read_left_sending_here_is_not_run_again(world: World) -> None:
    """An interrupted approved read that this process left ``sending``, its lease long past,
    is reconcile's to end (``failed``: a read changed nothing): a commit never runs it a
    second time under its approval."""
    asked = await approved_read(world)
    world.ledger.transition(
        asked.id,
        expect={"approved"},
        to="sending",
        at=time.time() - 2000,
        actor=owner_token(),
        how="claimed by commit",
        owner=owner_token(),
        lease_until=time.time() - 1000,
    )
    with pytest.raises(CommitInFlightError):
        await world.writes.run_read(asked.id, asked.fingerprint, ctx())
    assert world.fetched.urls == []
    assert _stored(world.ledger, asked).state == "sending"
