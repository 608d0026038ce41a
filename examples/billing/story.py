"""The demo's story, end to end against real parts: the billing service on loopback, a
Docker sandbox, the SQLite ledger and audit log, and a replayed model.

1. The model runs one program that reads every invoice of its tenant through the bridge,
   returns only the ones paid twice, and *proposes* a refund of each duplicate payment
   (``tools.propose.billing_refund_create``): the host prepares each refund as a direct call
   would, its amount computed from the invoice record, and nothing is sent. The program's
   result says that its proposals wait as one batch.
2. A person approves the whole batch with its one fingerprint (``airlock approvals approve
   pb_... --fingerprint F``); the session commits each refund once, with its own idempotency
   key and receipt.
3. One refund's answer is lost after the service committed it: that item is ``unknown``; the
   retry sends the same key and gets the same refund back. The service holds one refund per
   duplicate, exactly.
4. The same reads as direct calls, to measure what they would have put into the context.

:func:`run_story` returns a :class:`DemoReport`; a :class:`Narrator` sees each step as it
happens (the ``airlock demo`` command prints them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import anyio

from airlock.frontends import ContextBytes, ReplayModel, Transcript
from airlock.harness import Budget, Harness, ModelResult, Session
from airlock.inventory import (
    ExercisedTool,
    exercised,
    load_policy_document,
    run_effects,
    subject_inventory,
)
from airlock.policies import AirlockError
from airlock.sandbox import DockerBackend
from airlock.tools import AuditLog, Credential, SQLiteAuditStore, SQLiteLedgerStore
from examples.billing import DEMO_POLICY, BillingServer, build_billing_registry, serve_billing

__all__ = [
    "DEMO_REPLAY",
    "BatchStep",
    "DemoError",
    "DemoReport",
    "Narrator",
    "RefundStep",
    "run_story",
]

DEMO_REPLAY: Final = Path(__file__).with_name("demo_replay.json")
DEMO_USER: Final = "alice"
APPROVER: Final = "demo-operator"
# The direct-call comparison must not be cut short by the default per-result cap: it
# measures what those calls would return, so it gets room for all of it.
_DIRECT_BUDGET: Final = Budget(calls=1_000, bytes=50_000_000, result_bytes=5_000_000)


class DemoError(AirlockError):
    """A step of the demo did not do what the story says; the message says which."""

    code = "demo_failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class RefundStep:
    """One refund of the batch, from the program's proposal to the receipt."""

    invoice_id: str
    preview_id: str
    fingerprint: str
    summary: str
    attempts: tuple[str, ...]
    """Where the item stood after each commit of the batch, in order (``unknown`` after a
    lost answer, then ``committed``...)."""
    receipt: dict[str, Any]
    service_refunds: int
    """Refunds the billing service holds for the invoice afterwards."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchStep:
    """The batch of refunds the program proposed, its approval and its commits."""

    batch_id: str
    fingerprint: str
    proposal: dict[str, Any]
    """The note the model saw about the batch (count, total per currency, ids)."""
    commits: tuple[ModelResult, ...]
    """What each commit of the batch answered the model, in order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoReport:
    """Everything the demo did and measured."""

    run_id: str
    scanned: int
    duplicates: tuple[dict[str, Any], ...]
    code_calls: int
    """Tool calls the program made through the bridge (from the audit log)."""
    code_path: ContextBytes
    direct_path: ContextBytes
    refunds: tuple[RefundStep, ...]
    batch: BatchStep
    effects: tuple[ExercisedTool, ...]
    audit_db: Path
    ledger_db: Path
    seconds: float

    @property
    def saved_percent(self) -> float:
        """How many fewer context bytes the program cost than the direct calls."""
        return 100.0 * (1 - self.code_path.total / self.direct_path.total)


class Narrator(Protocol):
    """Sees the story as it happens."""

    @property
    def columns(self) -> int:
        """How wide a step's text may be (the command line's output is made to fit it)."""

    def message(self, message: dict[str, Any]) -> None:
        """A conversation message (the model's turn, or the answers to its calls)."""

    def step(self, title: str, text: str) -> None:
        """Something the application or a person did between turns."""

    def attempt(self, label: str, result: ModelResult) -> None:
        """What a commit attempt answered."""


def run_story(
    home: Path,
    *,
    image: str,
    narrator: Narrator,
    replay: Path = DEMO_REPLAY,
    billing: BillingServer | None = None,
) -> DemoReport:
    """Play the demo under ``home`` (a new directory per run for the ledger and audit log),
    against ``billing`` when given (freshly seeded, tests inspect it), else a service of its
    own for the length of the run.

    Raises:
        DemoError: a step went differently than the story says.
        SandboxError: the Docker engine or the image is unavailable.
    """
    began = time.perf_counter()
    run_dir = home / "demo" / ("run_demo_" + uuid.uuid4().hex[:10])
    run_dir.mkdir(parents=True, exist_ok=True)
    audit_store = SQLiteAuditStore(run_dir / "audit.db")
    ledger = SQLiteLedgerStore(run_dir / "ledger.db")
    try:
        with ExitStack() as stack:
            service = billing or stack.enter_context(serve_billing())
            return anyio.run(
                _play, service, audit_store, ledger, run_dir, image, narrator, replay, began
            )
    finally:
        ledger.close()
        audit_store.close()


async def _play(
    billing: BillingServer,
    audit_store: SQLiteAuditStore,
    ledger: SQLiteLedgerStore,
    run_dir: Path,
    image: str,
    narrator: Narrator,
    replay_path: Path,
    began: float,
) -> DemoReport:
    credentials = {
        tenant: Credential.from_value(token, name=f"BILLING_TOKEN_{tenant.upper()}")
        for tenant, token in billing.tokens.items()
    }
    audit = AuditLog(audit_store)
    registry = build_billing_registry(billing.base_url, credentials, audit=audit)
    document = load_policy_document(DEMO_POLICY)
    subject = document.principal(DEMO_USER)
    replay = ReplayModel.load(replay_path)
    refunds: list[RefundStep] = []
    batches: list[BatchStep] = []

    async with DockerBackend(image=image, pool_size=1) as backend:
        harness = Harness(registry, document.policy, backend, ledger)
        session = harness.session(subject.principal, run_id=run_dir.name)

        async def show(message: dict[str, Any]) -> None:
            narrator.message(message)

        async def after_turn(index: int, answers: list[dict[str, Any]]) -> None:
            for answer in answers:
                body = _json(answer)
                proposal = body.get("proposals") if isinstance(body, dict) else None
                if isinstance(proposal, dict) and proposal.get("status") == "needs_approval":
                    step, items = await _approve_and_commit(
                        session, billing, ledger, proposal, narrator
                    )
                    batches.append(step)
                    refunds.extend(items)

        transcript = await replay.play(session, after_turn=after_turn, on_message=show)
        scan = _scan_result(transcript)
        code_path = transcript.context(upto="toolu_scan")
        if len(batches) != 1:
            raise DemoError(f"the program's proposals came as {len(batches)} batches, not one")
        direct_path = await _direct_calls(
            harness, session, [d["invoice_id"] for d in scan["duplicates"]], narrator
        )

    audit.flush()
    events = audit_store.query(run_id=session.run_id)
    inventory = subject_inventory(registry, subject)
    effects = run_effects(events, inventory)
    for found in effects:
        if found.outside:
            raise DemoError(f"{found.tool} exercised effects outside its reach: {found.outside}")
    return DemoReport(
        run_id=session.run_id,
        scanned=int(scan["scanned"]),
        duplicates=tuple(scan["duplicates"]),
        code_calls=sum(1 for e in exercised(events) if e.caller == "code"),
        code_path=code_path,
        direct_path=direct_path,
        refunds=tuple(refunds),
        batch=batches[0],
        effects=tuple(effects),
        audit_db=run_dir / "audit.db",
        ledger_db=run_dir / "ledger.db",
        seconds=time.perf_counter() - began,
    )


async def _approve_and_commit(
    session: Session,
    billing: BillingServer,
    ledger: SQLiteLedgerStore,
    proposal: dict[str, Any],
    narrator: Narrator,
) -> tuple[BatchStep, list[RefundStep]]:
    """A person approves the batch with the CLI and its one fingerprint; the session commits
    it, the service's answer to one refund is dropped after it committed, and the retry
    settles that one with the same key."""
    batch_id, fingerprint = str(proposal["batch_id"]), str(proposal["fingerprint"])
    batch = ledger.batch(batch_id)
    if batch is None:
        raise DemoError(f"the proposed batch {batch_id} is not in the ledger")
    command = [
        "airlock", "approvals", "approve", batch_id,
        "--ledger", str(ledger.path), "--fingerprint", fingerprint, "--as", APPROVER,
    ]  # fmt: skip
    output = _airlock_cli(command[1:], columns=narrator.columns)
    narrator.step("a person approves the whole batch", "$ " + " ".join(command) + "\n" + output)
    billing.faults.drop_after_commit()
    narrator.step(
        "the network loses an answer",
        "the service will commit one refund and then drop the connection",
    )
    commits = [await session.resume(batch_id)]
    narrator.attempt("commit the batch", commits[-1])
    states = [_states(ledger, batch.items)]
    if "unknown" not in states[-1].values():
        raise DemoError("the lost answer did not leave its refund unknown")
    commits.append(await session.resume(batch_id))  # the same key again: settles it
    narrator.attempt("retry", commits[-1])
    states.append(_states(ledger, batch.items))
    commits.append(await session.resume(batch_id))  # asked again: the same receipts
    narrator.attempt("asked again", commits[-1])
    states.append(_states(ledger, batch.items))
    if commits[-2].content != commits[-1].content or set(states[-1].values()) != {"committed"}:
        raise DemoError("the batch did not settle on one receipt per refund")
    steps = []
    for preview_id in batch.items:
        preview = ledger.preview(preview_id)
        receipt = ledger.receipt(preview.key) if preview is not None else None
        if preview is None or receipt is None:
            raise DemoError(f"the refund {preview_id} has no receipt")
        invoice_id = str(preview.effect["invoice_id"])
        stored = billing.store.refunds(preview.principal.tenant_id, invoice_id=invoice_id)
        if len(stored) != 1 or stored[0]["id"] != receipt.data["id"]:
            raise DemoError(f"the service holds {len(stored)} refunds of {invoice_id}, not one")
        steps.append(
            RefundStep(
                invoice_id=invoice_id,
                preview_id=preview_id,
                fingerprint=preview.fingerprint,
                summary=preview.summary,
                attempts=tuple(s[preview_id] for s in states),
                receipt={"receipt": dict(receipt.data)},
                service_refunds=len(stored),
            )
        )
    step = BatchStep(
        batch_id=batch_id, fingerprint=fingerprint, proposal=proposal, commits=tuple(commits)
    )
    return step, steps


def _states(ledger: SQLiteLedgerStore, items: Sequence[str]) -> dict[str, str]:
    """Where each preview of a batch stands in the ledger."""
    found = {i: ledger.preview(i) for i in items}
    return {i: p.state if p is not None else "missing" for i, p in found.items()}


async def _direct_calls(
    harness: Harness, session: Session, invoice_ids: Sequence[str], narrator: Narrator
) -> ContextBytes:
    """The same reads the program made, as direct calls in a session of their own."""
    listing = {
        "type": "tool_use",
        "id": "toolu_list",
        "name": "billing_invoice_list",
        "input": {"status": "any"},
    }
    reads = [
        {
            "type": "tool_use",
            "id": f"toolu_get_{n}",
            "name": "billing_invoice_get",
            "input": {"invoice_id": invoice_id},
        }
        for n, invoice_id in enumerate(invoice_ids)
    ]
    replay = ReplayModel.model_validate({"turns": [{"content": [listing]}, {"content": reads}]})
    direct = harness.session(
        session.principal, budget=_DIRECT_BUDGET, run_id=session.run_id + "_direct"
    )
    transcript = await replay.play(direct)
    failed = [b for b in transcript.results() if b.get("is_error")]
    if failed:
        raise DemoError(f"a direct call for the comparison failed: {failed[0]['content']}")
    measured = transcript.context()
    narrator.step(
        "for comparison: the same reads as direct calls",
        f"{measured.calls} calls put {measured.total:,} bytes into the context",
    )
    return measured


def _scan_result(transcript: Transcript) -> dict[str, Any]:
    block = transcript.result("toolu_scan")
    if block.get("is_error"):
        raise DemoError(f"the scanning program failed: {block.get('content')}")
    value = _json_text(str(block["content"])).get("value")
    if not isinstance(value, dict) or not isinstance(value.get("duplicates"), list):
        raise DemoError(f"the scanning program returned {value!r}, not its duplicates")
    return value


def _airlock_cli(args: Sequence[str], *, columns: int) -> str:
    """Run the ``airlock`` command line as a person would, in a process of its own, on a
    terminal ``columns`` wide."""
    done = subprocess.run(
        [sys.executable, "-m", "airlock.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"},
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"`airlock {' '.join(args[:2])}` failed: {done.stderr or done.stdout}")
    return done.stdout.strip()


def _json(block: dict[str, Any]) -> Any:
    content = block.get("content")
    return _json_text(content) if isinstance(content, str) else None


def _json_text(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
