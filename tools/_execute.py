"""Step 5 of the admission order: run a tool's handler with limits, under the runtime check
of what the tool declares (:mod:`airlock.tools._egress`).

The deadline is min(tool timeout, time left in the run). The handler runs as the current
call of its context: an async one in the calling task, a sync one in a worker thread that
anyio gives a copy of that context. On asyncio, an async handler's deadline is set only
once the handler first waits (counted from when it started): one that answers without waiting
(most reads of data at hand) could not be stopped by it, and pays nothing for it, not even a
second reading of the clock. A sync handler past its deadline is abandoned, not stopped
(:mod:`airlock.tools._worker_threads`): its thread runs on, counted against its tool, and its
``timeout`` error says when the thread ends (one whose deadline passed as it waited for a
worker thread never ran: its ``timeout`` has outcome ``error``). What the handler reached that
the tool does not declare decides the answer (``denied``), whatever the handler then did with
the refusal.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import types
from collections.abc import Callable, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from airlock.tools import _egress_hook as _hook
from airlock.tools._context import CallContext
from airlock.tools._egress import CallCheck
from airlock.tools._egress_hook import CURRENT
from airlock.tools._errors import NotFoundError, ToolError, ToolTimeoutError, UpstreamError
from airlock.tools._registration import CompiledTool
from airlock.tools._spec import ToolSpec
from airlock.tools._step_text import failure_detail, failure_forms, failure_trace
from airlock.tools._worker_threads import NotSent, WorkerThread, thread_timeout

if TYPE_CHECKING:
    from airlock.tools._admission import CallTrail

__all__ = ["execute"]

_log = logging.getLogger("airlock.tools")


async def execute(
    tool: CompiledTool,
    values: Mapping[str, Any],
    ctx: CallContext,
    *,
    trail: CallTrail | None = None,
    claimed: WorkerThread | None = None,
) -> Any:
    """Step 5: run the handler with limits, under the runtime check of what the tool
    declares (:mod:`airlock.tools._egress`); ``trail``, if given, is marked with what the
    check refused. A sync handler runs on the ``claimed`` thread when given (an approved
    read's, whose caller asks it afterwards whether the handler ever started).

    Raises:
        NotSent: the ``claimed`` thread met the tool's bound as it was about to start, or
            the run had no time left for the ``claimed`` call.
        ToolError: ``timeout`` (outcome ``error`` when a sync handler never started);
            ``denied`` when the handler reached what the tool does not declare (even if it
            caught the refusal); the handler's own error; ``upstream`` with outcome
            ``error`` (nothing ran) when the tool, or the process, has too many sync calls
            running past their timeouts, with outcome ``unknown`` for anything else.
    """
    spec = tool.spec
    now = time.monotonic()  # the one clock read of a handler that answers without waiting
    budget, left = spec.timeout, ctx.deadline - now  # (ctx.remaining(), on the same reading)
    if left < budget:  # (min(), without the call)
        budget = left
    if budget <= 0 and claimed is not None:  # (its step is claimed: the claim is given back)
        raise NotSent("not sent: its run's time was used up", because="its run's time was used up")
    if budget <= 0:
        raise ToolTimeoutError(
            "the run's time budget is used up; finish with what you have",
            seconds=0.0,
            outcome="error",
        )
    # reach.check(phase="handler", ...) and _egress.enter(), spelled out: they run on every call.
    check = _new_object(CallCheck)  # (CallCheck(...)'s slots, set without calling a class)
    check.reach = tool.reach
    check.phase = "handler"
    check.tenant = ctx.principal.tenant_id
    check.values = values
    check.effects = ()
    check.violations = []
    check.closed = False
    check._reachable = None
    check._files = None
    if not _hook.installed:
        _hook.install()
    token = CURRENT.set(check)  # a sync handler's worker thread runs in a copy of it
    timed_out = False
    try:
        # Whether the handler is async was decided at registration (see invoke()).
        loop = asyncio._get_running_loop()
        if tool.is_async and loop is not None:
            handler = spec.handler(ctx, **values) if spec.takes_context else spec.handler(**values)
            # Its first step, up to where it first waits: a handler that never waits (most
            # reads of data at hand) finishes here, and a deadline could not have stopped it
            # anyway, so it pays for no timeout. (Taken by next() on a generator that awaits
            # it, not by handler.send(): a handler that returns then raises no StopIteration.)
            answer: list[Any] = []
            step = _awaited(handler, answer)
            waiting = next(step, _ANSWERED)
            if waiting is _ANSWERED:
                result = answer[0]
            else:
                # The deadline counts from before the first step, as if it had been set then
                # (on the loop's clock, which need not be time.monotonic()).
                deadline = loop.time() - (time.monotonic() - now) + budget
                # asyncio's own timeout, not a cancel scope of anyio's: the handler may have
                # entered scopes of its own in its first step, and anyio's must nest.
                bound = asyncio.timeout_at(deadline)
                try:
                    async with bound:
                        await _resume(step, waiting)
                    result = answer[0]
                except TimeoutError:
                    if not bound.expired():
                        raise
                    timed_out = True
        elif tool.is_async:  # another event loop library
            with anyio.move_on_after(budget) as scope:
                result = await _bind(spec, ctx, values)()
            timed_out = scope.cancelled_caught
        else:
            # Abandoned as its deadline passes (a thread cannot be stopped), and counted
            # against the tool until it ends: one with too many such threads is refused here.
            thread = WorkerThread(spec) if claimed is None else claimed
            with anyio.move_on_after(budget) as scope:
                result = await thread.run(_bind(spec, ctx, values))
            timed_out = scope.cancelled_caught
    except NotSent:  # (nothing ran: its caller gives the claim back)
        raise
    except NotFoundError as exc:
        _refuse_undeclared(check, trail, exc)
        # One canonical answer, so another tenant's record reads exactly like a missing one.
        raise NotFoundError(detail=exc.detail or exc.message) from None
    except ToolError as exc:
        _refuse_undeclared(check, trail, exc)
        raise
    except Exception as exc:
        _refuse_undeclared(check, trail, exc)
        # Its text may echo the call's Secret() arguments: logged and kept without them.
        # (Their forms made once, for every text of this failure: the trail's too.)
        forms = failure_forms(values, spec.secret_fields, trail)
        _log.warning(
            "tool %s raised %s:\n%s", spec.name, type(exc).__name__, failure_trace(exc, forms)
        )
        raise UpstreamError(
            "the tool failed and may have acted; do not assume it did or did not",
            outcome="unknown",
            detail=failure_detail(exc, forms),
        ) from exc
    finally:
        check.closed = True  # (_egress.leave(), spelled out)
        CURRENT.reset(token)
    if timed_out:
        # A sync handler's thread runs on: the error says when it ends (a denial's cause);
        # one that never started (it waited for a worker thread) did nothing: outcome error.
        if tool.is_async:
            timeout = ToolTimeoutError(seconds=budget)
        else:
            timeout = thread_timeout(thread, budget)
        _refuse_undeclared(check, trail, timeout)
        raise timeout
    if check.violations:  # caught by the handler: it fails all the same
        _refuse_undeclared(check, trail, None)
    return result


_new_object = object.__new__


def _bind(spec: ToolSpec, ctx: CallContext, values: Mapping[str, Any]) -> Callable[[], Any]:
    """The handler's call with the call's arguments, to be made elsewhere (a worker thread)."""
    if spec.takes_context:
        return functools.partial(spec.handler, ctx, **values)
    return functools.partial(spec.handler, **values)


_ANSWERED: Any = object()


@types.coroutine
def _awaited(handler: Coroutine[Any, Any, Any], answer: list[Any]) -> Generator[Any, Any, None]:
    """Await ``handler`` and put what it returns in ``answer``, as a generator: what the
    handler waits on passes through it, and its end raises nothing in whoever steps it."""
    answer.append((yield from handler))


@types.coroutine
def _resume(coroutine: Coroutine[Any, Any, Any], waiting: Any) -> Generator[Any, Any, Any]:
    """Go on with ``coroutine``, which has run its first step and waits on ``waiting``:
    what the event loop sends or throws in reaches it, as if it were awaited from the start
    (so a cancel scope around this stops it as it would have)."""
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as exc:  # a cancellation, or what the loop throws in
            try:
                waiting = coroutine.throw(exc)
            except StopIteration as finished:
                return finished.value
        else:
            try:
                waiting = coroutine.send(sent)
            except StopIteration as finished:
                return finished.value


def _refuse_undeclared(
    check: CallCheck, trail: CallTrail | None, cause: BaseException | None
) -> None:
    """Raise the call's ``denied`` answer if its handler reached what the tool does not
    declare: that, not how the handler then ended, is what the call answers."""
    denial = check.denial(trail)
    if denial is not None:
        raise denial from cause
