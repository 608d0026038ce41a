"""Which steps reconciliation must resolve, and how it reports what it did.

A step needs resolving when the system of record may have acted and the ledger holds no
receipt: ``unknown`` (a send timed out or failed without a definite answer), or ``sending``
whose sender is gone: a process on this host that no longer exists (killed between send and
receipt), or, when this host cannot see it run (another host, another PID namespace, another
kernel: this machine before a reboot cannot be told from another machine of this hostname),
one whose lease ran out. A live sender on this host is left alone past its lease too, for as
long again as the lease and at least five minutes (a wall clock that jumped must not take over
a send still waiting for its answer), then taken over (its send ended under the tool's timeout,
and it could not record how); one of this process only while its send runs here
(:mod:`airlock.tools._in_flight`). An approved read
left so changed nothing: it ends ``failed``. A step whose ledger row does not read back is
reported ``unresolved`` and left for a person; one whose row another process holds locked,
or whose answer cannot be kept, is reported ``unresolved`` for a later pass; the others are
resolved all the same. A store that fails as a whole (unreachable, read-only, not a
database, replaced, its disk failed, closed by this process, or an audit store refusing
appends) stops the pass with its error: every step would fail alike.
A query, like a send, runs under the tool's timeout: one that gets no answer leaves its step
``unknown``, and reconcile goes on. A sync query or resend that certainly never started (its
tool met its bound of threads as it was about to start, or its timeout passed while it waited
for a worker thread: :mod:`airlock.tools._not_sent`) gives its claim back: the step is
``unknown`` as before, its attempt taken back, reported ``unresolved``.
An answer that is not a receipt of the step's approved effect is never stored as its receipt
(:mod:`airlock.tools._receipt_check`): the step stays ``unknown`` for a person to look at. A
step whose key once answered so is queried again, never resent: its claim is given back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import anyio

from airlock.tools._approvals import load_preview
from airlock.tools._audit_chain import AuditStoreError
from airlock.tools._egress import checked_invoke, reach_of
from airlock.tools._errors import (
    AmbiguousWriteError,
    LedgerClosedError,
    LedgerCorruptError,
    LedgerError,
    LedgerIOError,
    LedgerNotADatabaseError,
    LedgerReadOnlyError,
    LedgerReplacedError,
    LedgerUnavailableError,
    ToolError,
)
from airlock.tools._in_flight import sending_here
from airlock.tools._ledger import LedgerStore, StepRef, StepStateError
from airlock.tools._not_sent import release, unsent_why
from airlock.tools._preview import Preview, Receipt, StepState
from airlock.tools._process import ProcessMark
from airlock.tools._receipt_check import mismatch_of
from airlock.tools._registry import Registry
from airlock.tools._sender import Sender
from airlock.tools._step_effect import effect_of
from airlock.tools._step_owner import owner_token
from airlock.tools._step_text import storable
from airlock.tools._worker_threads import WorkerThread, refusal

__all__ = [
    "STORE_WIDE",
    "Resolution",
    "ResolutionOutcome",
    "end_read",
    "needs_resolving",
    "resolve",
    "resolve_all",
]

_log = logging.getLogger("airlock.writes")

STORE_WIDE: tuple[type[Exception], ...] = (
    LedgerUnavailableError,
    LedgerNotADatabaseError,
    LedgerReadOnlyError,
    LedgerReplacedError,
    LedgerIOError,
    LedgerClosedError,
    AuditStoreError,
)
"""Errors of a store as a whole (the ledger, or the audit store: it shares their classes),
not of one step: reconcile stops on them rather than report every step ``unresolved``."""

ResolutionOutcome = Literal["committed", "failed", "unresolved", "in_flight"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """What reconciliation did with one step."""

    preview_id: str
    tool: str
    before: StepState
    after: StepState
    outcome: ResolutionOutcome
    """``committed`` (a receipt is stored), ``failed`` (an interrupted approved read: it
    changed nothing), ``unresolved`` (still unknown: run again later, or, when ``how`` says
    so, look at the system of record), ``in_flight`` (another live process is sending; left
    alone). A refused resend never ends a step ``failed``: an earlier send may have acted."""
    how: str
    """How it was resolved, as recorded in the ledger: ``queried``, ``resent``, a reason."""
    receipt: Receipt | None = None


def needs_resolving(preview: Preview, now: float) -> bool:
    """Whether ``preview`` is a step reconciliation must resolve at ``now``."""
    if preview.state == "unknown":
        return True
    if preview.state != "sending":
        return False
    lease_out = preview.lease_until is None or now > preview.lease_until
    if preview.owner is not None and preview.owner == owner_token():
        # This process: a send of it that still runs ends under the tool's timeout and
        # settles the step itself; one that ended and could not record how is found by the
        # lease, like any sender that cannot be seen.
        return not sending_here(preview.id) and lease_out
    mark = None if preview.owner is None else ProcessMark.parse(preview.owner)
    judged = "unknown" if mark is None else mark.judge()
    # Only a sender this host sees gone is taken over at once: one of another boot or not
    # seen here may run on another machine of this hostname (replicas sharing the ledger),
    # and waits for its lease like any sender this host cannot see.
    if judged == "dead":
        return True
    if judged == "alive" and _known_start(mark):
        # A live sender on this host is left alone past its lease for a while: the lease is
        # another process's wall clock, and a clock that jumped (or this one) must not take
        # over a send still waiting for its answer. Only for a while: its send ends under the
        # tool's timeout, so one still ``sending`` long after is a sender that could not
        # record how it ended (a long-lived `airlock serve` whose ledger refused the mark),
        # and nobody else would ever settle it. A mark with its start cannot be mistaken for
        # a later process with the same pid.
        lease = preview.lease_until
        return lease is None or now > _live_sender_bound(lease, claimed=preview.updated)
    return lease_out


_LIVE_SENDER_GRACE_S = 300.0
"""How long past its lease a live sender on this host is left alone, at least: far beyond
the clock steps NTP makes or a suspended machine wakes to, and short next to a step left
undecided for good."""


def _live_sender_bound(lease_until: float, *, claimed: float) -> float:
    """Until when a live sender on this host is left alone: its lease, then as long again
    (at least :data:`_LIVE_SENDER_GRACE_S`), so a tool with a long timeout keeps its margin."""
    return lease_until + max(lease_until - claimed, _LIVE_SENDER_GRACE_S)


def _known_start(mark: ProcessMark | None) -> bool:
    """Whether ``mark`` names its process with its start, not by a pid alone (which a later
    process may hold, and keep the step from reconcile for as long as it runs)."""
    return mark is not None and (mark.created is not None or mark.start is not None)


async def resolve_all(
    sender: Sender, registry: Registry, *, settled: Callable[[str], None]
) -> list[Resolution]:
    """Resolve every ``unknown`` step and every ``sending`` one whose sender is gone, each on
    its own: a step it cannot settle (a damaged row, a lock on it, an answer that cannot be
    kept) is reported ``unresolved`` and the others are resolved.
    ``settled(preview_id)`` is called after each write step's resolution; its failure is
    logged, the resolution stands.

    Raises:
        LedgerError, AuditStoreError: a store that fails as a whole (:data:`STORE_WIDE`):
            every step would fail the same way, and the caller (``airlock serve`` at start)
            must not go on committing on top of steps left undecided.
    """
    results = []
    ledger = sender.ledger
    for step in ledger.steps(states={"unknown", "sending"}, limit=1_000_000):
        try:
            preview = ledger.preview(step.id)
            if preview is None or preview.state not in ("unknown", "sending"):
                continue  # settled by another process since the listing
            spec = registry.get(preview.tool)
            if spec is not None and spec.write is None:
                results.append(end_read(ledger, preview, now=sender.clock()))
                continue
            resolution = await resolve(sender, registry, preview)
        except STORE_WIDE:
            raise
        except Exception as exc:  # one step it cannot settle must not hold up the others
            if not isinstance(exc, LedgerCorruptError):
                _log.warning("reconcile could not settle %s", step.id, exc_info=True)
            results.append(_unsettled(step, exc))
            continue
        results.append(resolution)
        try:
            settled(resolution.preview_id)
        except Exception:  # the step is resolved all the same: report it once, as it ended
            _log.warning("reconcile resolved %s but could not release it", step.id, exc_info=True)
    return results


def _unsettled(step: StepRef, exc: Exception) -> Resolution:
    """A step reconciliation could not settle (its row does not read back, the ledger failed
    on it, its answer could not be kept...): ``unresolved``, in the state it was listed in."""
    if isinstance(exc, LedgerCorruptError):
        why = exc.message
    elif isinstance(exc, LedgerError | ToolError):
        why = f"{exc.code}: {exc.message}"
    else:
        why = f"{type(exc).__name__}: {exc}"
    return Resolution(
        preview_id=step.id,
        tool=step.tool,
        before=step.state,
        after=step.state,
        outcome="unresolved",
        how=storable(f"skipped: {why}")[:500],
    )


async def resolve(sender: Sender, registry: Registry, preview: Preview) -> Resolution:
    """Resolve one step: query the system of record, or resend with the same key.

    The step is claimed first, like a commit, so two reconcilers never both act on it.
    """

    def result(
        after: Preview, outcome: ResolutionOutcome, how: str, receipt: Receipt | None = None
    ) -> Resolution:
        return Resolution(
            preview_id=preview.id,
            tool=preview.tool,
            before=preview.state,
            after=after.state,
            outcome=outcome,
            how=how,
            receipt=receipt,
        )

    now = sender.clock()
    if not needs_resolving(preview, now):
        return result(preview, "in_flight", f"a live sender ({preview.owner}) holds it")
    spec = registry.get(preview.tool)
    if spec is None or spec.write is None:
        return result(preview, "unresolved", f"tool {preview.tool!r} is not registered here")
    contract = spec.write
    # A lookup that finds nothing is followed by a resend: both must be able to start.
    calls = (contract.lookup, contract.commit) if contract.lookup else (contract.commit,)
    busy = next(filter(None, (refusal(spec, call) for call in calls)), None)
    if busy is not None:  # its sync calls run on past their timeouts: not claimed, left as is
        return result(preview, "unresolved", busy.detail or busy.message)
    mismatch = mismatch_of(sender.ledger, preview)  # (read before the claim clears its error)
    try:
        claimed = sender.claim(spec, preview, how="claimed by reconcile", now=now)
    except StepStateError as exc:
        return result(exc.preview, "in_flight", "another process claimed it first")
    if contract.lookup is not None:
        # A query reads: it may reach the tool's destinations, and write no file.
        check = reach_of(spec).check(
            phase="lookup", tenant=claimed.principal.tenant_id, effects=claimed.effects
        )
        thread = WorkerThread(spec, claimed=True)
        try:
            # Bounded like a send: a system that never answers must not hold up reconcile
            # (at start-up, before anything is committed) or the steps after this one.
            with anyio.fail_after(spec.timeout):
                lookup = thread.calling(contract.lookup)
                found = await checked_invoke(
                    check, lookup, effect_of(contract, claimed), claimed.key
                )
        except BaseException as exc:
            # A query that never started gives its claim back: unknown as before, the attempt
            # taken back (a cancellation is raised on all the same).
            unsent = unsent_why(thread, exc)
            back = None if unsent is None else release(sender, claimed, unsent, what="query")
            if not isinstance(exc, Exception):
                raise
            if back is not None:
                return result(back, "unresolved", f"query {unsent}; its claim was given back")
            found = None
            if isinstance(exc, TimeoutError):
                how = f"query got no answer within {spec.timeout:g} s"
            else:  # the query failed: still undecided
                how = f"query failed: {type(exc).__name__}"
        else:
            how = ""
        denial = check.denial(outcome="unknown")
        if denial is not None:  # its answer, if any, is not to be trusted: still undecided
            first = check.violations[0]
            how = f"query stopped by the runtime check: {first.action}"
            sender.audit(claimed, "execute", "deny", first.rule, "unknown", "denied", denial.detail)
        if how:
            after = sender.mark(claimed, "unknown", how=how, error=(mismatch or how)[:200])
            return result(after, "unresolved", how)
        if found is not None:
            try:
                receipt = sender.store_receipt(
                    spec, claimed, found, resolved_by="query", actor="reconcile"
                )
            except ToolError as exc:  # an unusable answer, or another change's: undecided
                after = load_preview(sender.ledger, claimed.id)
                why = f"query answer refused: {exc.code}: {exc.detail or exc.message}"
                return result(after, "unresolved", why[:500])
            after = load_preview(sender.ledger, claimed.id)
            return result(
                after, "committed", "queried: the system of record holds the key", receipt
            )
    if mismatch is not None:
        # Found nothing, or cannot look: the key answered for another change, so a resend
        # fetches that answer again, or, if the system forgot the key, commits unlooked-at.
        how = "not resent: its key answered for another change; look at the system of record"
        back = release(sender, claimed, how, error=mismatch)
        return result(back or load_preview(sender.ledger, claimed.id), "unresolved", how)
    try:
        receipt = await sender.send(spec, claimed, resolved_by="resend", actor="reconcile")
    except AmbiguousWriteError as exc:
        after = load_preview(sender.ledger, claimed.id)
        return result(after, "unresolved", f"resend with the same key: {exc.detail or exc.code}")
    except ToolError as exc:
        after = load_preview(sender.ledger, claimed.id)
        outcome: ResolutionOutcome = "failed" if after.state == "failed" else "unresolved"
        why = f"resend with the same key: {exc.code}: {exc.detail or exc.message}"
        return result(after, outcome, why[:500])
    after = load_preview(sender.ledger, claimed.id)
    return result(after, "committed", "resent with the same key", receipt)


def end_read(ledger: LedgerStore, preview: Preview, *, now: float) -> Resolution:
    """An approved read left ``unknown`` or ``sending`` by a process that is gone: it changed
    nothing, so it ends ``failed`` (asked again, it runs again)."""
    if preview.state == "sending" and not needs_resolving(preview, now):
        return Resolution(
            preview_id=preview.id,
            tool=preview.tool,
            before=preview.state,
            after=preview.state,
            outcome="in_flight",
            how=f"a live process ({preview.owner}) is running it",
        )
    try:
        after = ledger.transition(
            preview.id,
            expect={preview.state},
            expect_attempts=preview.attempts,
            to="failed",
            at=now,
            actor="reconcile",
            how="an approved read was interrupted; it changed nothing",
            error="interrupted",
        )
    except StepStateError as exc:
        after = exc.preview
    return Resolution(
        preview_id=preview.id,
        tool=preview.tool,
        before=preview.state,
        after=after.state,
        outcome="failed" if after.state == "failed" else "in_flight",
        how="an interrupted read changed nothing",
    )
