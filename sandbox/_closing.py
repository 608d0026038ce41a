"""Bounded waits for :meth:`DockerBackend.close`: an engine slow or stalled must not hold it.

Each wait gives up after its timeout and says what it left: a removal still in flight goes on
in the background (the engine finishes it later), and a container the engine never removes is
its closed owner's (:func:`~airlock.sandbox._owner.retire`), so the next backend to start, in
this process or another, reaps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, Final, TypeVar

import docker

from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._engine_thread import on_engine_thread
from airlock.sandbox._errors import SandboxClosed, SandboxError
from airlock.sandbox._launch import AFTER_START
from airlock.sandbox._owner import labelled_containers, remove_container

__all__ = ["Starts", "cut_off_by_close", "destroy", "settle", "sweep"]

T = TypeVar("T")

_log = logging.getLogger(__name__)
_lingering: set[asyncio.Future[Any]] = set()
"""Work a wait gave up on, held until it ends (the loop keeps only weak references)."""
_LATER_MOST: Final = 16
"""Work left by starts going on at once, at most (a start finding more leaves its own
undone: the backend's last sweep, or the next backend's reaper, does it)."""


class Starts:
    """Container starts in progress, each in a task of its own so that :meth:`cancel` can end
    it (a start removes what it made when cancelled) and its caller learns that the backend
    closed, not of a cancellation it did not ask for; and the work those starts left to go on
    after them (:data:`~airlock.sandbox._launch.AFTER_START`: looking for a container a
    create made too late), :data:`_LATER_MOST` at once, which :meth:`cancel` ends too."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._later: set[asyncio.Task[Any]] = set()
        self._cancelled = False

    async def run(self, start: Coroutine[Any, Any, T], *, discard: Callable[[T], object]) -> T:
        """What ``start`` returns; ``discard`` gets it instead when the caller is cancelled
        after it returned, before the caller could take it (a start that had just finished,
        or one :meth:`cancel` cancelled that swallowed its cancel, as 3.11's ``wait_for``
        may). A ``discard`` that raises is logged: the cancellation goes on.

        Raises:
            SandboxClosed: :meth:`cancel` ended it.
        """
        context = contextvars.copy_context()
        context.run(AFTER_START.set, self._go_on)
        task = asyncio.get_running_loop().create_task(start, context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            return await task
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if task.cancelled() and not (caller and caller.cancelling()):
                raise SandboxClosed() from None
            if task.done() and not task.cancelled() and task.exception() is None:
                try:
                    discard(task.result())  # (made, and nobody would take it)
                except Exception:
                    _log.exception("could not discard a start its caller left")
            raise

    def _go_on(self, work: Coroutine[Any, Any, object]) -> bool:
        """Run ``work`` after the start that left it, unless :data:`_LATER_MOST` are running
        or :meth:`cancel` came (then it is closed undone): whether it runs."""
        if self._cancelled or len(self._later) >= _LATER_MOST:
            work.close()
            return False
        task = asyncio.ensure_future(work)
        self._later.add(task)
        task.add_done_callback(self._later.discard)
        return True

    def cancel(self) -> list[asyncio.Task[Any]]:
        """Cancel every start in progress and the work starts left; returns them, to wait
        for."""
        self._cancelled = True  # (a start it cancels leaves no work that outlives this)
        tasks = [*self._tasks, *self._later]
        for task in tasks:
            task.cancel()
        return tasks


@contextlib.contextmanager
def cut_off_by_close(closed: Callable[[], str | bool]) -> Iterator[None]:
    """Around a run: a :class:`SandboxError` it raises once ``closed()`` becomes
    :class:`SandboxClosed` (with ``closed()``'s message, when it is one). Whatever broke (a
    runner killed under its program, a connection never opened), :meth:`~DockerBackend.close`
    broke it, and a retry could only be refused: none may be asked for. A run's result stays
    what it is."""
    try:
        yield
    except SandboxError as exc:
        said = closed()
        if said and not isinstance(exc, SandboxClosed):
            raise (SandboxClosed(said) if isinstance(said, str) else SandboxClosed()) from exc
        raise


async def destroy(container: SandboxContainer) -> bool:
    """Whether the engine removed ``container``; its failure to is logged, not raised (what
    the engine leaves, :func:`sweep` or the next backend's reaper removes)."""
    try:
        await container.destroy()
    except SandboxError as exc:
        _log.warning("could not destroy sandbox container %s: %s", container.id, exc)
        return False
    return True


async def settle(work: Iterable[Awaitable[Any]], *, timeout: float, what: str) -> int:
    """Run ``work`` concurrently for at most ``timeout`` seconds; log what failed and what
    did not end. Returns how many did not end (they go on)."""
    tasks = [asyncio.ensure_future(item) for item in work]
    if not tasks:
        return 0
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            _log.warning("%s: %s", what, task.exception())
    for task in pending:
        _lingering.add(task)
        task.add_done_callback(_lingering.discard)
    if pending:
        _log.warning("%s: %d did not end within %.1f s; they go on", what, len(pending), timeout)
    return len(pending)


async def sweep(client: docker.DockerClient, owner: str, *, timeout: float) -> None:
    """Remove every container still labelled as ``owner``'s, all at once, within ``timeout``
    seconds in all (listing included)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        async with asyncio.timeout_at(deadline):
            leftovers = await on_engine_thread(labelled_containers, client, owner=owner)
    except (TimeoutError, SandboxError) as exc:
        _log.warning("the engine did not list the sandbox containers left: %r", exc)
        return
    await settle(
        (on_engine_thread(remove_container, client, str(entry["Id"])) for entry in leftovers),
        timeout=max(deadline - loop.time(), 0.0),
        what="removing the sandbox containers left",
    )
