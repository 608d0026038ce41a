"""A claimed send whose code certainly never started: its claim is given back, not left
undecided.

A write's sync ``commit``, reconcile's sync ``lookup`` and an approved read's sync handler run
in a claimed :class:`~airlock.tools._worker_threads.WorkerThread`, after their step was
claimed (``approved``/``unknown`` → ``sending``, an attempt counted, an approval consumed). Two
endings mean the code did not run, nor will: :class:`~airlock.tools._worker_threads.NotSent`
(the tool met its bound of threads running past their calls as the thread was about to start),
and a timeout or a cancellation that passed while the call still waited for a worker thread
(:attr:`~airlock.tools._worker_threads.WorkerThread.never_ran`). Nothing was sent then, so the
step is not undecided: :func:`given_back` undoes the claim in the ledger
(:meth:`~airlock.tools.LedgerStore.release_claim`): an ``approved`` step is approved again with
its approval usable, an ``unknown`` one is unknown again with the attempt taken back. So the
next commit is its first send again (a refusal of it fails the step) or the resend it was.
When the ledger does not take the claim back (settled or taken over meanwhile, or failing),
the caller settles the step as it settles any other ending: that it was claimed is never lost.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from airlock.tools._errors import DeniedError, ToolError, ToolTimeoutError, UpstreamError
from airlock.tools._ledger import ClaimedFrom
from airlock.tools._preview import Preview
from airlock.tools._preview_holders import settle as settle_denials
from airlock.tools._step_owner import owner_token
from airlock.tools._worker_threads import NotSent, WorkerThread

if TYPE_CHECKING:
    from airlock.tools._sender import Sender

__all__ = ["given_back", "release", "unsent_why"]

_log = logging.getLogger("airlock.writes")


def unsent_why(thread: WorkerThread, exc: BaseException) -> str | None:
    """Why the claimed call on ``thread``, which ended with ``exc``, certainly never ran (as
    the ledger records it), or ``None`` when its code may have run."""
    if isinstance(exc, NotSent):
        return str(exc)
    if not thread.never_ran:
        return None
    if isinstance(exc, TimeoutError | ToolTimeoutError):  # (an approved read's: a ToolError)
        return "not sent: its timeout passed while it waited for a worker thread"
    return f"not sent: {type(exc).__name__} while it waited for a worker thread"


def release(
    sender: Sender, claimed: Preview, why: str, *, what: str = "resend", error: str | None = None
) -> Preview | None:
    """Undo the claim of ``claimed``, whose call (a send, or reconcile's ``what``) never ran
    (``why``): back to ``approved`` when it was its first send, else to ``unknown`` (with
    ``error``, by default one that says its earlier send is undecided). The step as it now
    is; ``None`` when the ledger refused (the step was settled or taken over meanwhile) or
    failed: logged, and the caller settles the step as it would have."""
    # Only a step never sent before is claimed with its first attempt, and only from
    # ``approved`` (``unknown`` and ``sending`` follow a send): the ledger checks it again.
    back: ClaimedFrom = "approved" if claimed.attempts == 1 else "unknown"
    if claimed.owner is None:  # (every claim names its owner)
        return None
    undecided = f"earlier send undecided; {what} {why}"
    try:
        return sender.ledger.release_claim(
            claimed.id,
            to=back,
            expect_attempts=claimed.attempts,
            expect_owner=claimed.owner,
            at=sender.clock(),
            actor=owner_token(),
            how=why,
            error=None if back == "approved" else (error or undecided)[:200],
        )
    except Exception:
        _log.warning("could not give back the claim of %s", claimed.id, exc_info=True)
        return None


def _give_back(
    sender: Sender,
    claimed: Preview,
    why: str,
    *,
    read: bool = False,
    quiet: bool = False,
    because: str = "the host was too busy to start it",
) -> ToolError | None:
    """Undo the claim of ``claimed``, whose call never ran (``why``, see :func:`release`),
    record that in the audit log (``execute``, outcome ``error``, code ``upstream``: nothing
    happened), and return the error that tells the caller so (``upstream``, retryable): an
    approved step waits to be committed (``read``: run) again; an ``unknown`` one is still
    undecided (outcome ``unknown``). ``None`` when the ledger did not take the claim back.
    ``quiet``: the call was cancelled or interrupted, which must propagate as it is: an audit
    log that fails then (closed at shutdown) is not raised. ``because`` is why it never ran,
    as the caller is told. A step approved again has the
    withdrawals that waited for its send to end (:func:`withdraw_proposal`) denied now: the
    error is then ``denied``."""
    back = release(sender, claimed, why)
    if back is None:
        return None
    with contextlib.suppress(Exception) if quiet else contextlib.nullcontext():
        sender.audit(claimed, "execute", "allow", claimed.rule, "error", "upstream", why)
    if back.state == "approved":  # a withdrawal that waited for the send to end lands now
        with contextlib.suppress(Exception):
            settle_denials(sender.ledger)
            back = sender.ledger.preview(back.id) or back
    if back.state == "denied":
        return DeniedError(
            f"the change was not sent, and it is denied now ({back.error or 'withdrawn'}); "
            "do not retry it",
            reason="policy",
        )
    if read:  # (a read changes nothing, whatever state it was claimed from)
        message = f"the read did not run: {because}; nothing was fetched, run it again later"
    elif back.state == "approved":
        message = (
            f"the change was not sent: {because}. Nothing was changed and the write is still "
            "approved: commit it again later"
        )
    else:
        message = (
            f"this resend was not sent: {because}. An earlier send may have acted, so the write "
            "is still unknown: commit again later (same key) or wait for reconcile"
        )
    undecided = back.state == "unknown" and not read  # (an earlier send may have acted)
    return UpstreamError(message, outcome="unknown" if undecided else "error", detail=why)


def given_back(
    sender: Sender,
    claimed: Preview,
    thread: WorkerThread,
    exc: BaseException,
    *,
    read: bool = False,
) -> ToolError | None:
    """Give back the claim of ``claimed`` if its call on ``thread``, which ended with ``exc``,
    certainly never ran (:func:`unsent_why`; see :func:`_give_back`): the error to raise (a
    cancellation is raised on as it is); ``None`` when the call may have run, or the ledger
    did not take the claim back."""
    why = unsent_why(thread, exc)
    if why is None:
        return None
    quiet = not isinstance(exc, Exception)
    if isinstance(exc, NotSent):
        return _give_back(sender, claimed, why, read=read, quiet=quiet, because=exc.because)
    return _give_back(sender, claimed, why, read=read, quiet=quiet)
