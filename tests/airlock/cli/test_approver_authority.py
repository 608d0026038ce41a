"""An approver that commits (``approvals approve --commit``, the page of ``approvals serve
--registry``) judges each write first as the session that asked would before its commit: by
the policy's grant and rules now for the principal who asked. A write they no longer allow
(a rule that now denies it, a grant without its scope, effect or spend) is denied by
``airlock:grant`` with the reason, and nothing is sent; ``--commit`` or ``--registry``
without ``--policy`` is refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from airlock.cli import approvals_app
from airlock.cli._approver import Approver
from airlock.harness._commit_authority import REFUSER
from airlock.policies import UsageError, parse_policy
from airlock.tools import Batch, DeniedError, Preview, Registry, SQLiteLedgerStore
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.tools.test_proposals import ProposalWorld
from tests.tools.test_write_world import ASK, INVOICES, context

runner = CliRunner()
TOOLS = "tests.airlock.cli.test_approver_authority:registry"

POLICY = """version = 1
[principals.alice]
tenant = "acme"
scopes = [{scopes}]
effects = [{effects}]
spend_limits = {{ USD = {limit} }}
propose = ["billing_refund_create"]

[[principals.alice.rules]]
id = "refunds-ask"
action = "ask"
tools = ["billing_*"]
{more}"""
ALLOWS = {
    "scopes": '"billing.write"',
    "effects": '"write(billing:refund/*)"',
    "limit": "100000",
    "more": "",
}
FROZEN = '\n[[principals.alice.rules]]\nid = "refunds-frozen"\naction = "deny"\ntools = ["billing_refund_create"]\n'  # fmt: skip

# (case, the policy when the approver commits (None: alice is no longer in it), committed?)
POLICIES: list[tuple[str, str | None, bool]] = [
    ("unchanged", POLICY.format(**ALLOWS), True),
    ("a rule now denies it", POLICY.format(**ALLOWS | {"more": FROZEN}), False),
    ("the grant lost the scope", POLICY.format(**ALLOWS | {"scopes": ""}), False),
    ("the grant lost the effect", POLICY.format(**ALLOWS | {"effects": ""}), False),
    ("the spend limit is under the amount", POLICY.format(**ALLOWS | {"limit": "1000"}), False),
    ("the principal is no longer in the policy", None, False),
]


def registry() -> Registry:
    """The tools ``--registry`` loads in these tests."""
    system = SystemOfRecord(os.environ["AIRLOCK_TEST_SYSTEM"])
    tools = Registry()
    tools.register(refund_tool(system, INVOICES, proposable=True))
    return tools


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProposalWorld]:
    w = ProposalWorld(tmp_path)
    monkeypatch.setenv("AIRLOCK_TEST_SYSTEM", str(tmp_path / "system.db"))
    yield w
    w.close()


def _policy_file(root: Path, text: str | None) -> str:
    path = root / "policy.toml"
    path.write_text(text if text is not None else "version = 1\n")
    return str(path)


def _paused(world: ProposalWorld) -> Preview:
    args = {"invoice_id": "inv_3", "reason": "duplicate"}
    ctx = context(approvals=ASK)
    return anyio.run(lambda: world.writes.preview_call("billing_refund_create", args, ctx))


def _batch(world: ProposalWorld) -> Batch:
    previews = anyio.run(lambda: world.propose("inv_1", "inv_2"))
    return world.writes.store_batch(previews)


def _assert_refused(world: ProposalWorld, preview_ids: list[str]) -> None:
    assert world.system.sends() == 0  # nothing was sent
    for preview_id in preview_ids:
        preview = world.ledger.preview(preview_id)
        assert preview is not None
        assert preview.state == "denied"
        assert "no longer" in (preview.error or ""), preview
        assert [e.actor for e in world.ledger.history(preview_id)][-1] == REFUSER


@pytest.mark.parametrize(("case", "policy", "commits"), POLICIES, ids=[row[0] for row in POLICIES])
def test_approve_commit_judges_the_write_by_the_policy_now(
    world: ProposalWorld, tmp_path: Path, case: str, policy: str | None, commits: bool
) -> None:
    waiting = _paused(world)
    args = ["approve", waiting.id, "--ledger", str(world.ledger.path)]
    args += ["--fingerprint", waiting.fingerprint, "--as", "carol", "--commit"]
    args += ["--registry", TOOLS, "--policy", _policy_file(tmp_path, policy)]

    done = runner.invoke(approvals_app, args)

    if commits:
        assert done.exit_code == 0, done.output
        assert "committed; receipt:" in done.output
        assert world.system.effects() == 1
        return
    assert done.exit_code == 1, done.output
    assert done.output.startswith("denied: not committed: the policy no longer allows it")
    _assert_refused(world, [waiting.id])


@pytest.mark.parametrize(("case", "policy", "commits"), POLICIES, ids=[row[0] for row in POLICIES])
def test_approve_commit_of_a_batch_judges_each_item_by_the_policy_now(
    world: ProposalWorld, tmp_path: Path, case: str, policy: str | None, commits: bool
) -> None:
    batch = _batch(world)
    args = ["approve", batch.id, "--ledger", str(world.ledger.path)]
    args += ["--fingerprint", batch.fingerprint, "--as", "carol", "--commit"]
    args += ["--registry", TOOLS, "--policy", _policy_file(tmp_path, policy)]

    done = runner.invoke(approvals_app, args)

    assert done.exit_code == 0, done.output
    if commits:
        assert world.system.effects() == len(batch.items)
        return
    _assert_refused(world, list(batch.items))


@pytest.mark.parametrize(("case", "policy", "commits"), POLICIES, ids=[row[0] for row in POLICIES])
def test_the_page_s_approver_judges_the_write_by_the_policy_now(
    world: ProposalWorld, case: str, policy: str | None, commits: bool
) -> None:
    """What ``approvals serve --registry --policy`` builds for its page."""
    waiting = _paused(world)
    person = Approver.of_registry(
        "carol",
        SQLiteLedgerStore(world.ledger.path),
        self_approval=False,
        registry=registry(),
        policy=parse_policy(policy or "version = 1\n", source="page-test"),
    )
    if commits:
        done = anyio.run(lambda: person.approve(waiting.id, fingerprint=waiting.fingerprint))
        assert done.receipt is not None
        assert world.system.effects() == 1
        return
    with pytest.raises(DeniedError, match="no longer allows it"):
        anyio.run(lambda: person.approve(waiting.id, fingerprint=waiting.fingerprint))
    _assert_refused(world, [waiting.id])


def test_an_approver_that_commits_needs_the_policy(world: ProposalWorld) -> None:
    with pytest.raises(UsageError, match="give the policy"):
        Approver.of_registry(
            "carol", world.ledger, self_approval=False, registry=registry(), policy=None
        )


# (command, its arguments before the ledger, what the refusal names)
NO_POLICY = [
    ("approve --commit", ["approve", "pv_x", "--fingerprint", "f", "--commit", "--registry", TOOLS],
     "--commit needs --policy"),
    ("serve --registry", ["serve", "--registry", TOOLS], "--registry needs --policy"),
]  # fmt: skip


@pytest.mark.parametrize(("command", "args", "says"), NO_POLICY, ids=[r[0] for r in NO_POLICY])
def test_committing_without_the_policy_is_refused(
    world: ProposalWorld, command: str, args: list[str], says: str
) -> None:
    done = runner.invoke(approvals_app, [*args, "--ledger", str(world.ledger.path)])
    assert done.exit_code == 1, done.output
    assert done.output.startswith("invalid_input: "), done.output
    assert says in done.output
    assert world.system.sends() == 0
