"""However a program ends, what it proposed is held as one batch the model is told of, and
the audit log has one record of the program with its code: when it broke the bridge
protocol, when the host's artifact store could not take its files, when an input went away
before it ran, and when the ledger could not hold its proposals as a batch (they are stored
as previews all the same, so the model is never told that nothing was written)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock import Harness, ModelResult, Session
from airlock.bridge import ToolSession
from airlock.harness._execute_code import kept_notes, program_result
from airlock.policies import SandboxProfile
from airlock.sandbox import (
    ArtifactStoreFailed,
    InputRefused,
    RunResult,
    SandboxFailure,
    SkippedArtifact,
)
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import LEDGER_ERRORS
from airlock.tools._errors import LedgerLockedError
from tests.airlock.session_world import ALICE, policy
from tests.tools.test_proposals import PROPOSING, ProposalWorld

pytestmark = pytest.mark.anyio

REFUND = "billing_refund_create"
Ending = Callable[[Path | None], RunResult]


class EndingBackend(ScriptedBackend):
    """Proposes a refund of each of ``invoices`` as a program would, then ends by ``end``
    (which returns the run's result or raises what the Docker backend raises)."""

    def __init__(
        self,
        end: Ending,
        *,
        invoices: tuple[str, ...],
        then: Callable[[ToolSession], None] = lambda _tools: None,
    ) -> None:
        super().__init__([])
        self.end, self.invoices, self.then = end, invoices, then
        self.proposed: list[str] = []

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
        inputs: Any = None,
        artifacts: Path | None = None,
    ) -> RunResult:
        assert tools is not None
        for order, invoice in enumerate(self.invoices, 1):
            ctx = tools.context(f"{tools.call_prefix}:{order}", time.monotonic() + 30)
            args = {"invoice_id": invoice, "reason": "duplicate"}
            self.proposed.append(
                str((await tools.propose(REFUND, args, ctx, order=order))["preview_id"])
            )
        self.then(tools)
        return self.end(artifacts)


def _protocol_error(artifacts: Path | None) -> RunResult:
    return ok_result().model_copy(update={"status": "protocol_error", "exit_status": 1})


def _store_failed(artifacts: Path | None) -> RunResult:
    assert artifacts is not None
    raise ArtifactStoreFailed(artifacts, OSError(28, "No space left on device"))


def _input_gone(artifacts: Path | None) -> RunResult:
    raise InputRefused(
        "input 'sales.csv': /srv/private/sales.csv is missing", name="sales.csv", reason="missing"
    )


ENDINGS: list[tuple[str, Ending, tuple[str, ...], str]] = [
    # case, how the run ends, what the program proposed, the answer's code
    ("protocol_error", _protocol_error, ("inv_1", "inv_2"), "protocol_error"),
    ("store_failed", _store_failed, ("inv_1", "inv_2"), "sandbox_unavailable"),
    ("store_failed_nothing_proposed", _store_failed, (), "sandbox_unavailable"),
    ("input_gone", _input_gone, (), "input_refused"),
]


@pytest.fixture
def proposals(tmp_path: Path) -> Iterator[ProposalWorld]:
    world = ProposalWorld(tmp_path)
    yield world
    world.close()


def _session(world: ProposalWorld, backend: ScriptedBackend, root: Path) -> tuple[Harness, Session]:
    harness = Harness(
        world.registry, policy(), backend, writes=world.writes, artifacts=root / "store"
    )
    return harness, harness.session(ALICE, grant=PROPOSING)


def _programs(harness: Harness, session: Session) -> list[tuple[str | None, str]]:
    return [
        (e.code, e.detail)
        for e in harness.audit.events(run_id=session.run_id)
        if e.tool == "execute_code" and e.stage == "done"
    ]


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


@pytest.mark.parametrize(("case", "end", "invoices", "code"), ENDINGS, ids=[e[0] for e in ENDINGS])
async def test_however_a_program_ends_its_proposals_wait_and_it_is_audited(
    tmp_path: Path,
    proposals: ProposalWorld,
    case: str,
    end: Ending,
    invoices: tuple[str, ...],
    code: str,
) -> None:
    harness, session = _session(proposals, EndingBackend(end, invoices=invoices), tmp_path)
    answer = await session.call("execute_code", {"code": "..."})
    said = body(answer)
    assert answer.code == code
    waiting = session.pending_batches()
    if invoices:
        [batch_id] = waiting
        note = said["proposals"]
        assert (note["status"], note["batch_id"], note["count"]) == (
            "needs_approval",
            batch_id,
            len(invoices),
        )
        assert len(note["preview_ids"]) == len(invoices)
    else:
        assert waiting == []
        assert "proposals" not in said
    [(recorded, _)] = _programs(harness, session)
    assert recorded == code
    assert "/srv/private" not in answer.content


@pytest.mark.parametrize("code", sorted(LEDGER_ERRORS))
async def test_a_ledger_that_cannot_hold_the_batch_says_what_was_stored(
    tmp_path: Path, proposals: ProposalWorld, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    def fail(batch: object) -> None:
        raise LEDGER_ERRORS[code]("/srv/secret/ledger.db is gone", path="/srv/secret/ledger.db")

    monkeypatch.setattr(proposals.ledger, "add_batch", fail)
    backend = EndingBackend(lambda artifacts: ok_result("done"), invoices=("inv_1", "inv_2"))
    harness, session = _session(proposals, backend, tmp_path)
    answer = await session.call("execute_code", {"code": "..."})
    said = body(answer)
    assert (answer.code, answer.is_error) == (code, True)
    # Running it again proposes the same changes, which each wait already: not retryable.
    assert answer.retryable is False
    assert "nothing was written" not in answer.content
    assert "secret" not in answer.content  # the path is the operator's, in the log
    assert said["value"] == "done"
    note = said["proposals"]
    assert (note["status"], note["count"]) == ("not_held", 2)
    assert proposals.ledger.preview(note["preview_ids"][0]) is not None  # stored previews
    assert session.pending_batches() == []
    [(recorded, _)] = _programs(harness, session)
    assert recorded == code


async def test_a_program_error_keeps_its_code_when_the_batch_cannot_be_held(
    tmp_path: Path, proposals: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(batch: object) -> None:
        raise LEDGER_ERRORS["ledger_locked"]("locked", path="/srv/secret/ledger.db")

    monkeypatch.setattr(proposals.ledger, "add_batch", fail)
    backend = EndingBackend(_protocol_error, invoices=("inv_1",))
    harness, session = _session(proposals, backend, tmp_path)
    answer = await session.call("execute_code", {"code": "..."})
    assert answer.code == "protocol_error"
    assert body(answer)["proposals"]["status"] == "not_held"
    assert [code for code, _ in _programs(harness, session)] == ["protocol_error"]


@pytest.mark.parametrize(("named", "count"), [(1, 1), (20, 20), (20, 50)])
def test_the_model_is_told_how_many_files_were_skipped_not_only_the_first(
    named: int, count: int
) -> None:
    skipped = tuple(
        SkippedArtifact(name=f"link{i}", reason="a symbolic link") for i in range(named)
    )
    run = ok_result().model_copy(
        update={"artifacts_skipped": skipped, "artifacts_skipped_count": count}
    )
    answer = json.loads(program_result(run, stdout_bytes=1024).content)
    assert (len(answer["artifacts_skipped"]), answer["artifacts_skipped_count"]) == (named, count)
    notes = {"proposals": {"batch_id": "pb_1", "count": 1, "preview_ids": ["pv_1"]}}
    for kept in kept_notes(notes, run)[1:]:
        assert kept["artifacts_skipped_count"] == count


def _engine_refused(artifacts: Path | None) -> RunResult:
    raise SandboxFailure("the engine refused the container")


def _locked(*args: object, **kwargs: object) -> None:
    raise LedgerLockedError("database is locked", path="ledger.db")


async def test_a_program_that_ends_in_a_host_failure_still_lets_go_of_what_it_withdrew(
    tmp_path: Path, proposals: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    def withdraw_while_locked(tools: ToolSession) -> None:
        monkeypatch.setattr(proposals.ledger, "transition", _locked)  # (until the test says)
        tools.withdraw(1)

    backend = EndingBackend(_engine_refused, invoices=("inv_1",), then=withdraw_while_locked)
    _, session = _session(proposals, backend, tmp_path)
    transition = proposals.ledger.transition
    answer = await session.call("execute_code", {"code": "..."})
    assert answer.code == "sandbox_unavailable"
    (withdrawn,) = backend.proposed
    assert proposals.ledger.preview(withdrawn).state == "prepared"  # (the ledger was locked)
    monkeypatch.setattr(proposals.ledger, "transition", transition)  # it is free again
    proposals.writes.settle_denials("pv_another")  # what any commit here does first
    assert proposals.ledger.preview(withdrawn).state == "denied"
