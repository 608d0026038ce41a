"""Sync tool code in anyio's worker threads, and the threads that outlive their calls.

A sync handler (or a write tool's ``prepare``, ``commit`` or ``lookup``) runs in a worker
thread. When its call gives up on it (its deadline passed, its caller was cancelled) the
thread is abandoned, never stopped: Python cannot stop a thread. It runs on, and anyio's
limit on threads no longer counts it. So such threads are counted, by the tool's name (across
every registry of the process: one built per request or per tenant adds to the same count,
and no spec is kept for it), and in all: a tool with :data:`MOST_OUTLIVING` of them, and
every sync call once the process has :data:`MOST_OUTLIVING_IN_PROCESS`, starts no more until
some end. (The calls running as a bound is reached may still add to them: at most anyio's
worker threads, 40 by default.) A call that gave up on its thread says when the thread ends
(:attr:`WorkerThread.ended`), so that whoever counts the calls running at once (the bridge's
turns) counts it until then. A write's sync ``commit``, reconcile's sync ``lookup`` and an
approved read's sync handler are checked before their step is claimed (:func:`refusal`:
refused, the step is left as it was); one that meets a bound as its thread is about to start
raises :class:`NotSent`. Nothing was sent then, nor when the call's deadline or a cancellation
passed while it waited for a thread (:attr:`WorkerThread.never_ran`): its caller gives the
step's claim back, and the step is as it was before (:mod:`airlock.tools._not_sent`).

A forked child has none of its parent's threads: it starts with no count, and the lock of the
count is a :class:`~airlock.tools._fork_lock.ForkLock` (free in the child); a thread of the
parent that ends in the child (the one that forked) counts nothing out there.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import anyio.to_thread

from airlock.tools._errors import ToolTimeoutError, UpstreamError
from airlock.tools._fork_lock import ForkLock
from airlock.tools._invoke import is_async_callable

if TYPE_CHECKING:
    from airlock.tools._spec import ToolSpec

__all__ = [
    "MOST_OUTLIVING",
    "MOST_OUTLIVING_IN_PROCESS",
    "NotSent",
    "WorkerThread",
    "outliving",
    "outliving_in_process",
    "refusal",
    "thread_timeout",
]

MOST_OUTLIVING: Final = 16
"""Threads of one tool (by name) that may run on past their calls; its calls beyond are
refused."""
MOST_OUTLIVING_IN_PROCESS: Final = 64
"""Threads of all tools that may run on past their calls; every sync call beyond is refused."""

_T = TypeVar("_T")

_LOCK = ForkLock("the count of tool threads running past their calls")
"""Orders a thread's end against its call giving up on it, so each thread is counted out
exactly when it was counted in."""
_OUTLIVING: dict[str, int] = {}
"""Per tool name, its threads still running after their calls gave up on them. Only a tool
with such threads has an entry."""
_in_process = 0
"""All threads still running after their calls gave up on them (the sum of
:data:`_OUTLIVING`)."""
_forks = 0
"""Forks this process descends from: a thread counted before the last one is not counted
out after it (it runs in the parent)."""


def outliving(spec: ToolSpec) -> int:
    """How many threads of ``spec``'s tool (by name) run on after their calls gave up on
    them."""
    return _OUTLIVING.get(spec.name, 0)


def outliving_in_process() -> int:
    """How many threads of all tools run on after their calls gave up on them."""
    return _in_process


class WorkerThread:
    """One sync call of ``spec``'s code in anyio's worker thread (:meth:`run`)."""

    __slots__ = ("_claimed", "_counted_at", "_finished", "_gave_up", "_name", "_started", "ended")

    def __init__(self, spec: ToolSpec, *, claimed: bool = False) -> None:
        self._name = spec.name  # (not the spec: a thread that runs on keeps nothing of it)
        self._claimed = claimed
        """A write's ``commit``, reconcile's ``lookup`` or an approved read's handler: its
        caller checked the bound (:func:`refusal`) before it claimed the step, and a bound
        reached as the call waited for a thread raises :class:`NotSent` (not a tool's error:
        nothing was sent, and the caller gives the claim back)."""
        self._started = False
        self._finished = False
        self._gave_up = False
        self._counted_at = -1  # (the fork it was counted in after, once counted)
        self.ended: asyncio.Future[None] | None = None
        """Once :meth:`run` gave up on the thread as it ran: done when the thread has ended.
        ``None`` while it has not, when the thread had ended, or without an asyncio loop."""

    @property
    def never_ran(self) -> bool:
        """Whether :meth:`run` gave up on the call before its code started (while it waited
        for a worker thread): nothing of it ran, and nothing will."""
        return self._gave_up and not self._started

    async def run(self, call: Callable[[], _T]) -> _T:
        """What ``call()`` returns, run in a worker thread. Cancelled, this gives up on the
        thread at once (it runs on, counted against the tool, see :attr:`ended`).

        Raises:
            UpstreamError: the tool has :data:`MOST_OUTLIVING` threads running on past their
                calls, or the process :data:`MOST_OUTLIVING_IN_PROCESS` (outcome ``error``:
                nothing ran).
            Exception: what ``call`` raised.
        """
        name = self._name
        now = None if self._claimed else _refusal(name)
        if now is not None:
            raise now

        def in_thread() -> _T:
            with _LOCK:
                if self._gave_up:  # before it started (anyio may still start it): never run
                    raise _GaveUp
                late = _refusal(name)  # (a bound reached while it waited for a thread)
                if late is not None:
                    raise _Refused(late)
                self._started = True
            try:
                return call()
            finally:
                self._thread_ended()

        try:
            return await anyio.to_thread.run_sync(in_thread, abandon_on_cancel=True)
        except _Refused as refused:
            if self._claimed:
                raise NotSent(f"not sent: {refused.error.message}") from None
            raise refused.error from None
        except BaseException:  # a cancellation, or what call() raised (the thread ended then)
            self._give_up()
            raise

    def calling(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` itself when it is async, else an async function that :meth:`run`\\ s it
        (what :func:`~airlock.tools._invoke.invoke` awaits rather than a thread of its own)."""
        if is_async_callable(fn):
            return fn

        async def in_this_thread(*args: Any) -> Any:
            return await self.run(functools.partial(fn, *args))

        return in_this_thread

    def _give_up(self) -> None:
        """The call no longer waits for the thread: if it still runs, count it as outliving
        its call, and make :attr:`ended` for it (on the running loop)."""
        with _LOCK:
            if self._finished or self._gave_up:
                return
            self._gave_up = True
            if not self._started:  # (cancelled waiting for a thread: none will run it)
                return
            _count(self._name, 1)
            self._counted_at = _forks
            loop = asyncio._get_running_loop()
            self.ended = None if loop is None else loop.create_future()

    def _thread_ended(self) -> None:
        """In the worker thread, as the call returns: if its call gave up on it, count it out
        and resolve :attr:`ended`."""
        with _LOCK:
            self._finished = True
            if not self._gave_up:
                return
            if self._counted_at == _forks:  # (else counted in the parent, before a fork)
                _count(self._name, -1)
            ended = self.ended
        if ended is not None:
            # (RuntimeError: the loop is closed, and no one is left to wait for it)
            with contextlib.suppress(RuntimeError):
                ended.get_loop().call_soon_threadsafe(_set_done, ended)


def thread_timeout(
    thread: WorkerThread, seconds: float, *, outcome: Literal["error", "unknown"] = "unknown"
) -> ToolTimeoutError:
    """The ``timeout`` of a call whose deadline, ``seconds`` away, passed as ``thread`` ran
    its code (``outcome``, the error saying when the thread ends), or as it waited for a worker
    thread (outcome ``error``: its code never ran, nor will)."""
    if thread.never_ran:
        return ToolTimeoutError(
            f"the tool could not start within {round(seconds, 3):g} s, the host being busy; "
            "it did not run, try it again later",
            seconds=seconds,
            outcome="error",
        )
    return ToolTimeoutError(seconds=seconds, outcome=outcome, handler_running=thread.ended)


def refusal(spec: ToolSpec, fn: Callable[..., Any]) -> UpstreamError | None:
    """The error of a call of ``spec``'s sync ``fn`` refused now for the threads running past
    their calls (:meth:`WorkerThread.run`'s), ``None`` when it is not, or ``fn`` is async (it
    starts no thread): what the caller of a ``claimed`` one checks before it claims."""
    return None if is_async_callable(fn) else _refusal(spec.name)


class NotSent(Exception):
    """A ``claimed`` call refused as it was about to start: its thread met the tool's bound
    (:class:`WorkerThread`), or its run had no time left (``execute``). Its code did not run,
    nor will (its caller gives the step's claim back); ``because`` says why, to the caller."""

    def __init__(self, message: str, *, because: str = "the host was too busy to start it"):
        super().__init__(message)
        self.because = because


def _refusal(name: str) -> UpstreamError | None:
    """The error of a call of the tool ``name`` refused for the threads running past their
    calls (the tool's, or the process's), ``None`` if it is not refused."""
    if _OUTLIVING.get(name, 0) >= MOST_OUTLIVING:
        return UpstreamError(
            f"the tool {name!r} has {MOST_OUTLIVING} calls still running past their "
            "timeouts and takes no more until they end; try it again later",
            outcome="error",
            detail=f"{name}: {MOST_OUTLIVING} sync calls run on past their timeouts",
        )
    if _in_process >= MOST_OUTLIVING_IN_PROCESS:
        return UpstreamError(
            f"the host has {MOST_OUTLIVING_IN_PROCESS} tool calls still running past their "
            "timeouts and starts no more until some end; try it again later",
            outcome="error",
            detail=(
                f"{name}: refused, {MOST_OUTLIVING_IN_PROCESS} sync calls of the process run "
                "on past their timeouts"
            ),
        )
    return None


class _Refused(Exception):
    """Raised in a worker thread, before its call, when the tool or the process reached its
    bound while the call waited for the thread: :attr:`error` is the call's answer."""

    def __init__(self, error: UpstreamError) -> None:
        super().__init__()
        self.error = error


class _GaveUp(Exception):
    """Raised in a worker thread whose call gave up on it before it started (no one reads
    it: the call was cancelled)."""


def _count(name: str, change: int) -> None:
    """Add ``change`` to the outliving threads of the tool ``name`` (under :data:`_LOCK`)."""
    global _in_process
    count = _OUTLIVING.get(name, 0) + change
    if count > 0:
        _OUTLIVING[name] = count
    else:
        _OUTLIVING.pop(name, None)
    _in_process += change


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _forget_in_child() -> None:
    """In a forked child: none of the parent's threads run here, so none is counted."""
    global _in_process, _forks
    _OUTLIVING.clear()
    _in_process = 0
    _forks += 1


os.register_at_fork(after_in_child=_forget_in_child)
