"""The write path across real processes: a commit killed mid-send, and 64 commits at once."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import Counter
from pathlib import Path

import anyio
import pytest

from tests.tools.stores import Backend

from .test_write_world import ALICE, World, commit_many, crash_after_send

SPAWN = multiprocessing.get_context("spawn")


@pytest.mark.parametrize("with_lookup", [True, False], ids=["query", "resend"])
def test_killed_between_send_and_receipt_then_reconcile_gives_one_effect_one_receipt(
    tmp_path: Path, with_lookup: bool, backend: Backend
) -> None:
    world = World(tmp_path, with_lookup=with_lookup, database=backend.url)
    preview = anyio.run(world.prepare, "inv_20")
    world.close()
    sent = SPAWN.Event()
    child = SPAWN.Process(
        target=crash_after_send,
        args=(str(tmp_path), preview.id, preview.fingerprint, sent, backend.url),
    )
    child.start()
    try:
        assert sent.wait(timeout=60), "the child never reached the system of record"
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    finally:
        child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL

    restarted = World(tmp_path, with_lookup=with_lookup, database=backend.url)
    stuck = restarted.ledger.preview(preview.id)
    assert stuck is not None
    assert stuck.state == "sending"
    assert stuck.owner is not None
    assert stuck.owner.endswith(f":{child.pid}")
    assert restarted.system.effects() == 1
    assert restarted.ledger.receipts() == []

    [resolution] = anyio.run(restarted.writes.reconcile)

    assert resolution.outcome == "committed"
    assert resolution.before == "sending"
    assert resolution.after == "committed"
    assert resolution.how.startswith("queried" if with_lookup else "resent")
    assert restarted.system.effects() == 1
    assert restarted.system.sends() == (1 if with_lookup else 2)
    assert len(restarted.ledger.receipts()) == 1
    assert restarted.ledger.history(preview.id)[-1].how == (
        "queried" if with_lookup else "resent with the same key"
    )
    receipt = anyio.run(restarted.writes.commit, preview.id, preview.fingerprint, ALICE)
    assert receipt.replayed
    restarted.close()


def test_64_concurrent_commits_from_8_processes_send_once(tmp_path: Path, backend: Backend) -> None:
    processes, tasks = 8, 8
    world = World(tmp_path, database=backend.url)
    preview = anyio.run(world.prepare, "inv_21")
    world.close()
    barrier = SPAWN.Barrier(processes)
    out = SPAWN.Queue()
    children = [
        SPAWN.Process(
            target=commit_many,
            args=(str(tmp_path), preview.id, preview.fingerprint, tasks, barrier, out, backend.url),
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    results = [item for _ in children for item in out.get(timeout=120)]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0

    after = World(tmp_path, database=backend.url)
    assert len(results) == processes * tasks
    kinds = Counter(kind for kind, _, _ in results)
    assert set(kinds) <= {"receipt", "conflict"}
    first = [r for r in results if r[0] == "receipt" and not r[2]]
    assert len(first) == 1, results  # exactly one commit sent; the rest conflict or replay
    assert {rid for kind, rid, _ in results if kind == "receipt"} == {first[0][1]}
    assert after.system.sends() == 1
    assert after.system.effects() == 1
    assert len(after.ledger.receipts()) == 1
    after.close()
