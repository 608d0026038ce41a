"""One run's tool calls, run one after another in one task until one of them has to wait.

A task per call costs a task's creation and a turn of the event loop before the call even
starts; most calls from code (reads of data at hand) never wait, so that cost was most of what
the bridge added to them. :class:`CallRunner` runs the calls frames bring in one task instead,
each until it first waits. A call that finishes without waiting is done then and there, and
the next one runs. A call that has to wait keeps that task to itself, as if the task had been
created for it: what it waits on, a deadline it set and a cancellation all act on that task,
and a new task runs the calls behind it. Each call runs in a copy of the context it would have
had in a task of its own, so nothing one call sets in a context variable reaches another.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final, TypeVar

__all__ = ["TURN_S", "CallRunner", "SharedTurns", "carry_on"]

_log = logging.getLogger(__name__)
_CALLS_PER_TURN: Final = 64
"""Calls one task runs at most before the event loop serves others (fewer when
:data:`TURN_S` ends the turn first)."""
TURN_S: Final = 0.005
"""Time one run's calls (or frames) may hold the event loop in one turn: a burst of calls
that each cost the host much (arguments of many thousand names) gives way to other runs
after this, however few of them ran."""

Call = Coroutine[Any, Any, None]
_T = TypeVar("_T")


_Handoff = tuple[contextvars.Context, Call, Any]
"""A call that ran its first step elsewhere and waits: its context, itself, what it waits on."""
# How a call runs at once in the callback that received it: as a step of the idle runner
# task (asyncio's own way of running a task's step), so that whatever it sets up that
# belongs to a task (a deadline, a cancel scope) belongs to a task that can carry it on.
_enter_task: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None = getattr(
    asyncio.tasks, "_enter_task", None
)
_leave_task: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None = getattr(
    asyncio.tasks, "_leave_task", None
)


class CallRunner:
    """Runs submitted calls in order of submission, each to its end; ``on_done`` is called
    as each one ends (however it ends)."""

    def __init__(self, *, on_done: Callable[[], None]) -> None:
        self._on_done = on_done
        self._queue: deque[Call] = deque()
        self._runner: asyncio.Task[None] | None = None
        self._idle: asyncio.Future[_Handoff | None] | None = None
        """Set while the runner waits for calls: the future that wakes it."""
        self.tasks: set[asyncio.Task[None]] = set()
        """Every task running calls: the runner, and those kept by a call that waits."""
        self._cancelled = False

    @property
    def busy(self) -> bool:
        """Calls are waiting to start, or running."""
        return bool(self._queue or self.tasks)

    def submit(self, call: Call, *, at_once: bool = True) -> None:
        """Run ``call`` after those already submitted: at once, when ``at_once``, the runner
        is idle and no task is running (the callback that received the call's frame), else
        in the runner's task on the loop's next turn. After :meth:`cancel`, ``call`` is
        dropped unstarted."""
        if self._cancelled:  # the run is over: nothing may run on the runner it cancelled
            call.close()
            return
        idle = self._idle
        if (
            at_once
            and idle is not None
            and not self._queue
            and asyncio.current_task(idle.get_loop()) is None  # (the loop given: no look-up)
            and self._run_now(call, idle)
        ):
            return
        self._queue.append(call)
        if idle is not None:
            self._idle = None
            idle.set_result(None)
        elif self._runner is None:
            self._start()

    def _run_now(self, call: Call, idle: asyncio.Future[_Handoff | None]) -> bool:
        """Run ``call``'s first step as a step of the idle runner; whether it was run (if it
        waits, the runner carries it on)."""
        runner = self._runner
        if runner is None or _enter_task is None or _leave_task is None:
            return False
        loop = idle.get_loop()
        context = contextvars.copy_context()
        _enter_task(loop, runner)
        try:
            waiting = context.run(call.send, None)
        except StopIteration:
            self._on_done()
            return True
        except Exception:  # the call's own bug: logged, as a task's would be
            self._on_done()
            _log.exception("a bridge call failed")
            return True
        finally:
            _leave_task(loop, runner)
        # It waits: the runner is the call's from now on; the next call starts another.
        self._idle = self._runner = None
        idle.set_result((context, call, waiting))
        return True

    def _start(self) -> None:
        self._runner = asyncio.get_running_loop().create_task(self._run())
        self.tasks.add(self._runner)
        self._runner.add_done_callback(self.tasks.discard)

    def cancel(self) -> None:
        """Drop the calls not started yet and cancel the running ones, for good: calls
        submitted afterwards are dropped too."""
        self._cancelled = True
        for call in self._queue:
            call.close()
        self._queue.clear()
        for task in self.tasks:
            task.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                idle: asyncio.Future[_Handoff | None] = loop.create_future()
                self._idle = idle
                try:
                    handoff = await idle
                except asyncio.CancelledError as cancel:
                    if idle.done() and not idle.cancelled() and (given := idle.result()):
                        # Handed over, and cancelled before it went on: the cancellation is
                        # the call's (a deadline it set in its first step, or the run's end),
                        # so it gets it, as a task of its own would have.
                        await self._carry_on(*given, thrown=cancel)
                        return
                    raise
                finally:
                    if self._idle is idle:
                        self._idle = None
                if handoff is not None:
                    await self._carry_on(*handoff)
                    return
            turn_ends = time.monotonic() + TURN_S
            for ran in range(min(len(self._queue), _CALLS_PER_TURN)):
                if ran and time.monotonic() >= turn_ends:  # (one at least: no turn is idle)
                    break
                call = self._queue.popleft()
                context = contextvars.copy_context()
                try:
                    waiting = context.run(call.send, None)
                except StopIteration:
                    self._on_done()
                    continue
                except Exception:  # the call's own bug: logged, as a task's would be
                    self._on_done()
                    _log.exception("a bridge call failed")
                    continue
                # It waits: this task is the call's from now on; another runs the rest.
                self._runner = None
                if self._queue:
                    self._start()
                await self._carry_on(context, call, waiting)
                return
            if self._queue:  # more than a turn's worth: let others run first
                await asyncio.sleep(0)

    async def _carry_on(
        self,
        context: contextvars.Context,
        call: Call,
        waiting: Any,
        *,
        thrown: BaseException | None = None,
    ) -> None:
        try:
            await _resume(context, call, waiting, thrown)
        finally:
            self._on_done()


class SharedTurns:
    """Turns of the event loop for items that several tasks run one after another (a
    batch's workers): together they hold the loop :data:`TURN_S` at most in one turn, one
    item at least, then wait for the next turn, as :class:`CallRunner`'s calls do.

    The turn is shared, not each task's own: the loop runs every task that is ready in one
    turn, so tasks that each took :data:`TURN_S` would hold it that much times their number
    (nine batches of a thousand reads held it 60 to 112 ms). A new turn begins in a callback
    scheduled when the last one ended, so it begins once per turn of the loop, before the
    tasks that wait for it."""

    def __init__(self) -> None:
        self._ends = 0.0
        self._next = False  # the next turn's beginning is scheduled
        self._fresh = False  # a turn began, and no item ran in it yet

    async def take(self) -> None:
        """Return at once while the turn has time left; else once the next one began."""
        while not self._fresh and time.monotonic() >= self._ends:
            if not self._next:
                self._next = True
                asyncio.get_running_loop().call_soon(self._begin)
            await asyncio.sleep(0)
        self._fresh = False

    def _begin(self) -> None:
        self._next = False
        self._fresh = True
        self._ends = time.monotonic() + TURN_S


@types.coroutine
def _resume(
    context: contextvars.Context, call: Call, waiting: Any, thrown: BaseException | None
) -> Generator[Any, Any, None]:
    """Go on with ``call``, which ran its first step in ``context`` and waits on
    ``waiting`` (or is to be thrown ``thrown`` first): what the event loop sends or throws in
    reaches it, in that context, as if a task of its own had awaited it from the start."""
    while True:
        if thrown is not None:
            exc, thrown = thrown, None
            try:
                waiting = context.run(call.throw, exc)
            except StopIteration:
                return
            continue
        try:
            sent = yield waiting
        except GeneratorExit:
            # Closed where it waits (its task's coroutine closed): the call's cleanup (a
            # context variable's reset, say) runs in its own context, as its steps did.
            context.run(call.close)
            raise
        except BaseException as exc:  # a cancellation, or what the loop throws in
            thrown = exc
            continue
        try:
            waiting = context.run(call.send, sent)
        except StopIteration:
            return


@types.coroutine
def carry_on(call: Coroutine[Any, Any, _T], waiting: Any) -> Generator[Any, Any, _T]:
    """Go on with ``call``, whose first step (``call.send(None)``, in the task that awaits
    this) waits on ``waiting``: as if that task had awaited ``call`` from the start, except
    that whoever ran the step knows it waits."""
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            call.close()
            raise
        except BaseException as exc:  # a cancellation, or what the loop throws in
            try:
                waiting = call.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            continue
        try:
            waiting = call.send(sent)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
