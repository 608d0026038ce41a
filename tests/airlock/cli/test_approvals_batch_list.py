"""``airlock approvals list`` shows batches too (each with its items waiting of all and the
full fingerprint to approve it with), and ``approvals approve`` without ``--commit`` says who
commits what it approved: the session that asked, or ``--commit`` here once it has ended."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import approvals_app
from airlock.tools import Batch, approve_batch, deny_preview
from tests.airlock.cli.commit_policy import policy_file
from tests.tools.stores import run_sql
from tests.tools.test_proposals import ProposalWorld
from tests.tools.test_write_world import ASK, World

runner = CliRunner()
COMMIT_HERE = "if it has ended, `--commit --registry MODULE:OBJECT --policy FILE` commits"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ProposalWorld]:
    w = ProposalWorld(tmp_path)
    yield w
    w.close()


def _batch(world: ProposalWorld, *invoices: str) -> Batch:
    previews = anyio.run(lambda: world.propose(*invoices))
    return world.writes.store_batch(previews)


def _list(world: ProposalWorld, *args: str) -> str:
    done = runner.invoke(
        approvals_app, ["list", "--ledger", world.ledger.path, *args], env={"COLUMNS": "250"}
    )
    assert done.exit_code == 0, done.output
    return done.output


def _row(output: str, batch: Batch) -> str:
    return next((line for line in output.splitlines() if batch.id in line), "")


def _nothing(world: ProposalWorld, batch: Batch) -> None:
    pass


def _deny_one(world: ProposalWorld, batch: Batch) -> None:
    deny_preview(world.ledger, batch.items[1], approver="bob", reason="no", now=time.time())


def _approve_all(world: ProposalWorld, batch: Batch) -> None:
    approve_batch(
        world.ledger, batch.id, approver="bob", now=time.time(), fingerprint=batch.fingerprint
    )


def _expire_all(world: ProposalWorld, batch: Batch) -> None:
    run_sql(world.ledger.path, "UPDATE previews SET expires = 1")


# (case, what happened to the batch of three, its row's count: by default, with --all;
# "" where the batch is not listed)
ROWS: list[tuple[str, Callable[[ProposalWorld, Batch], None], str, str]] = [
    ("every item waiting", _nothing, "3 of 3", "3 of 3"),
    ("an item denied", _deny_one, "2 of 3", "2 of 3"),
    ("every item approved", _approve_all, "", "0 of 3"),
    ("every item expired", _expire_all, "", "0 of 3"),
]


@pytest.mark.parametrize(
    ("change", "waiting", "every"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_list_shows_the_batches_with_an_item_waiting_and_all_of_them_with_all(
    world: ProposalWorld,
    change: Callable[[ProposalWorld, Batch], None],
    waiting: str,
    every: str,
) -> None:
    batch = _batch(world, "inv_1", "inv_2", "inv_3")
    change(world, batch)
    for output, count in ((_list(world), waiting), (_list(world, "--all"), every)):
        row = _row(output, batch)
        if not count:
            assert row == "", output
            continue
        assert f" {count} " in row, output
        assert batch.fingerprint in row  # whole: what `approve --fingerprint` takes
        assert "alice@acme" in row


def test_nothing_waits_only_when_no_preview_and_no_batch_waits(world: ProposalWorld) -> None:
    assert "nothing waits for approval" in _list(world)
    batch = _batch(world, "inv_1")
    assert "nothing waits for approval" not in _list(world)
    _approve_all(world, batch)
    assert "nothing waits for approval" in _list(world)


def test_the_limit_bounds_the_batches_and_says_what_it_left_out(world: ProposalWorld) -> None:
    older = _batch(world, "inv_1")
    world.clock.advance(1)  # (the world's clock stands still: one created after the other)
    newer = _batch(world, "inv_2")
    output = _list(world, "--limit", "1")
    assert newer.id in output
    assert older.id not in output
    assert "1 more batch(es) with 1 item(s) waiting are not shown" in output
    every = _list(world, "--all", "--limit", "1")
    assert newer.id in every
    assert older.id not in every


def test_approving_a_batch_says_who_commits_it(world: ProposalWorld) -> None:
    batch = _batch(world, "inv_1", "inv_2")
    args = ["approve", batch.id, "--ledger", world.ledger.path]
    args += ["--fingerprint", batch.fingerprint, "--as", "bob"]
    done = runner.invoke(approvals_app, args, env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    assert "the session that asked commits them when it resumes or settles" in done.output
    assert COMMIT_HERE + " them here" in done.output


def test_a_preview_approved_without_commit_is_committed_by_approve_commit_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path)
    try:
        monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(tmp_path / "system.db"))
        waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
        base = ["approve", waiting.id, "--ledger", str(tmp_path / "ledger.db")]
        base += ["--fingerprint", waiting.fingerprint, "--as", "bob"]
        done = runner.invoke(approvals_app, base, env={"COLUMNS": "250"})
        assert done.exit_code == 0, done.output
        assert "the session that asked commits it when it resumes or settles" in done.output
        assert COMMIT_HERE + " it here" in done.output
        # The session has ended: what the hint says commits it here, once.
        tools = ["--registry", "tests.airlock.cli.test_approvals:registry"]
        tools += ["--policy", policy_file(tmp_path)]
        committed = runner.invoke(approvals_app, [*base, "--commit", *tools])
        assert committed.exit_code == 0, committed.output
        assert f"already approved {waiting.id}" in committed.output
        assert "committed; receipt:" in committed.output
        assert world.system.effects() == 1
        again = runner.invoke(approvals_app, [*base, "--commit", *tools])
        assert again.exit_code == 0, again.output  # committed: its receipt again, nothing sent
        assert "already committed; receipt:" in again.output
        assert world.system.effects() == 1
    finally:
        world.close()


def test_the_requester_cannot_commit_their_own_approved_preview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path)
    try:
        monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(tmp_path / "system.db"))
        waiting = anyio.run(lambda: world.prepare("inv_3", approvals=ASK))
        led = ["--ledger", str(tmp_path / "ledger.db"), "--fingerprint", waiting.fingerprint]
        approved = runner.invoke(approvals_app, ["approve", waiting.id, *led, "--as", "bob"])
        assert approved.exit_code == 0, approved.output
        tools = ["--registry", "tests.airlock.cli.test_approvals:registry"]
        tools += ["--policy", policy_file(tmp_path)]
        mine = runner.invoke(
            approvals_app, ["approve", waiting.id, *led, "--as", "alice", "--commit", *tools]
        )
        assert mine.exit_code == 1
        assert world.system.effects() == 0
    finally:
        world.close()
