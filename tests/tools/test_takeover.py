"""A send that outlives its lease: reconcile leaves a sender it can see running alone (the
lease is wall-clock time, and a clock may jump), and a sender whose step was taken over all the
same keeps the receipt it checked instead of throwing it away."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.tools import ConflictError, Preview, Receipt, SQLiteLedgerStore
from airlock.tools._process import ProcessMark
from airlock.tools._reconcile import Resolution, needs_resolving
from airlock.tools._step_owner import owner_token

from .test_write_world import ALICE, Clock, World

SPAWN = multiprocessing.get_context("spawn")
JUMP = 100.0  # the reconciling process's clock is this far ahead of the sender's


@pytest.fixture(scope="module")
def live_process() -> Iterator[str]:
    """The owner token of another process on this host that runs throughout."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        yield ProcessMark.of(child.pid).token()
    finally:
        child.kill()
        child.wait()


def _exited() -> str:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        return ProcessMark.of(child.pid).token()
    finally:
        child.kill()
        child.wait()


def _reused() -> str:
    """This process's pid, started at another time: a dead owner whose pid runs again."""
    mark = ProcessMark.of()
    boot, namespace, ticks = (mark.start or "b:n:0").split(":")
    return dataclasses.replace(
        mark, created=(mark.created or 0) - 3600, start=f"{boot}:{namespace}:{int(ticks) + 1}"
    ).token()


LATER = 3600.0  # a reconcile this long after the claim: a live sender that long is stuck


def _other_kernel() -> str:
    """A sender of a cloned machine that bears this hostname: another boot id, started since
    this machine booted."""
    mark = ProcessMark.of()
    _, namespace, ticks = (mark.start or "b:n:0").split(":")
    return dataclasses.replace(mark, start=f"another-boot:{namespace}:{ticks}", pid=4242).token()


def _earlier_boot() -> str:
    """A sender of another kernel that started before this machine booted: this machine
    before a reboot, or a machine of this hostname whose serve has run longer than this one
    has been up. Nothing here tells them apart."""
    mark = ProcessMark.of()
    _, namespace, ticks = (mark.start or "b:n:0").split(":")
    return dataclasses.replace(
        mark, created=1.0, start=f"another-boot:{namespace}:{ticks}", pid=4242
    ).token()


def _no_start_elsewhere() -> str:
    """A sender of this hostname that could not mark its start (its /proc hidden, or another
    PID namespace), whose pid no process here has: only the wall clock to go on."""
    mark = ProcessMark.parse(_exited())
    assert mark is not None
    return dataclasses.replace(mark, start=None).token()


# owner -> (needs resolving while its lease runs, once its lease ran out, long after)
OWNERS: dict[str, tuple[Callable[[str], str | None], bool, bool, bool]] = {
    "a live process on this host": (lambda live: live, False, False, True),
    "this process, no send running": (lambda _: owner_token(), False, True, True),
    "an exited process": (lambda _: _exited(), True, True, True),
    "a reused pid": (lambda _: _reused(), True, True, True),
    "a process on another host": (
        lambda _: f"elsewhere.example@1.000@:{os.getpid()}",
        False,
        True,
        True,
    ),
    "a process of this hostname on another machine": (lambda _: _other_kernel(), False, True, True),
    "a process of another kernel, started before this boot": (
        lambda _: _earlier_boot(),
        False,
        True,
        True,
    ),
    "a process of this hostname with no start, its pid not here": (
        lambda _: _no_start_elsewhere(),
        False,
        True,
        True,
    ),
    "a bare pid, no start": (lambda _: f"{socket.gethostname()}:{os.getpid()}", False, True, True),
    "no owner": (lambda _: None, False, True, True),
}


@pytest.mark.anyio
@pytest.mark.parametrize("owner", list(OWNERS), ids=list(OWNERS))
async def test_a_sending_step_is_resolved_only_once_its_sender_is_gone(
    tmp_path: Path, owner: str, live_process: str
) -> None:
    world = World(tmp_path)
    try:
        preview = await world.prepare("inv_35")
    finally:
        world.close()
    make, while_leased, after_lease, long_after = OWNERS[owner]
    now = world.clock()
    sending = dataclasses.replace(
        preview, state="sending", owner=make(live_process), updated=now, lease_until=now + 35
    )
    assert needs_resolving(sending, now) is while_leased
    assert needs_resolving(sending, now + JUMP) is after_lease
    assert needs_resolving(sending, now + LATER) is long_after


# lease length (s) -> (a reconcile this long after the claim, whether it takes a live sender)
LIVE_SENDER_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "a short lease, a clock 100 s ahead": (35, 35 + JUMP, False),
    "a short lease, just within five minutes past it": (35, 35 + 299, False),
    "a short lease, five minutes past it": (35, 35 + 301, True),
    "a two-hour lease, an hour past it": (7200, 7200 + 3600, False),
    "a two-hour lease, as long again past it": (7200, 7200 * 2 + 1, True),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(LIVE_SENDER_BOUNDS), ids=list(LIVE_SENDER_BOUNDS))
async def test_a_live_sender_is_left_alone_past_its_lease_only_for_a_while(
    tmp_path: Path, case: str, live_process: str
) -> None:
    world = World(tmp_path)
    try:
        preview = await world.prepare("inv_39")
    finally:
        world.close()
    lease, after, taken = LIVE_SENDER_BOUNDS[case]
    now = world.clock()
    sending = dataclasses.replace(
        preview, state="sending", owner=live_process, updated=now, lease_until=now + lease
    )
    assert needs_resolving(sending, now + after) is taken


@pytest.mark.anyio
@pytest.mark.parametrize("with_lookup", [True, False], ids=["query", "resend"])
async def test_a_reconcile_whose_clock_jumped_leaves_a_send_of_this_process_alone(
    tmp_path: Path, with_lookup: bool
) -> None:
    world = World(tmp_path, with_lookup=with_lookup)
    ahead = World(tmp_path, with_lookup=with_lookup, clock=Clock(world.clock() + JUMP))
    preview = await world.prepare("inv_36")
    seen: list[Resolution] = []
    world.system.after_commit = lambda _key: seen.extend(anyio.run(ahead.writes.reconcile))
    try:
        receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)
        [resolution] = seen
        assert (resolution.outcome, resolution.after) == ("in_flight", "sending")
        assert not receipt.replayed
        assert world.ledger.preview(preview.id).state == "committed"  # type: ignore[union-attr]
        assert world.system.effects() == 1
        assert world.system.sends() == 1
        assert [e.how for e in world.ledger.history(preview.id)][-2:] == [
            "claimed by commit",
            "sent",
        ]
    finally:
        ahead.close()
        world.close()


def commit_slowly(root: str, preview_id: str, fingerprint: str, sent: Any, go: Any) -> None:
    """Commit; between the system's commit and its reply, wait for ``go``."""
    world = World(Path(root))

    def wait(_key: str) -> None:
        sent.set()
        go.wait(60)

    world.system.after_commit = wait
    try:
        anyio.run(world.writes.commit, preview_id, fingerprint, ALICE)
    finally:
        world.close()


def test_a_reconcile_whose_clock_jumped_leaves_a_live_sender_on_this_host_alone(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, with_lookup=False)
    preview = anyio.run(world.prepare, "inv_37")
    sent, go = SPAWN.Event(), SPAWN.Event()
    child = SPAWN.Process(
        target=commit_slowly, args=(str(tmp_path), preview.id, preview.fingerprint, sent, go)
    )
    child.start()
    ahead = World(tmp_path, with_lookup=False, clock=Clock(time.time() + JUMP))
    try:
        assert sent.wait(timeout=60), "the child never reached the system of record"
        [resolution] = anyio.run(ahead.writes.reconcile)
        assert (resolution.outcome, resolution.after) == ("in_flight", "sending")
        go.set()
        child.join(timeout=60)
        assert child.exitcode == 0
        assert world.ledger.preview(preview.id).state == "committed"  # type: ignore[union-attr]
        assert world.ledger.receipt(preview.key) is not None
        assert (world.system.effects(), world.system.sends()) == (1, 1)
    finally:
        go.set()
        child.join(timeout=30)
        ahead.close()
        world.close()


# What a reconcile that took the step over had left when the sender's receipt came in:
# (what it did to the ledger, the commit's outcome, the step's state afterwards).
def _took_over(ledger: SQLiteLedgerStore, preview: Preview) -> Preview:
    return ledger.transition(
        preview.id,
        expect={"sending"},
        expect_attempts=preview.attempts,
        to="sending",
        at=preview.updated,
        actor="reconciler",
        how="claimed by reconcile",
        owner="elsewhere.example@1.000@:7",
        lease_until=preview.updated + 35,
    )


def _unknown(why: str) -> Callable[[SQLiteLedgerStore, Preview], Any]:
    def leave(ledger: SQLiteLedgerStore, preview: Preview) -> None:
        taken = _took_over(ledger, preview)
        ledger.transition(
            preview.id,
            expect={"sending"},
            expect_attempts=taken.attempts,
            to="unknown",
            at=preview.updated,
            actor="reconciler",
            how="no definite answer",
            error=why,
        )

    return leave


def _committed(ledger: SQLiteLedgerStore, preview: Preview) -> None:
    taken = _took_over(ledger, preview)
    found = {"id": "re_1", "status": "succeeded", **preview.effect}
    receipt = Receipt(
        key=preview.key,
        preview_id=preview.id,
        tool=preview.tool,
        data=found,
        stored_at=preview.updated,
        resolved_by="query",
    )
    ledger.transition(
        preview.id,
        expect={"sending"},
        expect_attempts=taken.attempts,
        to="committed",
        at=preview.updated,
        actor="reconciler",
        how="queried",
        receipt=receipt,
    )


TAKEOVERS: dict[str, tuple[Callable[[SQLiteLedgerStore, Preview], Any], str, str]] = {
    "its resend was refused: unknown": (_unknown("key in flight"), "stored", "committed"),
    "it is still sending": (_took_over, "stored", "committed"),
    "it stored its receipt": (_committed, "replayed", "committed"),
    "it found another change's answer": (
        _unknown("receipt_mismatch: recipient differs"),
        "conflict",
        "unknown",
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("takeover", list(TAKEOVERS), ids=list(TAKEOVERS))
async def test_a_sender_taken_over_keeps_its_checked_receipt(tmp_path: Path, takeover: str) -> None:
    world = World(tmp_path)
    intruder = SQLiteLedgerStore(tmp_path / "ledger.db")
    preview = await world.prepare("inv_38")
    leave, outcome, state = TAKEOVERS[takeover]

    def take_over(_key: str) -> None:
        current = intruder.preview(preview.id)
        assert current is not None
        leave(intruder, current)

    world.system.after_commit = take_over
    try:
        if outcome == "conflict":
            with pytest.raises(ConflictError, match="taken over"):
                await world.writes.commit(preview.id, preview.fingerprint, ALICE)
        else:
            receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)
            assert receipt.replayed is (outcome == "replayed")
            assert world.ledger.receipt(preview.key) == dataclasses.replace(receipt, replayed=False)
        assert world.ledger.preview(preview.id).state == state  # type: ignore[union-attr]
        assert len(world.ledger.receipts()) == (state == "committed")
        assert world.system.effects() == 1
    finally:
        intruder.close()
        world.close()


# a reconcile this long after a live sender's claim -> (its outcome, the step afterwards)
STUCK: dict[str, tuple[float, str, str]] = {
    "a clock 100 s ahead": (JUMP, "in_flight", "sending"),
    "an hour later": (LATER, "committed", "committed"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(STUCK), ids=list(STUCK))
async def test_a_step_a_live_sender_left_sending_is_taken_over_in_the_end(
    tmp_path: Path, case: str, live_process: str
) -> None:
    """A long-lived sender (`airlock serve`) whose mark of ``unknown`` the ledger refused
    leaves the step ``sending`` while it runs on; a later reconcile settles it."""
    after, outcome, state = STUCK[case]
    world = World(tmp_path, with_lookup=False)
    later = World(tmp_path, with_lookup=False, clock=Clock(world.clock() + after))
    try:
        preview = await world.prepare("inv_34")
        now = world.clock()
        world.ledger.transition(
            preview.id,
            expect={preview.state},
            to="sending",
            at=now,
            actor=live_process,
            how="claimed by commit",
            owner=live_process,
            lease_until=now + 35,
        )
        [resolution] = await later.writes.reconcile()
        assert (resolution.outcome, resolution.after) == (outcome, state)
        assert world.ledger.preview(preview.id).state == state  # type: ignore[union-attr]
        assert world.system.sends() == (state == "committed")
    finally:
        later.close()
        world.close()


# the sender's claim -> (the outcomes of a reconcile while its lease runs, then of one once
# it ran out), and the sends to the system of record in the end
CLAIMS: dict[str, tuple[Callable[[str], str], list[str], list[str], int]] = {
    "a live sender of this boot": (lambda live: live, ["in_flight"], ["in_flight"], 0),
    "a sender of another boot, started before this boot": (
        lambda _: _earlier_boot(),
        ["in_flight"],
        ["committed"],
        1,
    ),
    "a killed sender of this boot": (lambda _: _exited(), ["committed"], [], 1),
}


@pytest.mark.anyio
@pytest.mark.parametrize("claim", list(CLAIMS), ids=list(CLAIMS))
async def test_a_sender_of_another_boot_is_taken_over_only_once_its_lease_ran_out(
    tmp_path: Path, claim: str, live_process: str
) -> None:
    """Another boot id with a start before this boot is this machine before a reboot, or a
    machine of this hostname that has been up longer (replicas sharing one ledger): the lease
    tells, as for any sender this host cannot see. A rebooted machine's lease ran out long
    since, so its steps are taken over all the same."""
    owner, while_leased, after_lease, sends = CLAIMS[claim]
    world = World(tmp_path, with_lookup=False)
    later = World(tmp_path, with_lookup=False, clock=Clock(world.clock() + JUMP))
    try:
        preview = await world.prepare("inv_33")
        now = world.clock()
        token = owner(live_process)
        world.ledger.transition(
            preview.id,
            expect={preview.state},
            to="sending",
            at=now,
            actor=token,
            how="claimed by commit",
            owner=token,
            lease_until=now + 35,
        )
        assert [r.outcome for r in await world.writes.reconcile()] == while_leased
        assert [r.outcome for r in await later.writes.reconcile()] == after_lease
        assert world.system.sends() == sends
    finally:
        later.close()
        world.close()
