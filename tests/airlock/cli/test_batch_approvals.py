"""``airlock approvals show|approve pb_...``: a batch of proposals, approved with its one
fingerprint from the command line, against a real ledger file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import approvals_app
from airlock.tools import Batch, Registry
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.tools.test_proposals import ProposalWorld
from tests.tools.test_write_world import INVOICES

runner = CliRunner()


def proposal_registry() -> Registry:
    """The tools ``approve --commit --registry`` loads in the test below."""
    system = SystemOfRecord(os.environ["AIRLOCK_TEST_SYSTEM"])
    tools = Registry()
    tools.register(refund_tool(system, INVOICES, proposable=True))
    return tools


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ProposalWorld]:
    w = ProposalWorld(tmp_path)
    yield w
    w.close()


@pytest.fixture
def batch(world: ProposalWorld) -> Batch:
    previews = anyio.run(lambda: world.propose("inv_1", "inv_2", "inv_3"))
    return world.writes.store_batch(previews)


def _approve(world: ProposalWorld, batch_id: str, *args: str) -> list[str]:
    return ["approve", batch_id, "--ledger", world.ledger.path, *args]


def test_show_lists_the_batch_its_fingerprint_and_every_item(
    world: ProposalWorld, batch: Batch
) -> None:
    done = runner.invoke(approvals_app, ["show", batch.id, "--ledger", world.ledger.path])
    assert done.exit_code == 0, done.output
    assert batch.fingerprint in done.output
    assert "3, total spend 3006 USD" in done.output  # 1001 + 1002 + 1003, from the records
    for item in batch.items:
        assert item in done.output


def test_one_approval_with_the_batch_fingerprint_approves_every_item(
    world: ProposalWorld, batch: Batch
) -> None:
    done = runner.invoke(
        approvals_app, _approve(world, batch.id, "--fingerprint", batch.fingerprint, "--as", "bob")
    )
    assert done.exit_code == 0, done.output
    assert "3 of 3 item(s) approved now" in done.output
    assert {world.ledger.preview(i).state for i in batch.items} == {"approved"}  # type: ignore[union-attr]
    assert world.system.sends() == 0  # approving sends nothing; the session commits


REFUSED: list[tuple[str, list[str], str]] = [
    ("another fingerprint", ["--fingerprint", "0" * 64, "--as", "bob"], "approval_mismatch"),
    ("no fingerprint", ["--as", "bob"], "invalid_input"),
    ("the requester approving their own batch", ["--as", "alice"], "denied"),
    ("the requester as USER@TENANT", ["--as", "alice@acme"], "denied"),
    ("an empty approver", ["--as", ""], "invalid_input"),
]


@pytest.mark.parametrize(("name", "args", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_refused_batch_approval_approves_nothing(
    world: ProposalWorld, batch: Batch, name: str, args: list[str], code: str
) -> None:
    if "--fingerprint" not in args and name != "no fingerprint":
        args = [*args, "--fingerprint", batch.fingerprint]
    done = runner.invoke(approvals_app, _approve(world, batch.id, *args))
    assert done.exit_code != 0
    assert code in done.output
    assert {world.ledger.preview(i).state for i in batch.items} == {"prepared"}  # type: ignore[union-attr]


def test_an_unknown_batch_is_not_found(world: ProposalWorld, batch: Batch) -> None:
    done = runner.invoke(
        approvals_app, _approve(world, "pb_" + "0" * 24, "--fingerprint", batch.fingerprint)
    )
    assert done.exit_code == 1
    assert "not_found" in done.output


def test_approve_with_commit_commits_each_item_once(
    world: ProposalWorld, batch: Batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(Path(world.ledger.path).with_name("system.db")))
    args = ["--fingerprint", batch.fingerprint, "--as", "bob", "--commit"]
    tools = ["--registry", "tests.airlock.cli.test_batch_approvals:proposal_registry"]
    done = runner.invoke(approvals_app, _approve(world, batch.id, *args, *tools))
    again = runner.invoke(approvals_app, _approve(world, batch.id, *args, *tools))
    assert done.exit_code == 0, done.output
    assert again.exit_code == 0, again.output
    assert {world.ledger.preview(i).state for i in batch.items} == {"committed"}  # type: ignore[union-attr]
    assert world.system.effects() == 3  # approved and committed twice over: sent once each
    assert "0 of 3 item(s) approved now" in again.output
