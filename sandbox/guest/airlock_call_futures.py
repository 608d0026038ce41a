"""The futures of a program's pending calls: resolved from whichever thread read their
results, and telling the connection when the program cancels one.

Standard library only; shipped in the image next to the runner. A call's future is an event
loop's (an awaitable call made on a running loop) or a thread-safe one (a call whose result a
thread waits for, or a loop in another thread through ``asyncio.wrap_future``). When the
program cancels an awaitable call (``asyncio.wait_for`` timed out, a task cancelled, a
``gather`` cancelled), the connection is told at once (:func:`loop_call`,
:func:`watch_cancel`): the host then cancels the call too, and its slot is free again.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable
    from concurrent.futures import Future
    from typing import Any, TypeGuard

    OnCancel = Callable[[int], None]

_loop_call_type: Any = None  # made once asyncio is loaded (airlock_asyncio), on first need


def loop_call(loop: asyncio.AbstractEventLoop, call_id: int, on_cancel: OnCancel) -> Any:
    """A future of ``loop`` for call ``call_id``; ``on_cancel(call_id)`` runs, in the loop's
    thread, when the program cancels it before its result came. (A subclass, not a done
    callback: a callback would cost every call a turn of the loop, not only cancelled ones.)
    """
    global _loop_call_type
    if _loop_call_type is None:
        asyncio = sys.modules["asyncio"]

        class LoopCall(asyncio.Future):  # type: ignore[name-defined,misc]
            """A call's future, and a coroutine that awaits it (registered as one below):
            ``gather``, ``wait_for`` and ``shield`` take it as the future it is, no task
            in between; ``create_task``, a ``TaskGroup`` and ``asyncio.run`` step it as a
            coroutine. Its frame left when it was made either way (``.aio`` sends at once).
            """

            __slots__ = ("_airlock_call", "_airlock_on_cancel")

            def cancel(self, msg: Any = None) -> bool:
                if not super().cancel(msg):
                    return False
                self._airlock_on_cancel(self._airlock_call)
                return True

            # A task steps it as ``await future`` would: a fresh iterator each step yields
            # the future while it is pending and returns its result once it is done.
            def send(self, value: Any) -> Any:
                return self.__await__().send(value)

            def throw(self, *exc: Any) -> Any:
                # Thrown into (its task cancelled before its first step): nothing awaits
                # the call any more, so the host cancels it too.
                self.cancel()
                return self.__await__().throw(*exc)

            def close(self) -> None:
                self.cancel()  # (done: nothing)

        import _collections_abc  # loaded: os imports it

        _collections_abc.Coroutine.register(LoopCall)
        _loop_call_type = LoopCall
    future = _loop_call_type(loop=loop)
    future._airlock_call = call_id
    future._airlock_on_cancel = on_cancel
    return future


def watch_cancel(future: Future[Any], call_id: int, on_cancel: OnCancel) -> None:
    """Call ``on_cancel(call_id)`` when the program cancels the thread-safe ``future`` (its
    ``asyncio.wrap_future`` was cancelled), in the thread that cancelled it."""

    def done(settled: Future[Any]) -> None:
        if settled.cancelled():
            on_cancel(call_id)

    future.add_done_callback(done)


def of_loop(future: Future[Any] | asyncio.Future[Any]) -> TypeGuard[asyncio.Future[Any]]:
    """Whether ``future`` is an event loop's (``concurrent.futures``' have no loop)."""
    return hasattr(future, "get_loop")


def settle(
    future: Future[Any] | asyncio.Future[Any],
    value: Any,
    error: BaseException | None,
    here: asyncio.AbstractEventLoop | None = None,
) -> None:
    """Resolve a call's future from whichever thread read its result: an event loop's
    future in the loop's own thread (``here``, when the reader knows it runs there), or
    through the loop from any other."""
    if of_loop(future):  # asyncio is loaded
        loop = future.get_loop()
        if loop is not here and sys.modules["asyncio"]._get_running_loop() is not loop:
            import contextlib  # loaded already: asyncio imports it

            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(settle, future, value, error)
            return
        if not future.done():  # (in its own thread: nothing can settle it meanwhile)
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)
        return
    if future.done():  # cancelled by the program, or already failed by an abort
        return
    # A call's future is cancelled from the program's thread (asyncio.wrap_future), so a
    # thread-safe future can still be cancelled between the check above and this.
    import contextlib
    from concurrent.futures import InvalidStateError  # loaded: the future is of its kind

    with contextlib.suppress(InvalidStateError):
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)


__all__ = ["loop_call", "of_loop", "settle", "watch_cancel"]
