"""A session over a proposable refund tool, its ledger and a fake system of record: direct
writes the model pauses, and batches proposed in the session's run as a program would."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from airlock import Budget, Harness, ModelResult, Session
from airlock.policies import Grant, Principal
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import Batch, CallContext, approve_preview
from tests.airlock.session_world import ALICE, policy
from tests.tools.test_proposals import PROPOSING, ProposalWorld

REFUND = "billing_refund_create"
PEEK = ("billing_invoice_peek", {"invoice_id": "inv_1"})
"""A read to call: any call settles the writes approved meanwhile first."""


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


class BatchWorld:
    """One harness process over files in ``root``; the refund rule does ``action``."""

    def __init__(self, root: Path, *, budget: Budget | None = None, action: str = "ask") -> None:
        self.root = root
        self.proposals = ProposalWorld(root)
        self.system = self.proposals.system
        self.ledger = self.proposals.ledger
        self.writes = self.proposals.writes
        self.harness = self.harness_with(action, budget=budget)

    def harness_with(self, action: str, *, budget: Budget | None = None) -> Harness:
        """Another harness on the same tools, ledger and system, with the refund rule doing
        ``action`` (an operator who changed the policy, say)."""
        return Harness(
            self.proposals.registry,
            policy(action),
            ScriptedBackend([]),
            writes=self.writes,
            budget=budget,
            artifacts=self.root / "store",
        )

    def session(self, principal: Principal = ALICE, grant: Grant = PROPOSING) -> Session:
        return self.harness.session(principal, grant)

    async def pause(self, session: Session, invoice: str) -> str:
        """A direct refund the model asked for; its preview id (it waits for a person)."""
        result = await session.call(REFUND, {"invoice_id": invoice, "reason": "duplicate"})
        assert result.code == "needs_approval", result.content
        return str(body(result)["preview_id"])

    def approve(self, preview_id: str) -> None:
        approve_preview(self.ledger, preview_id, approver="bob", now=time.time())

    async def propose(self, session: Session, invoices: list[str]) -> Batch:
        """Refunds of ``invoices`` proposed in the session's run as one program's batch, held
        by the session (as its program's result would have held it)."""
        ctx = CallContext(
            principal=session.principal,
            grant=session.grant,
            run_id=session.run_id,
            caller="code",
            approvals=session.approvals,
        )
        previews = [
            await self.writes.propose_from_code(
                REFUND, {"invoice_id": invoice, "reason": "duplicate"}, ctx
            )
            for invoice in invoices
        ]
        batch = self.writes.store_batch(previews)
        # As the program's result holds it (restore_pending would also load its items as
        # direct writes of the run).
        session._batches.hold(batch, previews)
        return batch

    def approve_batch(self, batch: Batch) -> None:
        self.writes.approve_batch(batch.id, approver="bob", fingerprint=batch.fingerprint)

    def states(self, preview_ids: list[str] | tuple[str, ...]) -> list[str]:
        found = [self.ledger.preview(p) for p in preview_ids]
        return [p.state if p is not None else "missing" for p in found]

    def close(self) -> None:
        self.proposals.close()
