"""The approval commands' tables print long values whole: a cell folds onto more lines, it is
never cut short with an ellipsis. The tail of an address, an IBAN or an id is where a
look-alike differs (``...corp.example.com`` and ``...corp.example.co`` would read the same)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import app, approvals_app
from airlock.tools import Batch
from tests.airlock.cli.commit_policy import policy_file
from tests.tools.stores import run_sql
from tests.tools.test_proposals import ProposalWorld

runner = CliRunner()
LONG = "ceo@" + "a" * 150 + ".corp.example.co"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProposalWorld]:
    monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(tmp_path / "system.db"))
    w = ProposalWorld(tmp_path)
    yield w
    w.close()


@pytest.fixture
def batch(world: ProposalWorld) -> Batch:
    previews = anyio.run(lambda: world.propose("inv_1", "inv_2"))
    for p in previews:  # as a tool whose summary quotes the model's recipient stores it
        _sql(world, "UPDATE previews SET summary = ? WHERE id = ?", (f"e-mail to {LONG}", p.id))
    return world.writes.store_batch(previews)


def _sql(world: ProposalWorld, statement: str, params: tuple[object, ...]) -> None:
    run_sql(str(world.ledger.path), statement, params)


def column(output: str, header: str) -> str:
    """Every line of the table's ``header`` column, joined: a folded value reads whole."""
    lines = output.splitlines()
    heads = next(line for line in lines if line.startswith("┃") and header in line)
    index = [cell.strip() for cell in heads.split("┃")].index(header)
    rows = [line.split("│") for line in lines if line.startswith("│")]
    return "".join(cells[index].strip() for cells in rows)


def _approve_and_commit(world: ProposalWorld, batch: Batch) -> str:
    tools = ["--registry", "tests.airlock.cli.test_batch_approvals:proposal_registry"]
    tools += ["--policy", policy_file(Path(world.ledger.path).parent)]
    args = [batch.id, "--fingerprint", batch.fingerprint, "--as", "bob", "--commit", *tools]
    done = runner.invoke(approvals_app, ["approve", *args, "--ledger", str(world.ledger.path)])
    assert done.exit_code == 0, done.output
    return done.output


def _receipts(world: ProposalWorld, batch: Batch) -> str:
    _approve_and_commit(world, batch)
    data = json.dumps({"id": f"re_{LONG}"})
    _sql(world, "UPDATE receipts SET data = ? WHERE preview_id = ?", (data, batch.items[0]))
    return runner.invoke(app, ["receipts", "list", "--ledger", str(world.ledger.path)]).output


# (command, how it runs, the column, what it must hold whole)
TABLES = [
    (
        "approvals list",
        lambda w, b: runner.invoke(approvals_app, ["list", "--ledger", str(w.ledger.path)]).output,
        "effect",
        f"e-mail to {LONG}",
    ),
    (
        "approvals show pb_",
        lambda w, b: (
            runner.invoke(approvals_app, ["show", b.id, "--ledger", str(w.ledger.path)]).output
        ),
        "summary",
        f"e-mail to {LONG}",
    ),
    ("approvals approve pb_ --commit", _approve_and_commit, "summary", f"e-mail to {LONG}"),
    ("receipts list", _receipts, "receipt", json.dumps({"id": f"re_{LONG}"})),
]


@pytest.mark.parametrize(("command", "run", "header", "value"), TABLES, ids=[t[0] for t in TABLES])
def test_a_table_folds_a_long_value_and_never_cuts_it(
    world: ProposalWorld, batch: Batch, command: str, run: object, header: str, value: str
) -> None:
    output = run(world, batch)  # type: ignore[operator]
    rows = [line for line in output.splitlines() if line.startswith("│")]
    assert rows, output
    assert not any("…" in row for row in rows), output
    assert value.replace(" ", "") in column(output, header).replace(" ", ""), output
