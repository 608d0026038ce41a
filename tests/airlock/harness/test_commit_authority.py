"""A paused write is committed only while the session's authority still allows its tool and
the effects prepare resolved: a session resumed with less (a principal whose write scope was
taken away, a narrower grant, a rule that now denies) denies it, sends nothing, and leaves its
ledger step ``denied`` with the reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock import ModelResult, Session
from airlock.policies import Principal
from tests.airlock.harness.batch_world import REFUND, BatchWorld, body
from tests.airlock.session_world import ALICE
from tests.tools.test_proposals import PROPOSING

pytestmark = [
    pytest.mark.anyio,
    # A session that may no longer make the write reaches no tool at all, and is told so.
    pytest.mark.filterwarnings("ignore::airlock.harness.NoToolsWarning"),
]

READER = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read"}))

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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[BatchWorld]:
    w = BatchWorld(tmp_path)
    yield w
    w.close()


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
