"""Durable before the call returns: a harness process killed (SIGKILL) at random points
after calls returned loses none of their audit events, and its chain stays intact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airlock.harness import EXECUTE_CODE
from airlock.tools import SQLiteAuditStore

REPO = Path(__file__).resolve().parents[3]
SEED = int(os.environ.get("AIRLOCK_CRASH_SEED", "16"))


def kill_after(home: Path, returned: int, pause_s: float) -> list[str]:
    """Start the child, let ``returned`` calls return, wait ``pause_s``, SIGKILL it; every
    line it reported (all calls that returned before the kill)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.airlock.harness.audit_child"],
        cwd=REPO,
        env={**os.environ, "AIRLOCK_HOME": str(home)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        lines = [child.stdout.readline().strip() for _ in range(returned)]
        time.sleep(pause_s)
        child.send_signal(signal.SIGKILL)
        lines += [line.strip() for line in child.stdout]  # what it reported before dying
    finally:
        child.kill()
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    return [line for line in lines if line]


@pytest.mark.parametrize("round_", range(5))
def test_every_returned_call_is_in_the_store_after_a_kill(tmp_path: Path, round_: int) -> None:
    rng = random.Random(SEED * 100 + round_)
    returned = rng.randrange(1, 400)
    reported = kill_after(tmp_path, returned, rng.uniform(0, 0.005))
    assert len(reported) >= returned

    store = SQLiteAuditStore(tmp_path / "audit.db", readonly=True)
    try:
        events = store.query()
        read = {
            e.effects[0].removeprefix("read(billing:invoice/")[:-1] for e in events if e.effects
        }
        programs = {e.args_hash for e in events if e.tool == EXECUTE_CODE}
        for line in reported:
            kind, value = line.split(" ", 1)
            if kind == "call":
                assert value in read, f"call {value} returned but its event is not stored"
            else:
                assert value in programs, f"program {value} returned but its record is not stored"
                assert store.program(value) is not None, f"program {value}'s text is not stored"
        report = store.verify()
        assert report.ok, report  # a kill mid-transaction leaves the chain whole
    finally:
        store.close()
