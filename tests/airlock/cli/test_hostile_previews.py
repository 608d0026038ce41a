"""``airlock approvals`` and ``reconcile`` over previews whose text the model wrote: each
command prints it literally, whole, and goes on (one hostile preview hides nothing else)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner, Result

from airlock.cli import app, approvals_app
from airlock.tools import Preview
from tests.airlock.cli.hostile_text import HOSTILE, IDS, hidden
from tests.tools.test_write_world import ASK, INVOICES, World

runner = CliRunner()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def _prepared(world: World, invoice: str, text: str, *, state: str = "prepared") -> Preview:
    """A preview whose summary carries ``text``, as a tool whose summary quotes the model's
    argument stores it (the fingerprint covers the effect, not the summary)."""
    preview: Preview = anyio.run(lambda: world.prepare(invoice, approvals=ASK))
    world.sql(
        "UPDATE previews SET summary = ?, state = ? WHERE id = ?",
        (f"note: {text}", state, preview.id),
    )
    return preview


def _cli(*args: str, group: object = approvals_app) -> Result:
    # Wide enough that no cell wraps: the expected text is looked for whole.
    return runner.invoke(group, list(args), env={"COLUMNS": "200"})  # type: ignore[arg-type]


def _ledger(world: World) -> list[str]:
    return ["--ledger", str(world.root / "ledger.db")]


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_list_shows_the_summary_literally_and_every_other_preview(
    world: World, case: str, text: str, shown: str
) -> None:
    plain = anyio.run(lambda: world.prepare("inv_1", approvals=ASK))
    hostile = _prepared(world, "inv_2", text)
    listed = _cli("list", *_ledger(world))
    assert listed.exit_code == 0, listed.output
    assert f"note: {shown}" in listed.output
    assert plain.id in listed.output
    assert hostile.id in listed.output
    assert not hidden(listed.output)


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_show_prints_the_state_summary_and_effect_literally(
    world: World, case: str, text: str, shown: str
) -> None:
    preview = _prepared(world, "inv_3", text)
    # `show` prints the stored effect as it is, whatever it hashes to.
    world.sql(
        "UPDATE previews SET effect = ? WHERE id = ?", (json.dumps({"body": text}), preview.id)
    )
    result = _cli("show", preview.id, *_ledger(world))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"preview      {preview.id}  [prepared]" in lines
    assert f"summary      note: {shown}" in lines  # one line: a newline forges no field
    assert f'  "body": {json.dumps(text)}' in lines  # the JSON escapes of every hidden one
    assert f"fingerprint  {preview.fingerprint}" in lines
    assert not hidden(result.output)


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_a_batch_is_shown_and_approved_with_its_items_literally(
    world: World, case: str, text: str, shown: str
) -> None:
    items = [_prepared(world, "inv_4", "first"), _prepared(world, "inv_5", text)]
    batch = world.writes.store_batch(items)
    shown_batch = _cli("show", batch.id, *_ledger(world))
    assert shown_batch.exit_code == 0, shown_batch.output
    assert f"note: {shown}" in shown_batch.output
    fp = ["--fingerprint", batch.fingerprint, "--as", "carol"]
    approved = _cli("approve", batch.id, *fp, *_ledger(world))
    assert approved.exit_code == 0, approved.output  # not a crash after approving
    assert "2 of 2 item(s) approved now" in approved.output
    assert f"note: {shown}" in approved.output
    assert not hidden(shown_batch.output + approved.output)


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_a_batch_is_shown_with_each_items_effect_literally(
    world: World, monkeypatch: pytest.MonkeyPatch, case: str, text: str, shown: str
) -> None:
    monkeypatch.setitem(INVOICES["inv_7"], "customer", text)  # the effect's recipient
    preview: Preview = anyio.run(lambda: world.prepare("inv_7", approvals=ASK))
    batch = world.writes.store_batch([preview])
    shown_batch = _cli("show", batch.id, *_ledger(world))
    assert shown_batch.exit_code == 0, shown_batch.output
    assert f'"recipient": {json.dumps(text)}' in shown_batch.output  # hidden ones as escapes
    assert not hidden(shown_batch.output)


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_reconcile_lists_an_undecided_write_literally(
    world: World, case: str, text: str, shown: str
) -> None:
    preview = _prepared(world, "inv_6", text, state="unknown")
    listed = _cli("reconcile", *_ledger(world), group=app)
    assert listed.exit_code == 1, listed.output  # undecided, not crashed
    assert f"{preview.id} billing_refund_create [unknown] note: {shown}\n" in listed.output
    assert not hidden(listed.output)


@pytest.mark.parametrize("given", ["pv_[/]", "pv_[white on white]x", "pv_:warning:"])
def test_a_refusal_quotes_what_was_given_literally(world: World, given: str) -> None:
    refused = _cli("approve", given, "--fingerprint", "0" * 64, "--as", "carol", *_ledger(world))
    assert refused.exit_code == 1
    assert refused.output.startswith("not_found: ")
    assert repr(given) in refused.output
