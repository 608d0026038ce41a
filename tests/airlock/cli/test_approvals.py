"""``airlock approvals``, ``receipts`` and ``reconcile`` against a real ledger file."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import app, approvals_app, default_ledger
from airlock.tools import (
    AmbiguousWriteError,
    ConflictError,
    NeedsApprovalError,
    Preview,
    Registry,
)
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.airlock.cli.commit_policy import policy_file
from tests.tools.test_write_world import ALICE, ASK, INVOICES, World

runner = CliRunner()


def registry() -> Registry:
    """The tools ``airlock reconcile --registry`` loads in the test below."""
    system = SystemOfRecord(os.environ["AIRLOCK_TEST_SYSTEM"])
    tools = Registry()
    tools.register(refund_tool(system, INVOICES))
    return tools


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


@pytest.fixture
def waiting(world: World) -> Preview:
    return anyio.run(lambda: world.prepare("inv_3", approvals=ASK))


def _ledger(world: World) -> list[str]:
    return ["--ledger", str(world.root / "ledger.db")]


def test_list_shows_waiting_previews(world: World, waiting: Preview) -> None:
    result = runner.invoke(approvals_app, ["list", *_ledger(world)])
    assert result.exit_code == 0, result.output
    assert waiting.id in result.output
    assert "alice@acme" in result.output
    assert "refund 10.03 USD on inv_3" in result.output


def test_show_prints_the_full_effect_fingerprint_and_rule(world: World, waiting: Preview) -> None:
    result = runner.invoke(approvals_app, ["show", waiting.id, *_ledger(world)])
    assert result.exit_code == 0, result.output
    assert waiting.fingerprint in result.output
    assert "refunds-ask" in result.output
    assert '"amount_minor": 1003' in result.output
    assert '"recipient": "cus_3"' in result.output


def test_approve_then_the_harness_commits(world: World, waiting: Preview) -> None:
    result = runner.invoke(
        approvals_app,
        [
            "approve",
            waiting.id,
            "--fingerprint",
            waiting.fingerprint,
            "--as",
            "carol",
            *_ledger(world),
        ],
    )
    assert result.exit_code == 0, result.output
    approval = world.ledger.approval(waiting.id)
    assert approval is not None
    assert (approval.kind, approval.approver) == ("person", "carol")

    receipt = anyio.run(world.writes.commit, waiting.id, waiting.fingerprint, ALICE)
    listed = runner.invoke(app, ["receipts", "list", *_ledger(world)])
    assert listed.exit_code == 0, listed.output
    assert receipt.preview_id in listed.output
    assert str(receipt.data["id"]) in listed.output


def test_approving_a_changed_preview_is_refused(world: World, waiting: Preview) -> None:
    with sqlite3.connect(world.root / "ledger.db") as conn:
        conn.execute(
            "UPDATE previews SET effect = replace(effect, '1003', '99999') WHERE id = ?",
            (waiting.id,),
        )
    result = runner.invoke(
        approvals_app,
        [
            "approve",
            waiting.id,
            "--fingerprint",
            waiting.fingerprint,
            "--as",
            "carol",
            *_ledger(world),
        ],
    )
    assert result.exit_code == 1
    assert "approval_mismatch" in result.output
    assert world.ledger.approval(waiting.id) is None


def test_approving_with_a_stale_fingerprint_is_refused(world: World, waiting: Preview) -> None:
    result = runner.invoke(
        approvals_app, ["approve", waiting.id, "--fingerprint", "0" * 64, *_ledger(world)]
    )
    assert result.exit_code == 1
    assert "approval_mismatch" in result.output


def test_deny_needs_a_reason_and_blocks_the_commit(world: World, waiting: Preview) -> None:
    missing = runner.invoke(approvals_app, ["deny", waiting.id, *_ledger(world)])
    assert missing.exit_code != 0
    result = runner.invoke(
        approvals_app, ["deny", waiting.id, "--reason", "wrong customer", *_ledger(world)]
    )
    assert result.exit_code == 0, result.output
    stored = world.ledger.preview(waiting.id)
    assert stored is not None
    assert stored.state == "denied"
    listed = runner.invoke(approvals_app, ["list", *_ledger(world)])
    assert waiting.id not in listed.output


def test_unknown_preview_and_missing_ledger(world: World, tmp_path: Path) -> None:
    unknown = runner.invoke(
        approvals_app, ["approve", "pv_nope", "--fingerprint", "0" * 64, *_ledger(world)]
    )
    assert unknown.exit_code == 1
    assert "not_found" in unknown.output
    missing = runner.invoke(approvals_app, ["list", "--ledger", str(tmp_path / "none.db")])
    assert missing.exit_code == 1
    assert "no ledger" in missing.output


def test_a_damaged_row_is_one_line_naming_it(world: World, waiting: Preview) -> None:
    world.sql("UPDATE previews SET principal = ? WHERE id = ?", ("garbage", waiting.id))
    for command in (["list", "--all"], ["show", waiting.id]):
        result = runner.invoke(app, ["approvals", *command, *_ledger(world)])
        assert result.exit_code == 2, result.output
        assert "error (ledger_corrupt)" in result.output
        assert waiting.id in result.output
        assert "Traceback" not in result.output


def test_default_ledger_lives_in_airlock_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path))
    assert default_ledger() == tmp_path / "ledger.db"


def test_reconcile_lists_then_resolves_with_the_tools(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    preview = anyio.run(world.prepare, "inv_4")
    world.system.inject("lose_reply")
    with pytest.raises(AmbiguousWriteError):
        anyio.run(world.writes.commit, preview.id, preview.fingerprint, ALICE)

    listed = runner.invoke(app, ["reconcile", *_ledger(world)])
    assert listed.exit_code == 1
    assert preview.id in listed.output

    monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(world.root / "system.db"))
    tools = "tests.airlock.cli.test_approvals:registry"
    result = runner.invoke(app, ["reconcile", *_ledger(world), "--registry", tools])
    assert result.exit_code == 0, result.output
    assert "committed" in result.output
    assert world.system.effects() == 1
    assert len(world.ledger.receipts()) == 1
    again = runner.invoke(app, ["reconcile", *_ledger(world)])
    assert again.exit_code == 0
    assert "nothing to reconcile" in again.output


def test_reconcile_refuses_a_bad_tools_reference(world: World) -> None:
    anyio.run(world.prepare, "inv_5")
    result = runner.invoke(app, ["reconcile", *_ledger(world), "--registry", "no_such_module:x"])
    assert result.exit_code != 0


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("no_such_module:x", "cannot import 'no_such_module'"),
        ("tests.airlock.cli.test_approvals:nothing_here", "has no 'nothing_here'"),
        (
            "tests.airlock.inventory.test_registry_ref:look_alike",
            "is a LookAlike, not a tools.Registry, which can run its tools",
        ),
        ("no_colon", "expected one ':'"),
    ],
)
def test_reconcile_needs_a_registry_that_runs_tools(world: World, ref: str, reason: str) -> None:
    anyio.run(world.prepare, "inv_5")
    result = runner.invoke(app, ["reconcile", *_ledger(world), "--registry", ref])
    assert result.exit_code == 2
    assert "error (registry_ref)" in result.output
    assert reason in " ".join(result.output.split())
    assert world.system.sends() == 0


def _policy(world: World) -> list[str]:
    """What ``--commit`` judges the write by: a policy that allows it, as the session's."""
    return ["--policy", policy_file(world.root)]


def _approve(world: World, preview: Preview, *extra: str) -> list[str]:
    return ["approve", preview.id, *_ledger(world), *extra]


SELF_APPROVAL = "version = 1\nself_approval = true\n"


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--as", "carol"], "invalid_input", "give --fingerprint"),
        (["--as", "", "--fingerprint", "FP"], "invalid_input", "approver ''"),
        (["--as", "alice", "--fingerprint", "FP"], "denied", "'alice' asked for preview"),
        (["--as", "alice@acme", "--fingerprint", "FP"], "denied", "self_approval = true"),
        (["--as", "policy:x", "--fingerprint", "FP"], "invalid_input", "not starting with"),
        (["--as", "carol", "--fingerprint", "FP", "--commit"], "invalid_input", "--registry"),
    ],
)
def test_approve_refusals_have_a_code_and_one_line(
    world: World, waiting: Preview, args: list[str], code: str, says: str
) -> None:
    args = [waiting.fingerprint if a == "FP" else a for a in args]
    result = runner.invoke(approvals_app, _approve(world, waiting, *args))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"{code}: ")
    assert says in lines[0]
    assert world.ledger.approval(waiting.id) is None


def test_a_policy_with_self_approval_lets_the_requester_approve(
    world: World, waiting: Preview
) -> None:
    policy = world.root / "policy.toml"
    policy.write_text(SELF_APPROVAL)
    fp = ["--fingerprint", waiting.fingerprint, "--as", "alice"]
    result = runner.invoke(approvals_app, _approve(world, waiting, *fp, "--policy", str(policy)))
    assert result.exit_code == 0, result.output
    approval = world.ledger.approval(waiting.id)
    assert approval is not None
    assert approval.approver == "alice"


def test_approve_commit_sends_once_and_the_harness_gets_the_same_receipt(
    world: World, waiting: Preview, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(world.root / "system.db"))
    tools = "tests.airlock.cli.test_approvals:registry"
    fp = ["--fingerprint", waiting.fingerprint, "--as", "carol"]
    result = runner.invoke(
        approvals_app,
        _approve(world, waiting, *fp, "--commit", "--registry", tools, *_policy(world)),
    )
    assert result.exit_code == 0, result.output
    assert "committed; receipt:" in result.output
    assert world.system.effects() == 1
    stored = world.ledger.preview(waiting.id)
    assert stored is not None
    assert stored.state == "committed"
    # The harness that asked for it finds the receipt and sends nothing.
    receipt = anyio.run(world.writes.commit, waiting.id, waiting.fingerprint, ALICE)
    assert receipt.replayed
    assert world.system.effects() == 1
    # Asked again (the first answer lost, say): its receipt, replayed; nothing is sent.
    again = runner.invoke(
        approvals_app,
        _approve(world, waiting, *fp, "--commit", "--registry", tools, *_policy(world)),
    )
    assert again.exit_code == 0, again.output
    assert again.output.startswith(f"already approved {waiting.id} ")
    assert "already committed; receipt:" in again.output
    assert world.system.effects() == 1
    # Another fingerprint, or no --commit, is refused as before.
    for args, code in (
        (
            ["--fingerprint", "0" * 64, "--as", "carol", "--commit", "--registry", tools],
            "approval_mismatch",
        ),
        (fp, "conflict"),
    ):
        refused = runner.invoke(approvals_app, _approve(world, waiting, *args, *_policy(world)))
        assert refused.exit_code == 1, refused.output
        assert refused.output.startswith(f"{code}: "), refused.output


def test_approve_commit_while_the_harness_commits_sends_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = [
        anyio.run(lambda n=n: world.prepare(f"inv_{n}", approvals=ASK)) for n in range(6, 14)
    ]
    monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(world.root / "system.db"))
    tools = "tests.airlock.cli.test_approvals:registry"
    settled: list[str] = []

    def harness() -> None:  # another process's harness, polling its paused writes
        other = World(world.root)

        async def commit_all() -> None:
            left = list(waiting)
            with anyio.fail_after(60):
                while left:
                    preview = left.pop(0)
                    try:
                        await other.writes.commit(preview.id, preview.fingerprint, ALICE)
                    except (NeedsApprovalError, ConflictError):
                        left.append(preview)
                        await anyio.sleep(0.001)
                    else:
                        settled.append(preview.id)

        try:
            anyio.run(commit_all)
        finally:
            other.close()

    thread = threading.Thread(target=harness)
    thread.start()
    for preview in waiting:
        result = runner.invoke(
            approvals_app,
            [
                *_approve(world, preview, "--fingerprint", preview.fingerprint, "--as", "carol"),
                "--commit",
                "--registry",
                tools,
                *_policy(world),
            ],
        )
        assert result.exit_code == 0, result.output
    thread.join(60)
    assert sorted(settled) == sorted(p.id for p in waiting)
    assert world.system.effects() == len(waiting)
    assert len(world.ledger.receipts()) == len(waiting)


def test_deny_as_nobody_is_refused(world: World, waiting: Preview) -> None:
    result = runner.invoke(
        approvals_app, ["deny", waiting.id, "--reason", "no", "--as", "", *_ledger(world)]
    )
    assert result.exit_code == 1
    assert result.output.startswith("invalid_input: approver ''")
    stored = world.ledger.preview(waiting.id)
    assert stored is not None
    assert stored.state == "prepared"
