"""Sync tool code in anyio's worker threads, and the threads that outlive their calls.

A sync handler (or a write tool's ``prepare``) runs in a worker thread. When its call gives
up on it (its deadline passed, its caller was cancelled) the thread is abandoned, never
stopped: Python cannot stop a thread. It runs on, and anyio's limit on threads no longer
counts it. So such threads are counted per tool: a tool with :data:`MOST_OUTLIVING` of them
starts no more calls until some end (the calls running as it reached them may still add to
them: at most anyio's worker threads, 40 by default), and a call that gave up on its thread
says when the thread ends (:attr:`WorkerThread.ended`), so that whoever counts the calls
running at once (the bridge's turns) counts it until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio.to_thread

from airlock.tools._errors import UpstreamError
from airlock.tools._invoke import is_async_callable

if TYPE_CHECKING:
    from airlock.tools._spec import ToolSpec

__all__ = ["MOST_OUTLIVING", "WorkerThread", "outliving"]

MOST_OUTLIVING: Final = 16
"""Threads of one tool that may run on past their calls; the tool's calls beyond are refused."""

_T = TypeVar("_T")

_LOCK = threading.Lock()
"""Orders a thread's end against its call giving up on it, so each thread is counted out
exactly when it was counted in."""
_OUTLIVING: dict[int, tuple[ToolSpec, int]] = {}
"""Per tool, by the id of its spec: the spec (so that the id is not reused meanwhile) and its
threads still running after their calls gave up. Only a tool with such threads has an entry,
so a process that builds a registry per request keeps none of their specs."""


def outliving(spec: ToolSpec) -> int:
    """How many of ``spec``'s threads run on after their calls gave up on them."""
    entry = _OUTLIVING.get(id(spec))
    return 0 if entry is None else entry[1]


class WorkerThread:
    """One sync call of ``spec``'s code in anyio's worker thread (:meth:`run`)."""

    __slots__ = ("_finished", "_gave_up", "_spec", "_started", "ended")

    def __init__(self, spec: ToolSpec) -> None:
        self._spec = spec
        self._started = False
        self._finished = False
        self._gave_up = False
        self.ended: asyncio.Future[None] | None = None
        """Once :meth:`run` gave up on the thread as it ran: done when the thread has ended.
        ``None`` while it has not, when the thread had ended, or without an asyncio loop."""

    async def run(self, call: Callable[[], _T]) -> _T:
        """What ``call()`` returns, run in a worker thread. Cancelled, this gives up on the
        thread at once (it runs on, counted against the tool, see :attr:`ended`).

        Raises:
            UpstreamError: the tool has :data:`MOST_OUTLIVING` threads running on past their
                calls (outcome ``error``: nothing ran).
            Exception: what ``call`` raised.
        """
        spec = self._spec
        if outliving(spec) >= MOST_OUTLIVING:
            raise _refusal(spec)

        def in_thread() -> _T:
            with _LOCK:
                if self._gave_up:  # before it started (anyio may still start it): never run
                    raise _GaveUp
                if outliving(spec) >= MOST_OUTLIVING:  # (reached while it waited for a thread)
                    raise _Refused
                self._started = True
            try:
                return call()
            finally:
                self._thread_ended()

        try:
            return await anyio.to_thread.run_sync(in_thread, abandon_on_cancel=True)
        except _Refused:
            raise _refusal(spec) from None
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
            _count(self._spec, 1)
            loop = asyncio._get_running_loop()
            self.ended = None if loop is None else loop.create_future()

    def _thread_ended(self) -> None:
        """In the worker thread, as the call returns: if its call gave up on it, count it out
        and resolve :attr:`ended`."""
        with _LOCK:
            self._finished = True
            if not self._gave_up:
                return
            _count(self._spec, -1)
            ended = self.ended
        if ended is not None:
            # (RuntimeError: the loop is closed, and no one is left to wait for it)
            with contextlib.suppress(RuntimeError):
                ended.get_loop().call_soon_threadsafe(_set_done, ended)


def _refusal(spec: ToolSpec) -> UpstreamError:
    return UpstreamError(
        f"the tool {spec.name!r} has {MOST_OUTLIVING} calls still running past their "
        "timeouts and takes no more until they end; try it again later",
        outcome="error",
        detail=f"{spec.name}: {MOST_OUTLIVING} sync calls run on past their timeouts",
    )


class _Refused(Exception):
    """Raised in a worker thread, before its call, when the tool reached
    :data:`MOST_OUTLIVING` while the call waited for the thread."""


class _GaveUp(Exception):
    """Raised in a worker thread whose call gave up on it before it started (no one reads
    it: the call was cancelled)."""


def _count(spec: ToolSpec, change: int) -> None:
    """Add ``change`` to ``spec``'s outliving threads (under :data:`_LOCK`)."""
    key = id(spec)
    entry = _OUTLIVING.get(key)
    count = (0 if entry is None else entry[1]) + change
    if count > 0:
        _OUTLIVING[key] = (spec, count)
    else:
        del _OUTLIVING[key]


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
