"""One run's tool calls, from their frames to their answers: ``call``, ``batch`` and
``propose`` frames checked, counted against the run's limits, admitted through the registry
as ``caller="code"`` and answered through the run's :class:`ResultWriter`.

Every call gets a context the host built from the run's :class:`ToolSession`: the principal, grant
and deadline come from the host, never from a frame. A ``propose`` frame is a program's proposal of
a write: it becomes :meth:`ToolSession.propose <airlock.bridge.ToolSession.propose>` (admitted and
prepared on the host, never committed), answered like a call. Calls run at once, until they first
wait (:class:`CallRunner`); at most ``max_concurrency`` run at a time, the others wait for their
turn in order of arrival. A batch's items share the event loop's turns (:class:`SharedTurns`); they
run in one worker until one of them waits, then in a few.

Arguments over the call budget (:class:`ArgumentsOverBudget`, in place of a call's, a
proposal's or a batch item's as the frame was decoded) are answered ``invalid_input`` without
admission, and recorded in the audit log; the run goes on.

A ``cancel`` frame gives up a call the program cancelled: it is not answered, and its place
in flight is free at once. A call not started yet, or waiting for its turn, never runs (and is
not recorded). One whose handler runs is not cut short: a blocking handler's thread would run
on while its place among the ``max_concurrency`` went to the next call, so cancelling calls
in a loop ran any number of handlers at once. It runs to its end in its place, audited as it
ends, and its result is dropped; a cancelled batch takes no further items. A proposal so
cancelled is withdrawn (:meth:`ToolSession.withdraw`): it is not among the run's proposals,
and the ledger denies its preview ("withdrawn by the program"), so no one approves it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Final

from airlock.bridge._call_budget import MAX_CALL_ELEMENTS, ArgumentsOverBudget
from airlock.bridge._program_errors import program_error
from airlock.bridge._results import BatchAnswer, ResultWriter
from airlock.bridge._run_stop import limit_stop, protocol_stop
from airlock.bridge._runner import CallRunner, SharedTurns, carry_on
from airlock.bridge._session import BridgeLimits, ToolSession
from airlock.bridge._turns import Turns
from airlock.bridge.airlock_wire import MAX_TOOL_NAME_CHARS
from airlock.tools import (
    FieldIssue,
    InvalidInputError,
    JSONObject,
    ToolError,
    UnknownToolError,
    audit_event,
    escape_controls,
)

__all__ = ["CallDispatcher"]

_log = logging.getLogger(__name__)
_MAX_CALL_ID: Final = 2**53
# Refused names recorded one by one per run; a program probing names in a loop is recorded
# this far, then once more as "more" (the guest sends each name once; bytes bound the rest).
_MAX_REFUSED: Final = 64
_NOT_LIVE: Final[Any] = object()  # (a call's entry in CallDispatcher._live can be None)
_RUNNING: Final[Any] = object()  # a call's entry once its handler runs: a cancel spares it
_CANCEL_GRACE_S: Final = 5.0
"""How long the end of a run waits for its cancelled tool calls (host code) to finish."""


class CallDispatcher:
    """The tool calls of one run: admitted within ``limits`` by ``session`` (``None``: the
    run has no tools, every call is ``unknown_tool``), answered through ``results``.

    The frame methods raise :class:`~airlock.bridge._run_stop.RunStop` when the frame breaks
    the protocol or a limit; the call itself then never starts.
    """

    def __init__(
        self,
        session: ToolSession | None,
        limits: BridgeLimits,
        *,
        deadline: float,
        results: ResultWriter,
    ) -> None:
        self._session = session
        self._limits = limits
        self._deadline = deadline
        self._results = results
        self._turns = Turns(limits.max_concurrency)
        # Each call counts itself out of in_flight as it ends (_end), or its cancel does.
        self.runner = CallRunner(on_done=lambda: None)
        """Runs the calls (``busy`` while some wait to start or run)."""
        self._items = SharedTurns()  # the loop's turns, for the items of the run's batches
        self._seen_ids: set[int] = set()
        self._refused = 0
        self._call_prefix = f"{session.call_prefix or session.run_id}:" if session else ""
        self.in_flight = 0
        """Calls waiting for their results."""
        # In flight: None, its task once started (a cancel cancels it), or _RUNNING.
        self._live: dict[int, asyncio.Task[Any] | None] = {}

    @property
    def run_id(self) -> str:
        return self._session.run_id if self._session else "-"

    # -- frames -----------------------------------------------------------------------------

    def call(
        self, frame: Mapping[str, Any], *, propose: bool = False, at_once: bool = True
    ) -> None:
        """Start the call (or with ``propose``, the proposal) a frame asks for (``at_once``: as
        :meth:`CallRunner.submit` says)."""
        call_id, tool = self._call_header(frame)
        args = frame.get("args")
        if not isinstance(args, dict):
            what = "a proposal's" if propose else "a call's"
            raise protocol_stop(f"{what} 'args' must be an object")
        self._count_in(call_id, tool, 1)
        if type(args) is ArgumentsOverBudget:
            self.runner.submit(self._answer_refusal(call_id, tool), at_once=at_once)
        elif propose:
            self.runner.submit(self._answer_proposal(call_id, tool, args), at_once=at_once)
        else:
            self.runner.submit(self._answer_call(call_id, tool, args), at_once=at_once)

    def batch(self, frame: Mapping[str, Any]) -> None:
        """Start the calls of one ``batch`` frame, answered together."""
        call_id, tool = self._call_header(frame)
        items = frame.get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise protocol_stop("a batch's 'items' must be a list of objects")
        if len(items) > self._limits.max_batch_items:  # (the guest splits a longer list)
            raise protocol_stop(
                f"a batch of {len(items)} items is over the run's limit of "
                f"{self._limits.max_batch_items} items a frame"
            )
        # An empty batch calls nothing, yet costs the host a frame and an answer: one call,
        # so the call budget bounds such frames too (the guest sends none).
        self._count_in(call_id, tool, len(items) or 1)
        self.runner.submit(self._answer_batch(call_id, tool, items))

    def cancel(self, frame: Mapping[str, Any]) -> None:
        """Give up a call the program cancelled (an id not in flight changes nothing)."""
        call_id = frame.get("id")
        if type(call_id) is not int or not 0 < call_id < _MAX_CALL_ID:
            raise protocol_stop("a cancel frame's 'id' must be a positive integer")
        if (task := self._live.pop(call_id, _NOT_LIVE)) is not _NOT_LIVE:
            self.in_flight -= 1
            if task is not None and task is not _RUNNING:
                task.cancel()  # (it waits for its turn: it never runs)

    def refused(self, frame: Mapping[str, Any]) -> None:
        """Record a tool name the program reached for and was not given."""
        refused = frame.get("tool")
        if not isinstance(refused, str) or not 0 < len(refused) <= MAX_TOOL_NAME_CHARS:
            raise protocol_stop("a refused frame's 'tool' must be a short string")
        self._refused += 1
        if self._session is not None and self._refused <= _MAX_REFUSED + 1:
            name = escape_controls(refused) if self._refused <= _MAX_REFUSED else "*"
            self._session.record_refused(name, self._refused)

    def _call_header(self, frame: Mapping[str, Any]) -> tuple[int, str]:
        call_id, tool = frame.get("id"), frame.get("tool")
        if type(call_id) is not int or not 0 < call_id < _MAX_CALL_ID:
            raise protocol_stop("a call's 'id' must be a positive integer")
        if call_id in self._seen_ids:
            raise protocol_stop(f"call id {call_id} was used twice")
        if not isinstance(tool, str) or not 0 < len(tool) <= MAX_TOOL_NAME_CHARS:
            raise protocol_stop("a call's 'tool' must be a short string")
        self._seen_ids.add(call_id)
        return call_id, tool

    def _count_in(self, call_id: int, tool: str, count: int) -> None:
        """Count call ``call_id`` (``count`` calls of ``tool``) in, within the limits."""
        if self.in_flight >= self._limits.max_in_flight:
            raise limit_stop(
                "in_flight",
                f"{self.in_flight + 1} calls were waiting for results at once; the limit "
                f"is {self._limits.max_in_flight}",
                tool=tool,
            )
        if (session := self._session) is not None:
            if session.calls + count > self._limits.max_calls:
                raise limit_stop(
                    "calls",
                    f"the program asked for {session.calls + count} tool calls; "
                    f"the limit is {self._limits.max_calls} per program",
                    tool=tool,
                )
            session.calls += count
        self.in_flight += 1
        self._live[call_id] = None

    # -- running calls ----------------------------------------------------------------------

    def _start(self, call_id: int, *, running: bool = False) -> bool:
        # From now on a cancel cancels the task it runs in (its own once it waits: see
        # CallRunner) until its handler runs; one that never waits ends before a cancel can
        # come. A batch is never cancelled so: its workers stop taking items.
        if call_id in self._live:
            self._live[call_id] = _RUNNING if running else asyncio.current_task()
            return True
        return False

    def _end(self, call_id: int) -> None:
        if self._live.pop(call_id, _NOT_LIVE) is not _NOT_LIVE:  # (else its cancel did)
            self.in_flight -= 1

    async def _answer_call(self, call_id: int, tool: str, args: dict[str, Any]) -> None:
        # The admission of :meth:`_admit`, written out: most calls from code are reads of
        # data at hand, and a coroutine less is a good part of what the bridge adds to them.
        if not self._start(call_id):
            return
        session = self._session
        try:
            if session is None:
                ok, value = False, program_error(UnknownToolError(name=tool))
            else:
                ctx = session.context(self._call_prefix + str(call_id), self._deadline)
                turns = self._turns
                if turns.running >= turns.limit:
                    await turns.wait()
                self._live[call_id] = _RUNNING  # (a cancel while it waited raised there)
                turns.running += 1
                failure: Exception | None = None  # (its handler may run on: see Turns)
                try:
                    ok, value = True, await session.registry.call(tool, args, ctx)
                except Exception as exc:
                    ok, value, failure = False, self._failure(tool, exc), exc
                finally:
                    turns.leave_after(failure)
            if call_id in self._live:  # (else the program cancelled it: it drops the result)
                self._results.send(call_id, ok, value, alone=self.in_flight <= 1)
        finally:
            self._end(call_id)

    async def _admit(
        self, call_id: int, guest_id: str, tool: str, args: dict[str, Any], *, propose: bool = False
    ) -> tuple[bool, Any] | None:
        """One admitted call's outcome for the wire: ``(True, value)`` or ``(False, error)``;
        with ``propose``, a proposal's. ``None``: call ``call_id`` (a batch) was cancelled
        while this waited for its turn, and it did not run."""
        session = self._session
        if session is None:
            return False, program_error(UnknownToolError(name=tool))
        ctx = session.context(self._call_prefix + guest_id, self._deadline)
        turns = self._turns
        if turns.running >= turns.limit:
            await turns.wait()
        if call_id not in self._live:
            turns.pass_on()  # (the turn it was given)
            return None
        self._live[call_id] = _RUNNING
        turns.running += 1
        failure: Exception | None = None
        try:
            if propose:
                return True, await session.propose(tool, args, ctx, order=call_id)
            return True, await session.registry.call(tool, args, ctx)
        except Exception as exc:
            failure = exc
            return False, self._failure(tool, exc)
        finally:
            turns.leave_after(failure)

    def _failure(self, tool: str, exc: Exception) -> JSONObject:
        """A failed call's error for the wire."""
        if isinstance(exc, ToolError):
            return program_error(exc)
        # The registry audits it; the guest learns only the class. Its text and traceback
        # may quote the call's Secret() arguments, which only the registry can clean (and
        # does, for what a tool's code raised): here, its class alone.
        _log.error(
            "tool %r failed unexpectedly in run %s: %s (its text is not logged: it may quote "
            "the call's secret arguments)",
            escape_controls(tool),
            self.run_id,
            type(exc).__name__,
        )
        return {
            "code": "upstream",
            "message": f"the tool failed ({type(exc).__name__})",
            "retryable": True,
        }

    async def _answer_proposal(self, call_id: int, tool: str, args: dict[str, Any]) -> None:
        if not self._start(call_id):
            return
        try:
            outcome = await self._admit(call_id, str(call_id), tool, args, propose=True)
            if call_id in self._live and outcome is not None:
                self._results.send(call_id, *outcome, alone=self.in_flight <= 1)
            elif self._session is not None:
                self._session.withdraw(call_id)  # cancelled as it ran: no proposal of the run
        finally:
            self._end(call_id)

    async def _answer_refusal(self, call_id: int, tool: str) -> None:
        if not self._start(call_id):
            return
        try:
            error = self._too_large(str(call_id), tool)
            self._results.send(call_id, False, error, alone=self.in_flight <= 1)
        finally:
            self._end(call_id)

    def _too_large(self, guest_id: str, tool: str) -> JSONObject:
        """The error for arguments over :data:`MAX_CALL_ELEMENTS`, recorded in the audit
        log as admission records a refusal."""
        error = InvalidInputError(
            issues=(
                FieldIssue(
                    "",
                    f"arguments hold more than {MAX_CALL_ELEMENTS} values and keys; a call "
                    f"from code takes at most {MAX_CALL_ELEMENTS}: send less per call (split "
                    "the work over several calls)",
                ),
            )
        )
        if self._session is not None:
            ctx = self._session.context(self._call_prefix + guest_id, self._deadline)
            self._session.registry.audit.record(
                audit_event(
                    ctx,
                    tool,
                    stage="validate",
                    decision="deny",
                    rule="input",
                    outcome="error",
                    code=error.code,
                    detail="refused by the bridge: arguments over the element budget",
                )
            )
        return program_error(error)

    async def _answer_batch(self, call_id: int, tool: str, items: list[dict[str, Any]]) -> None:
        # Each item's outcome is encoded and counted against max_bytes_out as it finishes
        # (BatchAnswer): held whole, the outcomes of a batch of large results came to many
        # times the limit before it was checked.
        if not self._start(call_id, running=True):
            return
        answer = BatchAnswer(self._results, len(items))
        pending = iter(enumerate(items))
        turns = self._items
        results = self._results
        helpers: list[asyncio.Task[None]] = []

        async def worker(first: bool) -> None:
            # Workers share the items, and the loop's turns: items that never wait would
            # otherwise run back to back in one step, whatever the time.
            for n, item in pending:
                await turns.take()
                if results.ended is not None or call_id not in self._live:
                    return  # (the run's end cancels the items still running; a cancel not)
                outcome: tuple[bool, Any] | None
                if type(item) is ArgumentsOverBudget:
                    outcome = False, self._too_large(f"{call_id}.{n}", tool)
                else:
                    admit = self._admit(call_id, f"{call_id}.{n}", tool, item)
                    try:
                        waiting = admit.send(None)
                    except StopIteration as done:
                        outcome = done.value
                    else:
                        if first and not helpers:
                            # Its items wait: a few more workers, for concurrency. Until
                            # then one runs them all: workers that wait for a turn each
                            # wake at every turn of the loop, most of them to find it spent.
                            helpers.extend(
                                asyncio.get_running_loop().create_task(worker(False))
                                for _ in range(
                                    min(self._limits.max_concurrency, len(items) - n) - 1
                                )
                            )
                        outcome = await carry_on(admit, waiting)
                if outcome is None or not answer.put(n, *outcome):
                    return

        try:
            await worker(True)
            if helpers:
                await asyncio.gather(*helpers)
            if call_id in self._live:  # (else the program cancelled it: dropped)
                answer.send(call_id, alone=self.in_flight <= 1)
        finally:
            if not all(helper.done() for helper in helpers):  # cancelled, or a bug's error
                for helper in helpers:
                    helper.cancel()
                await asyncio.wait(helpers)
            answer.drop()
            self._end(call_id)

    async def cancel_pending(self) -> None:
        """Drop the calls not started yet and cancel the running ones, waiting for them
        :data:`_CANCEL_GRACE_S` at most."""
        self.runner.cancel()
        if self.runner.tasks:
            # A handler that swallows its cancellation must not hold the run open.
            _, stuck = await asyncio.wait(list(self.runner.tasks), timeout=_CANCEL_GRACE_S)
            if stuck:
                _log.warning(
                    "%d tool calls of run %s ignored their cancellation", len(stuck), self.run_id
                )
