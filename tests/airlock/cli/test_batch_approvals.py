"""``airlock approvals show|approve pb_...``: a batch of proposals, approved with its one
fingerprint from the command line, against a real ledger file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import approvals_app
from airlock.tools import Batch, Registry, approve_batch, deny_preview
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.airlock.cli.commit_policy import policy_file
from tests.tools.stores import run_sql
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
    # 1001 + 1002 + 1003, from the records, all still waiting
    assert "3, 3 waiting; spend waiting for approval: 3006 USD (minor units)" in done.output
    for item in batch.items:
        assert item in done.output


def test_show_prints_the_full_effect_of_every_item(world: ProposalWorld, batch: Batch) -> None:
    done = runner.invoke(approvals_app, ["show", batch.id, "--ledger", world.ledger.path])
    assert done.exit_code == 0, done.output
    for item in batch.items:
        preview = world.ledger.preview(item)
        assert preview is not None
        assert f"{item}  billing_refund_create  [waiting]" in done.output
        for name, value in preview.effect.items():  # "reason" is in no summary
            assert f'"{name}": {json.dumps(value)}' in done.output


def _deny_second(world: ProposalWorld, batch: Batch) -> None:
    deny_preview(world.ledger, batch.items[1], approver="bob", reason="no", now=time.time())


def _expire_first(world: ProposalWorld, batch: Batch) -> None:
    run_sql(world.ledger.path, "UPDATE previews SET expires = 1 WHERE id = ?", (batch.items[0],))


def _approve_all(world: ProposalWorld, batch: Batch) -> None:
    approve_batch(
        world.ledger, batch.id, approver="bob", now=time.time(), fingerprint=batch.fingerprint
    )


# (case, what happened to the batch, the items line `show` prints)
SPENT: list[tuple[str, Callable[[ProposalWorld, Batch], None], str]] = [
    (
        "an item denied",
        _deny_second,
        "3, 2 waiting; spend waiting for approval: 2004 USD (minor units)",
    ),
    (
        "an item expired",
        _expire_first,
        "3, 2 waiting; spend waiting for approval: 2005 USD (minor units)",
    ),
    ("every item approved", _approve_all, "3, 0 waiting\n"),
]


@pytest.mark.parametrize(("case", "change", "line"), SPENT, ids=[s[0] for s in SPENT])
def test_shows_spend_counts_only_the_items_still_waiting(
    world: ProposalWorld,
    batch: Batch,
    case: str,
    change: Callable[[ProposalWorld, Batch], None],
    line: str,
) -> None:
    change(world, batch)
    done = runner.invoke(approvals_app, ["show", batch.id, "--ledger", world.ledger.path])
    assert done.exit_code == 0, done.output
    assert f"items        {line}" in done.output


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
    tools += ["--policy", policy_file(Path(world.ledger.path).parent)]
    done = runner.invoke(approvals_app, _approve(world, batch.id, *args, *tools))
    again = runner.invoke(approvals_app, _approve(world, batch.id, *args, *tools))
    assert done.exit_code == 0, done.output
    assert again.exit_code == 0, again.output
    assert {world.ledger.preview(i).state for i in batch.items} == {"committed"}  # type: ignore[union-attr]
    assert world.system.effects() == 3  # approved and committed twice over: sent once each
    assert "0 of 3 item(s) approved now" in again.output
