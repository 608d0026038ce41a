"""A paused write is committed only while the session's authority still allows its tool and
the effects prepare resolved: a session resumed with less (a principal whose write scope was
taken away, a narrower grant, a rule that now denies) denies it, sends nothing, and leaves its
ledger step ``denied`` with the reason."""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock import Harness, ModelResult, Session
from airlock.policies import Effect, Principal, disclose, network, parse_policy, write
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import (
    MemoryAuditStore,
    Registry,
    SQLiteLedgerStore,
    approve_preview,
    write_tool,
)
from tests.airlock.harness.batch_world import REFUND, BatchWorld, body
from tests.airlock.session_world import ALICE
from tests.tools.test_proposals import PROPOSING

pytestmark = [
    pytest.mark.anyio,
    # A session that may no longer make the write reaches no tool at all, and is told so.
    pytest.mark.filterwarnings("ignore::airlock.harness.NoToolsWarning"),
]

READER = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read"}))
CRM_WRITER = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"crm.write"}))

# (case, principal, grant (None: the policy's for the principal), refund rule, committed?)
AUTHORITIES: list[tuple[str, Principal, Any, str, bool]] = [
    ("unchanged", ALICE, PROPOSING, "ask", True),
    ("the principal lost the write scope", READER, None, "ask", False),
    ("the grant lost the scope", ALICE,
     dataclasses.replace(PROPOSING, scopes=frozenset({"billing.read"})), "ask", False),
    ("the grant lost the effect", ALICE, dataclasses.replace(PROPOSING, effects=()), "ask", False),
    ("the spend limit is under the amount", ALICE,
     dataclasses.replace(PROPOSING, spend_limits={"USD": 1000}), "ask", False),
    ("the spend is in another currency now", ALICE,
     dataclasses.replace(PROPOSING, spend_limits={"EUR": 100_000}), "ask", False),
    ("a rule now denies it", ALICE, PROPOSING, "deny", False),
]  # fmt: skip

HOW = ["resume", "settle", "batch"]


async def _outcome(how: str, again: Session, target: str) -> ModelResult:
    if how == "resume":
        return await again.resume(target)
    if how == "batch":
        return await again.resume(target)
    [told] = await again.settle_writes()
    return told


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(
    ("case", "principal", "grant", "rule", "commits"),
    AUTHORITIES,
    ids=[row[0] for row in AUTHORITIES],
)
async def test_a_write_the_session_may_no_longer_make_is_denied_and_never_sent(
    world: BatchWorld, how: str, case: str, principal: Principal, grant: Any, rule: str,
    commits: bool,
) -> None:  # fmt: skip
    session = world.session()
    if how == "batch":
        batch = await world.propose(session, ["inv_21", "inv_22"])
        world.approve_batch(batch)
        target, items = batch.id, list(batch.items)
    else:
        target = await world.pause(session, "inv_3")
        world.approve(target)
        items = [target]

    again = world.harness_with(rule).resume_session(principal, session.run_id, grant=grant)
    if how == "batch":
        again._batches.hold(batch, [p for p in map(world.ledger.preview, items) if p])
    answer = await _outcome(how, again, target)

    said = body(answer)
    if commits:
        assert world.system.effects() == len(items)
        assert world.states(items) == ["committed"] * len(items)
        return
    assert world.system.sends() == 0  # nothing was sent
    assert world.states(items) == ["denied"] * len(items)
    for preview_id in items:
        preview = world.ledger.preview(preview_id)
        assert preview is not None
        assert "no longer" in (preview.error or ""), preview
    if how == "batch":
        assert (said["status"], said["counts"]) == ("settled", {"denied": 2})
        assert sorted(said["grant_refused"]) == sorted(items)
        assert "no longer" in said["message"]
    else:
        assert (answer.code, said["preview_id"]) == ("denied", target)
        assert "no longer" in said["message"]
        assert "do not retry" in said["message"].lower()
        assert again.pending() == []
    # Asked again, still nothing is sent: the step says denied.
    again_answer = await again.resume(target)
    assert world.system.sends() == 0
    assert again_answer.code == ("denied" if how != "batch" else None), again_answer.content


async def test_a_refund_prepared_with_the_write_scope_is_not_sent_once_it_is_gone(
    world: BatchWorld,
) -> None:
    """The reviewer's case: Alice's refund approved, then a session of Alice holding only
    ``billing.read`` resumes it."""
    session = world.session()
    preview_id = await world.pause(session, "inv_3")
    world.approve(preview_id)
    reader = world.harness.resume_session(READER, session.run_id)
    assert REFUND not in [t.name for t in reader.tools()]

    answer = await reader.resume(preview_id)

    assert answer.code == "denied", answer.content
    assert world.system.sends() == 0
    # The session that may still make it finds it denied too: the ledger says why.
    assert (await session.resume(preview_id)).code == "denied"
    assert world.system.sends() == 0


class _Target(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    first: str = Field(max_length=400, description="What the first effect names.")
    second: str = Field(max_length=200, description="What the second effect names.")


class _Done(BaseModel):
    ok: bool


ORG, CONTACT = "o" * 150, "c" * 150
# (case, declared effects, the grant's effects, first, second): each resolves to effects a
# declaration could not be written as (over 256 characters, a filled URL, an e-mail domain
# read as a mail server reads it), which the session judges again as prepare resolved them.
RESOLVED: list[tuple[str, list[Effect], list[str], str, str]] = [
    ("a resource over 256 characters",
     [write("crm:org/{first}/contact/{second}")], ["write(crm:org/*/contact/*)"],
     ORG, CONTACT),
    ("a URL with a long path",
     [write("crm:hook/{second}"), network("{first}")],
     ["write(crm:hook/*)", "network(https://hooks.example.com/**)"],
     "https://hooks.example.com/" + "segment/" * 40 + "end", "h_1"),
    ("unusual but valid characters",
     [write("crm:contact/{second}"), disclose("email:{first}")],
     ["write(crm:contact/*)", "disclose(email:*@acme.com)"],
     "Bob+Tag@ACME.com.", "a..b+c@d_-e"),
    ("a URL with escapes, '~', ':' and '@' in its path",
     [write("crm:hook/{second}"), network("{first}")],
     ["write(crm:hook/*)", "network(https://hooks.example.com/**)"],
     "https://Hooks.Example.com:443/~ops/a:b@c/%7e%20x+y", "h_2"),
]  # fmt: skip


def _resolved_world(root: Path, declared: list[Effect], granted: list[str]) -> tuple[
    Harness, SQLiteLedgerStore, list[str]
]:  # fmt: skip
    sent: list[str] = []

    def commit(effect: BaseModel, idempotency_key: str) -> dict[str, bool]:
        sent.append(idempotency_key)
        return {"ok": True}

    registry = Registry()
    registry.register(
        write_tool(
            name="crm_contact_delete",
            description="Deletes one contact of an organisation. Use it when the user asks "
            "to remove a contact. It does not return the contact.",
            input_model=_Target,
            effect_model=_Target,
            receipt_model=_Done,
            prepare=lambda args, principal: args,
            commit=commit,
            effects=declared,
            scope="crm.write",
        )
    )
    effects = ", ".join(f'"{text}"' for text in granted)
    policy = parse_policy(
        f'version = 1\n[principals.alice]\ntenant = "acme"\nscopes = ["crm.write"]\n'
        f'effects = [{effects}]\n[[principals.alice.rules]]\nid = "ask"\naction = "ask"\n'
        'tools = ["crm_*"]\n',
        source="resolved-effects-test",
    )
    ledger = SQLiteLedgerStore(root / "crm-ledger.db")
    harness = Harness(registry, policy, ScriptedBackend([]), ledger, audit=MemoryAuditStore())
    return harness, ledger, sent


@pytest.mark.parametrize("how", ["resume", "settle"])
@pytest.mark.parametrize(
    ("case", "declared", "granted", "first", "second"), RESOLVED, ids=[r[0] for r in RESOLVED]
)
async def test_a_write_whose_resolved_effects_no_declaration_could_spell_is_committed(
    tmp_path: Path, how: str, case: str, declared: list[Effect], granted: list[str],
    first: str, second: str,
) -> None:  # fmt: skip
    harness, ledger, sent = _resolved_world(tmp_path, declared, granted)
    try:
        session = harness.session(CRM_WRITER)
        asked = await session.call("crm_contact_delete", {"first": first, "second": second})
        assert asked.code == "needs_approval", asked.content
        preview_id = body(asked)["preview_id"]
        approve_preview(ledger, preview_id, approver="bob", now=time.time())

        answer = await _outcome(how, session, preview_id)

        assert answer.code is None, answer.content
        assert body(answer)["status"] == "committed"
        assert len(sent) == 1
        preview = ledger.preview(preview_id)
        assert preview is not None
        assert preview.state == "committed"
    finally:
        ledger.close()


def test_the_long_resolved_effect_is_one_no_declaration_could_spell() -> None:
    """The first row's premise: its effect is over 256 characters, which a declaration
    refuses (the check that wrongly denied it)."""
    [effect] = write("crm:org/{first}/contact/{second}").resolve_all(
        {"first": ORG, "second": CONTACT}
    )
    assert len(str(effect)) > 256
    with pytest.raises(ValueError, match="1-256 characters"):
        Effect.parse(str(effect))


@pytest.mark.parametrize("how", ["resume", "batch"])
async def test_a_write_whose_effects_do_not_read_back_is_neither_denied_nor_sent(
    world: BatchWorld, tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """Effects another version wrote, which this one cannot read: judging them would be a
    guess, and so would denying them. The write waits (approved, not sent), the model is
    told it cannot be committed now, and the operator's log says which, once. In a batch only
    that item waits: the others, approved with it, are committed."""
    session = world.session()
    if how == "batch":
        batch = await world.propose(session, ["inv_21", "inv_22"])
        world.approve_batch(batch)
        target, items = batch.id, list(batch.items)
    else:
        target = await world.pause(session, "inv_3")
        world.approve(target)
        items = [target]
    odd = items[0]
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute(
            "UPDATE previews SET effects = ? WHERE id = ?",
            (json.dumps(["write(billing:refund/{invoice_id})", "spend(1200 USD)"]), odd),
        )

    with caplog.at_level(logging.WARNING, logger="airlock.harness"):
        answer = await session.resume(target)
        await session.settle_writes()
        again = await session.resume(target)

    for told in (answer, again):
        said = body(told)
        assert (told.code, said["retryable"]) == ("conflict", False), told.content
        assert "cannot be committed now" in said["message"]
        assert "do not retry" in said["message"].lower()
    assert world.system.sends() == len(items) - 1
    assert world.states(items) == ["approved"] + ["committed"] * (len(items) - 1)
    if how == "resume":
        assert [p.preview_id for p in session.pending()] == [target]
    warned = [r.getMessage() for r in caplog.records if odd in r.getMessage()]
    assert len(warned) == 1, warned
    assert "read back" in warned[0]
