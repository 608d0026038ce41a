"""Sending a claimed step once, and recording how it ended: receipt, refusal or unknown.

A step is *claimed* (``approved``/``unknown`` → ``sending``) by a compare-and-set in the
ledger before anything is sent, with this process as its owner and a lease. The send runs
under the tool's timeout (a sync commit's thread that runs on is counted against the tool,
never refused: its claim checked the bound). A receipt is stored in the same transaction
that marks the step ``committed``, once it is found to be a receipt of the approved effect;
a refusal of its first send (a ``ToolError`` with outcome ``error``) marks it ``failed``; a
sync commit that never started (refused as its thread was to start, or its timeout or a
cancellation passed while it waited for one) gives its claim back, so the step is as it was
(``upstream``, retryable: :mod:`airlock.tools._not_sent`); any other ending (timeout, lost
reply, unexpected error, unusable receipt, a refused *resend*, a ledger that fails to store
the receipt or to take the claim back) is ``ambiguous_write`` and marks it ``unknown`` if the
ledger lets it; what is recorded of it holds no ``Secret()`` field.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any

import anyio

from airlock.tools._audit import AdmissionDecision, CallOutcome, Stage
from airlock.tools._audit_log import AuditLog
from airlock.tools._egress import CallCheck, checked_invoke, reach_of
from airlock.tools._errors import (
    AmbiguousWriteError,
    ConflictError,
    ReceiptMismatchError,
    ToolError,
    UpstreamError,
)
from airlock.tools._in_flight import in_flight_here, mark_mismatched
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._not_sent import given_back
from airlock.tools._preview import Preview, Receipt, ResolvedBy, StepState
from airlock.tools._receipt_check import MISMATCH_ERROR, MISMATCH_HOW, receipt_mismatch
from airlock.tools._shaping import shape_result
from airlock.tools._spec import ToolSpec
from airlock.tools._step_effect import contract_of, effect_of
from airlock.tools._step_events import approver_of, step_event
from airlock.tools._step_owner import owner_token
from airlock.tools._step_text import (
    failure_detail,
    kept_text,
    secret_values,
    storable,
    without_secrets,
)
from airlock.tools._takeover import settle_taken_over
from airlock.tools._worker_threads import NotSent, WorkerThread
from airlock.tools._write_contract import WriteContract

__all__ = ["Sender"]

_log = logging.getLogger("airlock.writes")


class Sender:
    """Claims, sends and settles steps on one ledger; records non-final audit events."""

    def __init__(
        self,
        ledger: LedgerStore,
        audit_log: AuditLog,
        *,
        clock: Callable[[], float],
        lease_grace: float,
    ) -> None:
        self.ledger = ledger
        self.audit_log = audit_log
        self.clock = clock
        self.lease_grace = lease_grace

    def claim(
        self, spec: ToolSpec, preview: Preview, *, how: str, now: float, consume: bool = False
    ) -> Preview:
        """Move ``preview`` to ``sending`` for this process, if nobody changed it meanwhile.

        Raises:
            StepStateError: another process claimed or resolved it first.
        """
        return self.ledger.transition(
            preview.id,
            expect={preview.state},
            expect_attempts=preview.attempts,
            to="sending",
            at=now,
            actor=owner_token(),
            how=how,
            consume_approval=consume,
            owner=owner_token(),
            lease_until=now + spec.timeout + self.lease_grace,
        )

    async def send(
        self, spec: ToolSpec, claimed: Preview, *, resolved_by: ResolvedBy, actor: str
    ) -> Receipt:
        """Send the claimed step's effect once with its key, and settle the step.

        Raises:
            AmbiguousWriteError: no definite answer (timeout, lost reply, unexpected error),
                or the system refused a resend (an earlier send may have acted); the step
                is now ``unknown``.
            UpstreamError: a sync commit never started; the step is as it was before its
                claim (outcome ``unknown`` when that is ``unknown``).
            ConflictError: the answer is not a receipt of the approved effect (outcome
                ``unknown``; see :meth:`store_receipt`).
            ToolError: the system refused the first send (outcome ``error``); the step is
                now ``failed``.
        """
        with in_flight_here(claimed.id):  # reconcile in this process leaves it alone meanwhile
            return await self._send(spec, claimed, resolved_by=resolved_by, actor=actor)

    async def _send(
        self, spec: ToolSpec, claimed: Preview, *, resolved_by: ResolvedBy, actor: str
    ) -> Receipt:
        contract = contract_of(spec)
        secrets = secret_values(contract, claimed.effect)
        try:
            effect = effect_of(contract, claimed)
        except ValueError as exc:  # a pydantic ValidationError: the model changed since
            raise self.unbuildable(claimed, contract, resolved_by, exc) from None
        started = time.perf_counter()
        # The commit may reach the tool's destinations and write the files its effects name.
        check = reach_of(spec).check(
            phase="commit", tenant=claimed.principal.tenant_id, effects=claimed.effects
        )
        thread = WorkerThread(spec, claimed=True)
        commit = thread.calling(contract.commit)
        try:
            with anyio.fail_after(spec.timeout):
                raw = await checked_invoke(check, commit, effect, claimed.key)
        except NotSent as exc:  # its code never ran: the claim is given back, if it can be
            unsent = given_back(self, claimed, thread, exc)
            raise unsent or self.ambiguous(claimed, str(exc)) from None
        except ToolError as exc:
            self.refuse_undeclared(claimed, check, exc)
            if exc.outcome == "error" and resolved_by != "send":
                # A refused resend (409 while the first request with the key is in progress,
                # 429) proves only that this resend did nothing: the first may have acted.
                why = f"resend refused: {exc.code}: {exc.detail or exc.message}"
                message = (
                    f"the change may have happened: an earlier send had no definite answer, "
                    f"and the system refused to take it again with the same key "
                    f"({exc.code}); commit again later (same key) or wait for reconcile"
                )
                raise self.ambiguous(claimed, why, secrets=secrets, message=message) from exc
            if exc.outcome == "error":  # the system refused the only send: nothing happened
                self.mark(claimed, "failed", how=f"refused: {exc.code}", error=exc.code)
                refused = f"{actor}: refused"
                self.audit(claimed, "execute", "allow", claimed.rule, "error", exc.code, refused)
                raise
            why = f"{exc.code}: {exc.detail or exc.message}"
            raise self.ambiguous(claimed, why, secrets=secrets) from exc
        except TimeoutError as exc:
            self.refuse_undeclared(claimed, check, exc)
            unsent = given_back(self, claimed, thread, exc)  # (if it waited for a thread)
            raise unsent or self.ambiguous(claimed, f"no answer within {spec.timeout:g} s") from exc
        except Exception as exc:
            self.refuse_undeclared(claimed, check, exc)
            why = f"{type(exc).__name__}: {exc}"
            raise self.ambiguous(claimed, why, secrets=secrets) from exc
        except BaseException as exc:  # cancelled or interrupted: record what is known
            if given_back(self, claimed, thread, exc) is None:  # (it may have run)
                self.mark_unknown(claimed, how="interrupted during send", error="interrupted")
            raise
        self.refuse_undeclared(claimed, check, None)  # caught by commit: it fails all the same
        receipt = self.store_receipt(spec, claimed, raw, resolved_by=resolved_by, actor=actor)
        _log.debug("committed %s in %.1f ms", claimed.id, (time.perf_counter() - started) * 1000)
        return receipt

    def store_receipt(
        self, spec: ToolSpec, claimed: Preview, raw: Any, *, resolved_by: ResolvedBy, actor: str
    ) -> Receipt:
        """Store the receipt under the key and mark the step committed, in one transaction.

        Raises:
            AmbiguousWriteError: the answer does not fit the receipt model, or the ledger
                failed to store it (step ``unknown`` when the ledger lets it be marked, else
                still ``sending`` until its lease runs out).
            ConflictError: another process took the step over and stored no receipt; or
                (outcome ``unknown``) the answer is not a receipt of the approved effect:
                the step is ``unknown``, for an operator to look at the system of record.
        """
        contract = spec.write  # None for an approved read: its result is no one's receipt
        secrets = () if contract is None else secret_values(contract, claimed.effect)
        try:
            data = shape_result(spec.output_model, raw, max_bytes=spec.max_result_bytes)
        except ToolError as exc:  # the system acted but its answer is unusable: keep it open
            why = f"unusable receipt: {exc.detail or exc.code}"
            raise self.ambiguous(claimed, why, secrets=secrets) from exc
        except Exception as exc:
            # An answer that validates but cannot be written as JSON (text holding a lone
            # surrogate: a JavaScript service cut a string inside a pair) is as unusable.
            why = f"unusable receipt: {type(exc).__name__}: {exc}"
            raise self.ambiguous(claimed, why, secrets=secrets) from exc
        mismatch = None if contract is None else receipt_mismatch(contract, claimed.effect, data)
        if mismatch is not None:
            raise self.mismatched(claimed, without_secrets(mismatch, secrets))
        now = self.clock()
        receipt = Receipt(
            key=claimed.key,
            preview_id=claimed.id,
            tool=claimed.tool,
            data=data,
            stored_at=now,
            resolved_by=resolved_by,
        )
        try:
            self.ledger.transition(
                claimed.id,
                expect={"sending"},
                expect_attempts=claimed.attempts,
                to="committed",
                at=now,
                actor=owner_token(),
                how={"send": "sent", "resend": "resent with the same key", "query": "queried"}[
                    resolved_by
                ],
                receipt=receipt,
            )
        except StepStateError as exc:
            # Another process took the step over meanwhile (our lease ran out, as its clock
            # saw it): its receipt stands, else ours, checked, is stored now.
            taken = self.taken_over(claimed, exc, receipt)
            if taken.replayed:
                return taken
        except Exception as exc:
            # The system acted and the ledger did not record it (locked, unreachable, ...):
            # never "nothing was written". Commit again or reconcile, with the same key.
            why = f"the receipt could not be stored: {type(exc).__name__}: {exc}"
            raise self.ambiguous(claimed, why, secrets=secrets) from exc
        done = f"{actor}: committed ({resolved_by})"
        self.audit(claimed, "done", "allow", claimed.rule, "ok", None, done)
        return receipt

    def taken_over(self, claimed: Preview, exc: StepStateError, receipt: Receipt) -> Receipt:
        """Settle ``claimed``, taken over by another process while this one was sending, with
        ``receipt``, checked against its approved effect (:func:`settle_taken_over`): the
        other process's receipt (replayed), else this one, stored now.

        Raises:
            ConflictError: the step ended otherwise and holds no receipt.
            AmbiguousWriteError: the ledger could not be read or written.
        """
        try:
            settled = settle_taken_over(
                self.ledger, claimed, exc.preview, receipt, actor=owner_token()
            )
        except Exception as error:
            why = f"the receipt could not be stored: {type(error).__name__}: {error}"
            raise self.ambiguous(claimed, why) from error
        if settled is None:
            raise ConflictError(
                f"preview {claimed.id!r} was taken over while sending; reconcile it",
                outcome="unknown",
                detail=str(exc),
            )
        return settled

    def refuse_undeclared(
        self, claimed: Preview, check: CallCheck, cause: BaseException | None
    ) -> None:
        """If the tool's code reached what it does not declare, mark the step ``unknown``
        (it may have acted before it was stopped: reconcile asks the system of record),
        record the refusal, and raise ``denied`` with outcome ``unknown``.

        Raises:
            DeniedError: the runtime check refused something during this step.
        """
        denial = check.denial(outcome="unknown")
        if denial is None:
            return
        first = check.violations[0]
        self.mark_unknown(
            claimed, how=f"stopped by the runtime check: {first.action}", error=first.rule
        )
        self.audit(claimed, "execute", "deny", first.rule, "unknown", "denied", denial.detail)
        raise denial from cause

    def unbuildable(
        self, claimed: Preview, contract: WriteContract, resolved_by: ResolvedBy, exc: Exception
    ) -> ToolError:
        """The error of a step whose stored effect no longer builds its effect model, and
        the step marked: ``failed`` when nothing was ever sent, else ``unknown``."""
        why = f"its stored effect no longer fits {contract.effect_model.__name__}"
        if resolved_by != "send":  # an earlier send may have acted
            return self.ambiguous(claimed, why)
        self.mark(claimed, "failed", how=f"not sent: {why}", error="upstream")
        self.audit(claimed, "execute", "allow", claimed.rule, "error", "upstream", why)
        # Without the effect's Secret() values: a validation error's text quotes its inputs.
        said = failure_detail(exc, secret_values(contract, claimed.effect))
        return UpstreamError(
            "the change could not be sent; nothing was changed", detail=f"{why}: {said}"[:500]
        )

    def ambiguous(
        self,
        claimed: Preview,
        why: str,
        *,
        secrets: Collection[str] = (),
        message: str | None = None,
    ) -> AmbiguousWriteError:
        """Mark the step ``unknown`` if the ledger lets us, and build the error that says
        so (it must reach the caller even when the ledger fails: the system may have acted).
        ``why`` (an exception's text, often) is recorded without ``secrets``, the values of
        the step's ``Secret()`` fields, and with credentials redacted, before it is cut (a cut
        credential would no longer be recognized where the text is stored).
        """
        why = storable(kept_text(why, secrets))[:300]
        self.mark_unknown(claimed, how=f"no definite answer: {why}", error=why[:200])
        self.audit(claimed, "execute", "allow", claimed.rule, "unknown", "ambiguous_write", why)
        return AmbiguousWriteError(
            message
            or "the change may have happened; commit again (same key) or wait for reconcile",
            idempotency_key=claimed.key,
            detail=why,
        )

    def mismatched(self, claimed: Preview, why: str) -> ReceiptMismatchError:
        """Mark the step ``unknown`` (its key answers for another change: never ``committed``
        on it, nor ``failed``, which would free the key) and build the error; never resent."""
        mark_mismatched(claimed.id)  # (should the ledger refuse the mark)
        self.mark_unknown(
            claimed,
            how=f"{MISMATCH_HOW}, look at the system of record: {why}",
            error=f"{MISMATCH_ERROR}{why}"[:200],
        )
        self.audit(claimed, "execute", "allow", claimed.rule, "unknown", "conflict", why)
        return ReceiptMismatchError(detail=why)

    def mark_unknown(self, claimed: Preview, *, how: str, error: str) -> None:
        """Mark the step ``unknown`` if the ledger lets us. If not, it stays ``sending`` until
        a commit retry or reconcile takes it over, once its sender is seen gone or stuck
        (:func:`~airlock.tools._reconcile.needs_resolving`); what the caller is told stands."""
        try:
            self.mark(claimed, "unknown", how=how, error=error)
        except Exception:
            _log.warning("could not mark %s unknown", claimed.id, exc_info=True)

    def mark(self, claimed: Preview, to: StepState, *, how: str, error: str | None) -> Preview:
        """Settle a claimed step as ``to``; if someone settled it first, theirs stands."""
        try:
            return self.ledger.transition(
                claimed.id,
                expect={"sending"},
                expect_attempts=claimed.attempts,
                to=to,
                at=self.clock(),
                actor=owner_token(),
                how=how,
                error=error,
            )
        except StepStateError as exc:  # someone resolved it meanwhile; theirs stands
            return exc.preview

    def audit(
        self,
        preview: Preview,
        stage: Stage,
        decision: AdmissionDecision,
        rule: str,
        outcome: CallOutcome,
        code: str | None,
        detail: str | None,
        *,
        approver: str | None = None,
    ) -> None:
        """Record a non-final audit event for a step of ``preview``; ``approver`` names who
        approved or denied it (a person, or ``policy:RULE``). A send's events (``execute``,
        ``done``) name the approver the ledger holds for it, wherever the approval was given
        (``airlock approvals approve`` in another process, say)."""
        if approver is None and stage in ("execute", "done"):
            approver = self._approver(preview.id)
        self.audit_log.record(
            step_event(
                preview,
                stage,
                decision,
                rule,
                outcome,
                code,
                detail,
                approver=approver,
                ts=self.clock(),
            )
        )

    def _approver(self, preview_id: str) -> str | None:
        try:
            approval = self.ledger.approval(preview_id)
        except Exception:  # the send's own outcome matters more than naming its approver
            _log.warning("could not read the approval of %s", preview_id, exc_info=True)
            return None
        return None if approval is None else approver_of(approval)
