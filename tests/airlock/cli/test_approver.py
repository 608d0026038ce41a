"""An approver that has the tools (the page or ``approvals approve --commit`` with
``--registry``) runs in another process than the session that asked. A write with a
``Secret()`` field can be sent only by the process that prepared it, so the approver
approves it and leaves the commit to that session, instead of failing the write."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import pytest
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from airlock.cli import approvals_app
from airlock.cli._approver import Approver
from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, write
from airlock.tools import (
    CallContext,
    Preview,
    Registry,
    Secret,
    SQLiteLedgerStore,
    WritePath,
    write_tool,
)
from tests.airlock.cli.commit_policy import PAYMENTS, policy, policy_file

runner = CliRunner()
SENT: list[tuple[str, str]] = []


class PayArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    account: Annotated[str, Field(pattern=r"^acc_[0-9]{1,6}$", max_length=10)]
    passphrase: Annotated[str, Field(max_length=64)] = ""


class SealedPay(BaseModel):
    account: str
    passphrase: Annotated[str, Secret()]


class PlainPay(BaseModel):
    account: str
    passphrase: str


class PayDone(BaseModel):
    status: str


def _send(effect: SealedPay | PlainPay, key: str) -> dict[str, str]:
    SENT.append((effect.passphrase, key))
    return {"status": "ok"}


def registry(sealed: bool = True) -> Registry:
    """The payment tool; ``approve --commit --registry`` loads it from here."""
    effect_model = SealedPay if sealed else PlainPay
    tools = Registry()
    tools.register(
        write_tool(
            name="bank_payment_create",
            description="Pay from an account, authorized by its passphrase. Use it when the "
            "user asks to pay. It does not show balances.",
            input_model=PayArgs,
            effect_model=effect_model,
            receipt_model=PayDone,
            prepare=lambda a, p: effect_model(account=a.account, passphrase=a.passphrase),
            commit=_send,
            effects=[write("bank:account/{account}")],
            scope="bank.write",
            proposable=True,
        )
    )
    return tools


ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"bank.write"}))
ASK = ApprovalPolicy((ApprovalRule(id="pay-ask", action="ask", tools=("bank_*",)),))
GRANT = Grant(
    scopes=frozenset({"bank.write"}),
    effects=(write("bank:**"),),
    propose=("bank_payment_create",),
)


def _ctx(caller: str) -> CallContext:
    return CallContext(principal=ALICE, grant=GRANT, run_id="r", caller=caller, approvals=ASK)  # type: ignore[arg-type]


@pytest.fixture
def harness(tmp_path: Path) -> WritePath:
    SENT.clear()
    return WritePath(registry(), SQLiteLedgerStore(tmp_path / "ledger.db"))


def _approver(harness: WritePath, *, sealed: bool = True) -> Approver:
    # Another process: its own ledger connection and its own write path on the same file.
    ledger = SQLiteLedgerStore(harness.ledger.path)
    return Approver.of_registry(
        "bob", ledger, self_approval=False, registry=registry(sealed), policy=policy(PAYMENTS)
    )


# (case, the approver's tool seals the passphrase, committed by the approver)
WHO_COMMITS = [
    ("a sealed field this process does not hold: the session commits", True, False),
    ("nothing sealed: the approver commits at once", False, True),
]


@pytest.mark.parametrize(("case", "sealed", "here"), WHO_COMMITS, ids=[w[0] for w in WHO_COMMITS])
def test_approving_a_write_commits_it_here_only_when_this_process_can_send_it(
    harness: WritePath, case: str, sealed: bool, here: bool
) -> None:
    if not sealed:
        harness = WritePath(registry(sealed=False), harness.ledger)
    pv: Preview = anyio.run(
        harness.preview_call,
        "bank_payment_create",
        {"account": "acc_1", "passphrase": "hunter2"},
        _ctx("direct"),
    )
    done = anyio.run(
        lambda: _approver(harness, sealed=sealed).approve(pv.id, fingerprint=pv.fingerprint)
    )
    assert (done.receipt is not None) is here
    assert harness.ledger.preview(pv.id).state == ("committed" if here else "approved")  # type: ignore[union-attr]
    receipt = anyio.run(harness.commit, pv.id, pv.fingerprint, ALICE)
    assert receipt.data == {"status": "ok"}
    assert [("hunter2", pv.key)] == SENT  # sent once, with the secret, by whoever could


def test_holds_secrets_says_whether_this_write_path_can_send_a_preview(harness: WritePath) -> None:
    pv: Preview = anyio.run(
        harness.preview_call,
        "bank_payment_create",
        {"account": "acc_1", "passphrase": "hunter2"},
        _ctx("direct"),
    )
    elsewhere = WritePath(registry(), SQLiteLedgerStore(harness.ledger.path))
    plain = WritePath(registry(sealed=False), SQLiteLedgerStore(harness.ledger.path))
    assert harness.holds_secrets(pv)
    assert not elsewhere.holds_secrets(pv)
    assert plain.holds_secrets(pv)  # its tool seals nothing


def _batch(harness: WritePath) -> tuple[str, str]:
    async def propose() -> tuple[str, str]:
        p = await harness.propose_from_code(
            "bank_payment_create", {"account": "acc_2", "passphrase": "swordfish"}, _ctx("code")
        )
        batch = harness.store_batch([p])
        return batch.id, batch.fingerprint

    return anyio.run(propose)


def test_approving_a_batch_with_a_sealed_item_leaves_it_for_the_session(
    harness: WritePath,
) -> None:
    batch_id, fingerprint = _batch(harness)
    items = anyio.run(lambda: _approver(harness).approve_batch(batch_id, fingerprint=fingerprint))
    assert [i.state for i in items] == ["approved"]
    settled = anyio.run(harness.commit_batch, batch_id, ALICE)
    assert [i.state for i in settled] == ["committed"]
    assert [s for s, _ in SENT] == ["swordfish"]


def test_approve_commit_of_a_sealed_batch_says_the_session_commits_it(
    harness: WritePath,
) -> None:
    batch_id, fingerprint = _batch(harness)
    tools = ["--commit", "--registry", "tests.airlock.cli.test_approver:registry"]
    tools += ["--policy", policy_file(Path(harness.ledger.path).parent, PAYMENTS)]
    ledger = str(harness.ledger.path)
    args = ["approve", batch_id, "--ledger", ledger, "--fingerprint", fingerprint, "--as", "bob"]
    done = runner.invoke(approvals_app, [*args, *tools])
    # Approved, not committed here: what was asked (--commit) was not done, as for a preview.
    assert done.exit_code == 1, done.output
    said = " ".join(done.output.split())  # (as the console wrapped it)
    assert "not committed here: an item holds a Secret() value only the session" in said
    settled = anyio.run(harness.commit_batch, batch_id, ALICE)
    assert [i.state for i in settled] == ["committed"]
