"""Running a read that a person approved (reconcile ends one a crash interrupted:
:func:`~airlock.tools._reconcile.end_read`).

An approved read is claimed like a commit (``approved`` → ``sending``), run with the
validated arguments its preview holds (sealed values given back from memory), and its shaped
result stored as the receipt in the same transaction that marks the step ``committed``. A
read changes nothing, so one that fails or is interrupted ends ``failed``: asked again, it
gets a new preview. One whose sync handler never started (its tool met its bound of threads
as the thread was about to start, or its timeout or a cancellation passed while it waited for
a worker thread) is ``approved`` again, its approval usable (:mod:`airlock.tools._not_sent`):
the caller is told ``upstream``, to run it again later. One asked for in a run whose time is
used up is refused before its step is claimed (:func:`refuse_spent_run`): it stays approved.
"""

from __future__ import annotations

import contextlib

from airlock.tools._arguments import validate_arguments
from airlock.tools._context import CallContext
from airlock.tools._errors import PreviewExpiredError, ToolError, ToolTimeoutError, UpstreamError
from airlock.tools._not_sent import given_back
from airlock.tools._preview import Preview, Receipt, canonical_json
from airlock.tools._registry import Registry
from airlock.tools._sealed import SecretVault, sealed_fields
from airlock.tools._sender import Sender
from airlock.tools._spec import ToolSpec
from airlock.tools._worker_threads import NotSent, WorkerThread

__all__ = ["refuse_spent_run", "run_claimed_read"]


def refuse_spent_run(ctx: CallContext) -> None:
    """Refuse an approved read asked for in a run with no time left, before its step is
    claimed: its handler could not run (the run's budget bounds it), and its approval stays
    usable for a run that has time.

    Raises:
        ToolTimeoutError: ``ctx``'s run has no time left (outcome ``error``: nothing ran).
    """
    if ctx.remaining() <= 0:
        raise ToolTimeoutError(
            "the run's time budget is used up, so the read did not run; it is still "
            "approved: run it again from a run that has time left",
            seconds=0.0,
            outcome="error",
        )


async def run_claimed_read(
    sender: Sender,
    registry: Registry,
    vault: SecretVault,
    spec: ToolSpec,
    claimed: Preview,
    ctx: CallContext,
) -> Receipt:
    """Run the claimed read once and store its result as the receipt.

    Raises:
        ToolError: the read's own error, ``preview_expired`` when its sealed values are not
            held here; the step is then ``failed``. ``upstream`` (retryable) when its
            handler never started: the step is approved again.
    """
    arguments = vault.unseal(claimed.id, claimed.effect, sealed_fields(spec))
    # Claimed: its caller checked the tool's bound before the claim (claim_for_commit).
    thread = WorkerThread(spec, claimed=True)
    try:
        if arguments is None:
            raise PreviewExpiredError(
                "this call holds a secret that only the process that prepared it had; "
                "call the tool again"
            )
        values = dict(validate_arguments(spec.input_model, canonical_json(arguments)).__dict__)
        raw = await registry.run_approved(spec.name, values, ctx, thread)
    except NotSent as exc:  # the handler never ran: approved again, if the ledger lets it
        unsent = given_back(sender, claimed, thread, exc, read=True)
        if unsent is not None:
            raise unsent from None
        sender.mark(claimed, "failed", how="read not run: upstream", error="upstream")
        sender.audit(claimed, "execute", "allow", claimed.rule, "error", "upstream", str(exc))
        raise UpstreamError(str(exc), outcome="error") from None
    except ToolError as exc:
        # (a timeout that passed while it waited for a worker thread: it never ran either)
        unsent = given_back(sender, claimed, thread, exc, read=True)
        if unsent is not None:
            raise unsent from exc
        sender.mark(claimed, "failed", how=f"read failed: {exc.code}", error=exc.code)
        sender.audit(claimed, "execute", "allow", claimed.rule, exc.outcome, exc.code, exc.detail)
        raise
    except BaseException as exc:
        if given_back(sender, claimed, thread, exc, read=True) is not None:
            raise  # (a cancellation while it waited for a worker thread: approved again)
        # A read changes nothing, so an interrupted one is simply over: ask it again.
        with contextlib.suppress(Exception):
            sender.mark(claimed, "failed", how="read interrupted", error="interrupted")
            sender.audit(
                claimed, "execute", "allow", claimed.rule, "error", None, type(exc).__name__
            )
        raise
    return sender.store_receipt(spec, claimed, raw, resolved_by="send", actor="approved read")
