"""Writes that keep their word: secrets never stored in clear, an intent committed once and
answered as such when asked again, and a write tool without input fields."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, UsageError, write
from airlock.tools import (
    CallContext,
    ConflictError,
    MemoryAuditStore,
    PreviewExpiredError,
    Registry,
    RunAuthority,
    Secret,
    ToolSpec,
    WritePath,
    write_tool,
)
from airlock.tools._arguments import validated_args_hash
from airlock.tools._audit_log import AuditLog
from tests.tools.stores import LEDGER_TABLES, Backend, dump_tables, open_ledger

pytestmark = pytest.mark.anyio

PASSWORD = "hunter2-correct-horse"
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"bank.write"}))
GRANT = Grant(scopes=frozenset({"bank.write"}), effects=(write("bank:**"),))
ALLOW = ApprovalPolicy((ApprovalRule(id="bank", action="allow", tools=("bank_*",)),))
ASK = ApprovalPolicy((ApprovalRule(id="bank-ask", action="ask", tools=("bank_*",)),))


class TransferArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    account: Annotated[str, Field(pattern=r"^acc_[0-9]{1,6}$", max_length=10)]
    password: Annotated[str, Secret(), Field(max_length=64)]


class Transfer(BaseModel):
    account: str
    password: Annotated[str, Secret()]


class Done(BaseModel):
    status: str


class Bank:
    """A system of record that needs the password at commit, and remembers what it got."""

    def __init__(self) -> None:
        self.commits: list[tuple[str, str]] = []
        self.fail_next = False

    def commit(self, effect: Transfer, key: str) -> dict[str, Any]:
        self.commits.append((effect.account, effect.password))
        if self.fail_next:
            self.fail_next = False
            raise TimeoutError("the bank did not answer")
        return {"status": "sent"}


def transfer_tool(bank: Bank) -> ToolSpec:
    return write_tool(
        name="bank_transfer_create",
        description=(
            "Send a transfer from an account, authorized by its password. Use it when the "
            "user asks to pay. It does not show balances."
        ),
        input_model=TransferArgs,
        effect_model=Transfer,
        receipt_model=Done,
        prepare=lambda args, principal: Transfer(account=args.account, password=args.password),
        commit=bank.commit,
        lookup=None,
        effects=[write("bank:account/{account}")],
        scope="bank.write",
        summarize=lambda e: f"transfer from {e.account} ({e.password})",
    )


class MarkArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Marked(BaseModel):
    tenant_id: str


def mark_all_read_tool(marked: list[str]) -> ToolSpec:
    def commit(effect: Marked, key: str) -> dict[str, Any]:
        marked.append(key)
        return {"status": "done"}

    return write_tool(
        name="bank_message_markread",
        description=(
            "Mark every unread message of the account as read. Use it when the user asks to "
            "clear the inbox. It does not delete anything."
        ),
        input_model=MarkArgs,
        effect_model=Marked,
        receipt_model=Done,
        prepare=lambda args, principal: Marked(tenant_id=principal.tenant_id),
        commit=commit,
        effects=[write("bank:inbox/*")],
        scope="bank.write",
    )


class World:
    def __init__(self, root: Path, database: str | None = None) -> None:
        self.root = root
        self.database = database
        self.bank = Bank()
        self.marked: list[str] = []
        self.store = MemoryAuditStore()
        self.registry = Registry(audit=AuditLog(self.store))
        self.registry.register(transfer_tool(self.bank))
        self.registry.register(mark_all_read_tool(self.marked))
        self.ledger = open_ledger(database or str(root))
        self.writes = WritePath(self.registry, self.ledger)

    def another_process(self) -> WritePath:
        """The write path of another process over the same ledger (its memory is its own)."""
        registry = Registry()
        registry.register(transfer_tool(self.bank))
        registry.register(mark_all_read_tool(self.marked))
        return WritePath(registry, self.ledger)

    def ledger_bytes(self) -> bytes:
        if self.database is not None:
            return dump_tables(self.database, LEDGER_TABLES)
        return b"".join(p.read_bytes() for p in sorted(self.root.glob("ledger.db*")))


def ctx(approvals: ApprovalPolicy = ALLOW, run_id: str = "run_1") -> CallContext:
    authority = RunAuthority(principal=ALICE, grant=GRANT, run_id=run_id, approvals=approvals)
    return authority.context("direct", f"{run_id}:c1")


@pytest.fixture
def world(tmp_path: Path, backend: Backend) -> Iterator[World]:
    w = World(tmp_path, backend.url)
    yield w
    w.ledger.close()


ARGS = {"account": "acc_1", "password": PASSWORD}


# -- secrets --------------------------------------------------------------------------------


async def test_a_secret_is_sealed_in_the_ledger_and_given_back_to_commit(world: World) -> None:
    preview = await world.writes.preview_call("bank_transfer_create", ARGS, ctx())
    sealed = preview.effect["password"]
    assert isinstance(sealed, str)
    assert sealed.startswith("secret:")
    assert PASSWORD not in preview.summary  # summarize sees the sealed effect
    assert preview.computed_fingerprint() == preview.fingerprint
    receipt = await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert receipt.data == {"status": "sent"}
    assert world.bank.commits == [("acc_1", PASSWORD)]  # the system got the real value
    world.registry.audit.flush()
    assert PASSWORD.encode() not in world.ledger_bytes()
    assert PASSWORD not in repr(world.store.query())


async def test_the_audit_hash_leaves_the_secret_out(world: World) -> None:
    spec = world.registry.get("bank_transfer_create")
    assert spec is not None
    assert spec.secret_fields == {"password"}
    assert spec.write is not None
    assert spec.write.intent == ("account",)  # the stored key never hashes the secret
    one = TransferArgs(account="acc_1", password="a")
    two = TransferArgs(account="acc_1", password="b")
    assert validated_args_hash(one, secret_fields=spec.secret_fields) == validated_args_hash(
        two, secret_fields=spec.secret_fields
    )
    await world.writes.preview_call("bank_transfer_create", ARGS, ctx())
    (event,) = [e for e in world.registry.audit.events() if e.final]
    assert event.args_hash == validated_args_hash(
        TransferArgs.model_validate(ARGS), secret_fields=frozenset({"password"})
    )


async def test_a_process_without_the_secret_refuses_the_commit_before_sending(
    world: World,
) -> None:
    preview = await world.writes.preview_call("bank_transfer_create", ARGS, ctx(ASK))
    other = world.another_process()
    other.approve(preview.id, approver="carol", fingerprint=preview.fingerprint)
    with pytest.raises(PreviewExpiredError) as info:
        await other.commit(preview.id, preview.fingerprint, ALICE)
    assert info.value.outcome == "error"
    assert "secret" in info.value.message
    assert world.bank.commits == []  # nothing was sent, not even the seal
    stored = world.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "failed"
    again = await other.preview_call("bank_transfer_create", ARGS, ctx(ASK))
    assert again.id != preview.id  # the same intent, prepared anew where the secret is
    other.approve(again.id, approver="carol")
    await other.commit(again.id, again.fingerprint, ALICE)
    assert world.bank.commits == [("acc_1", PASSWORD)]


async def test_a_live_preview_whose_secret_is_lost_gives_way_to_a_new_one(world: World) -> None:
    preview = await world.writes.preview_call("bank_transfer_create", ARGS, ctx(ASK))
    other = world.another_process()
    fresh = await other.preview_call("bank_transfer_create", ARGS, ctx(ASK))
    assert fresh.id != preview.id
    old = world.ledger.preview(preview.id)
    assert old is not None
    assert (old.state, old.error) == ("failed", "secret_unavailable")


async def test_reconcile_never_sends_a_seal_in_place_of_the_secret(world: World) -> None:
    preview = await world.writes.preview_call("bank_transfer_create", ARGS, ctx())
    world.bank.fail_next = True
    with pytest.raises(Exception, match="may have happened"):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert world.bank.commits == [("acc_1", PASSWORD)]
    other = world.another_process()
    (resolution,) = await other.reconcile()
    assert resolution.outcome == "unresolved"
    assert world.bank.commits == [("acc_1", PASSWORD)]  # no resend with the seal
    (resolution,) = await world.writes.reconcile()  # the process that holds it resends
    assert resolution.outcome == "committed"
    assert world.bank.commits == [("acc_1", PASSWORD)] * 2


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"intent": ("account", "password")}, "are marked Secret()"),
        ({"effects": [write("bank:account/{password}")]}, "names the secret field 'password'"),
    ],
)
def test_registration_refuses_a_secret_where_it_would_be_stored(
    change: dict[str, Any], fragment: str
) -> None:
    spec = transfer_tool(Bank())
    assert spec.write is not None
    options: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "input_model": TransferArgs,
        "effect_model": Transfer,
        "receipt_model": Done,
        "prepare": spec.write.prepare,
        "commit": spec.write.commit,
        "effects": [write("bank:account/{account}")],
        "scope": "bank.write",
    }
    with pytest.raises(UsageError) as info:
        Registry().register(write_tool(**(options | change)))
    assert fragment in str(info.value)


def test_a_secret_effect_field_must_be_text() -> None:
    class Pin(BaseModel):
        account: str
        pin: Annotated[int, Secret()]

    spec = write_tool(
        name="bank_pin_change",
        description="Change a PIN. Use it when asked. It returns nothing secret.",
        input_model=TransferArgs,
        effect_model=Pin,
        receipt_model=Done,
        prepare=lambda args, principal: Pin(account=args.account, pin=1),
        commit=lambda effect, key: {"status": "ok"},
        effects=[write("bank:account/{account}")],
        scope="bank.write",
    )
    with pytest.raises(UsageError, match="not a str"):
        Registry().register(spec)


# -- asked again after its commit -----------------------------------------------------------


async def test_asking_again_for_a_committed_intent_says_so_and_sends_nothing(
    world: World,
) -> None:
    preview = await world.writes.preview_call("bank_transfer_create", ARGS, ctx())
    await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    again = await world.writes.preview_call("bank_transfer_create", ARGS, ctx())
    assert (again.id, again.state) == (preview.id, "committed")
    assert world.writes.receipt(again) is not None
    with pytest.raises(ConflictError) as info:  # a caller that knows only errors
        await world.registry.call("bank_transfer_create", ARGS, ctx())
    assert "already committed" in info.value.message
    assert "not sent again" in info.value.message
    assert len(world.bank.commits) == 1
    finals = [e for e in world.registry.audit.events() if e.final]
    assert [(e.outcome, e.code) for e in finals] == [
        ("preview", "needs_approval"),
        ("preview", "already_committed"),
        ("preview", "already_committed"),
    ]
    assert not any(e.exercised for e in finals)


# -- a write without input fields -----------------------------------------------------------


async def test_a_write_without_input_fields_is_one_intent_per_run(world: World) -> None:
    first = await world.writes.preview_call("bank_message_markread", {}, ctx())
    assert first.effect == {"tenant_id": "acme"}
    await world.writes.commit(first.id, first.fingerprint, ALICE)
    again = await world.writes.preview_call("bank_message_markread", {}, ctx())
    assert (again.id, again.state) == (first.id, "committed")
    other_run = await world.writes.preview_call("bank_message_markread", {}, ctx(run_id="run_2"))
    assert other_run.key != first.key
    await world.writes.commit(other_run.id, other_run.fingerprint, ALICE)
    assert len(world.marked) == 2
    spec = world.registry.get("bank_message_markread")
    assert spec is not None
    assert spec.write is not None
    assert spec.write.intent == ()


def test_a_write_with_input_fields_still_names_its_intent() -> None:
    spec = transfer_tool(Bank())
    assert spec.write is not None
    options: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "input_model": TransferArgs,
        "effect_model": Transfer,
        "receipt_model": Done,
        "prepare": spec.write.prepare,
        "commit": spec.write.commit,
        "effects": [write("bank:account/{account}")],
        "scope": "bank.write",
        "intent": (),
    }
    with pytest.raises(UsageError, match="name the intent"):
        Registry().register(write_tool(**options))
