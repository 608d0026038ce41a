"""A kept sandbox: one container for one conversation, so programs build on earlier state.

Every other run gets a fresh container; a kept sandbox instead sends each program of one
principal's conversation to the same container. It is never shared: programs of another
principal are refused. Each program still runs in a fresh process, forked for it once every
process of the previous program is gone, over a bridge connection of its own (see
:mod:`airlock.sandbox._container`); what it finds from earlier programs is explicit: files
under ``/tmp`` and the earlier programs' top-level names that are plain data, plain functions
or imported modules (the guest's ``airlock_kept`` says exactly which).

The container goes away after ``idle_timeout`` seconds without a program, after a program hits
a limit or breaks the protocol, and on :meth:`close`; the next program then starts a new
container with empty state, and :attr:`starts` counts up. So does a program that finds the
container ended since the last one (its runner gone before the program reached it). Every
wait is bounded: a program waiting for the one before it counts that wait against its own
deadline, and :meth:`close` does not wait for a program in flight: it removes the container
under it, and that program's run, and any waiting for it, raise :class:`SandboxClosed`
within a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from airlock.bridge import ToolSession
from airlock.policies import Principal, SandboxProfile, UsageError
from airlock.sandbox._closing import cut_off_by_close, destroy
from airlock.sandbox._container import LEAST_LEFT_S, SandboxContainer
from airlock.sandbox._errors import RunnerExited, SandboxClosed, SandboxFailure
from airlock.sandbox._program_size import refuse_oversized
from airlock.sandbox._result import ProgramError, RunResult

__all__ = ["KeptSandbox"]

_log = logging.getLogger(__name__)
_DROP_AFTER: Final = frozenset({"limit_exceeded", "protocol_error"})
_CLOSE_WAIT_S: Final = 5.0
"""How long :meth:`KeptSandbox.close` waits for a program in flight to notice its end."""


class KeptSandbox:
    """Programs of one principal's conversation, one at a time, in one kept container.

    Build it with :meth:`DockerBackend.keep`. Programs run one after another (a second
    waits for the first). Close it when the conversation ends. ``start`` makes a container
    of the kept profile it is given, whose ``timeout_s`` is what is left of the deadline of
    the run waiting for it: it waits for the engine no longer.
    """

    def __init__(
        self,
        start: Callable[[SandboxProfile], Awaitable[SandboxContainer]],
        *,
        owner: Principal,
        profile: SandboxProfile,
        idle_timeout: float,
        max_program_bytes: int,
        container_settings: Callable[[SandboxProfile], object],
        inputs: tuple[str, ...] = (),
        clean: bool = False,
        backend_closed: Callable[[], bool] = lambda: False,
    ) -> None:
        if idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive, not {idle_timeout!r}")
        self.owner = owner
        self.profile = profile
        self.inputs = inputs
        """Names of the inputs mounted for the whole conversation (``/data/NAME``)."""
        self.idle_timeout = idle_timeout
        self.clean = clean
        """Each program starts with an empty ``/tmp`` and no names kept: the container is
        reused for speed, and nothing of one program reaches the next but the counters the
        container keeps (its pid counter, ``/tmp``'s inode numbers, its runner's accounting
        of the processes it reaped)."""
        self.last_used = time.monotonic()
        self._waiting = 0
        self.starts = 0
        """Containers started so far; a new one means earlier state is gone."""
        self._last_start_s = 0.0
        """How long the last container start took (none yet: 0)."""
        self._start = start
        self._max_program_bytes = max_program_bytes
        self._settings = container_settings
        self._container: SandboxContainer | None = None
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._expiring: set[asyncio.Task[None]] = set()
        self._removals: set[asyncio.Future[bool]] = set()
        self._closing_removal: asyncio.Future[bool] | None = None
        """:meth:`close`'s removal of the container a program may still run in."""
        self._closed = False
        self._backend_closed = backend_closed
        """Whether the backend that starts its containers is closed (which closes this too,
        but in a task of its own: a run may hear of it first)."""

    @property
    def busy(self) -> bool:
        """Whether a program runs, or waits to run, now."""
        return self._lock.locked() or self._waiting > 0

    @property
    def alive(self) -> bool:
        """Whether a container with state is waiting for the next program."""
        return self._container is not None and self._container.alive

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile | None = None,
        tools: ToolSession | None = None,
        artifacts: Path | None = None,
    ) -> RunResult:
        """Run ``program`` in the kept container (starting one when there is none).

        ``profile`` may change per-run settings (deadline, output cap, language mode), not
        what is fixed when a container starts (memory, cpus, pids, image...). ``artifacts``
        is where the files this program leaves in ``/out`` are stored (``/out`` is emptied
        after each program).

        Raises:
            UsageError: ``tools`` acts for another principal than the owner, the profile
                changes container settings, or the sandbox was closed (by :meth:`close`)
                before this call.
            SandboxClosed: its backend was closed before this call; or the sandbox or its
                backend was closed after this call began, and
                cut it off: while it waited for the program before it, while its container
                started, or while its program ran and that close ended its runner (not
                retryable; its message says which was closed).
            SandboxError: a container could not be started.
        """
        profile = profile or self.profile
        if self._settings(profile) != self._settings(self.profile):
            raise UsageError("a kept sandbox's image, memory, cpus and pids cannot change per run")
        if tools is not None and _identity(tools.principal) != _identity(self.owner):
            raise UsageError(
                f"this kept sandbox belongs to {self.owner.user_id!r}@{self.owner.tenant_id!r}; "
                "another principal's programs run in their own"
            )
        refused = refuse_oversized(program, limit=self._max_program_bytes)
        if refused is not None:
            return refused
        if self._closed:  # (a call after close(); one it cuts off is told SandboxClosed)
            if self._backend_closed():  # (the caller closed nothing: a server shutting down)
                raise SandboxClosed()
            raise UsageError("this kept sandbox is closed; open another")
        began = time.perf_counter()
        # The program before this one ends by its own deadline; waiting for it counts
        # against this program's, so no call waits longer than its deadline.
        self._waiting += 1
        try:
            acquired = await _acquire(self._lock, profile.timeout_s, alone=self._waiting == 1)
        finally:
            self._waiting -= 1
        if not acquired:
            return _timed_out(
                f"the conversation's previous program was still running after "
                f"{profile.timeout_s:g} s, this program's deadline; it did not run",
                time.perf_counter() - began,
            )
        try:
            # Whatever breaks once either is closed (its container removed under the program,
            # the start cut off), close() broke: a retry could only be refused.
            with cut_off_by_close(self._closed_how):
                return await self._run_held(program, profile, tools, artifacts, began)
        finally:
            self.last_used = time.monotonic()
            self._lock.release()

    def _closed_how(self) -> str | bool:
        """What a run cut off by a close is told: the backend's close, or this sandbox's."""
        if self._backend_closed():
            return True
        return self._closed and "this kept sandbox was closed; open another"

    def _cut_off(self, how: str) -> SandboxClosed:
        """What a run that began before a close, and that close cut off, raises: the
        backend's close, or this sandbox's (``how``: what it was doing then)."""
        if self._backend_closed():
            return SandboxClosed()
        return SandboxClosed(f"this kept sandbox was closed {how}; open another")

    async def _run_held(
        self,
        program: str,
        profile: SandboxProfile,
        tools: ToolSession | None,
        artifacts: Path | None,
        began: float,
    ) -> RunResult:
        """:meth:`run`'s part under the lock."""
        if self._closed:
            # close() came while this run waited for the program before it: the lock is
            # handed to the waiters in turn before close() takes it.
            raise self._cut_off("while this program waited for the one before it")
        self._cancel_timer()
        container = self._container
        if container is not None and not container.alive:
            self._drop_later()
            container = None
        args = (program, profile, tools, artifacts, began)
        if container is not None:
            try:
                return self._after(await self._run_in(container, *args), container, began)
            except RunnerExited as exited:
                if self._closed:
                    raise
                # The container ended between programs (under gVisor, what the one before
                # left can run it out of memory): this program never reached it, and runs
                # in a new one.
                _log.warning("kept sandbox of %s: %s", self.owner.user_id, exited)
        started = await self._start_for(profile, began)
        if isinstance(started, RunResult):
            return started
        return self._after(await self._run_in(started, *args), started, began)

    async def _run_in(
        self,
        container: SandboxContainer,
        program: str,
        profile: SandboxProfile,
        tools: ToolSession | None,
        artifacts: Path | None,
        began: float,
    ) -> RunResult:
        """Run the program in ``container``; a run that raises leaves it to go."""
        try:
            return await container.run(
                program,
                profile=profile,
                pooled=False,
                tools=tools,
                keep=True,
                clean=self.clean,
                artifacts=artifacts,
                began=began,  # waiting for the one before and for a start counts against it
            )
        except BaseException:
            if self._closed:
                self._removed_by_close(container)
            else:
                self._drop_later()
            raise

    def _after(self, result: RunResult, container: SandboxContainer, began: float) -> RunResult:
        """Keep ``container`` for the next program, or let it go, by how the run ended."""
        died = result.error is not None and result.error.type == "RunnerDied"
        if self._closed:
            # The conversation is over, no idle timer may keep it.
            self._removed_by_close(container)
        elif result.status in _DROP_AFTER or died or not container.alive:
            self._drop_later()  # the result does not wait for the engine's removal
        else:
            self._timer = asyncio.get_running_loop().call_later(self.idle_timeout, self._expire)
        return result.model_copy(update={"duration_s": time.perf_counter() - began})

    async def _start_for(
        self, profile: SandboxProfile, began: float
    ) -> SandboxContainer | RunResult:
        """A new container for the run that ``began`` (a ``time.perf_counter()``), within
        what is left of its deadline; the run's result when too little is left."""
        waited = time.perf_counter() - began
        left = profile.timeout_s - waited
        if left < LEAST_LEFT_S:  # no container starts that fast
            return _timed_out(
                f"this program's deadline of {profile.timeout_s:g} s was over before "
                "a container could start for it; it did not run",
                waited,
            )
        if waited >= LEAST_LEFT_S and left < self._last_start_s:
            # It spent its deadline waiting for the program before it, not on a slow engine:
            # its timeout, not the engine's, and no start asked for that could not make it.
            return _timed_out(
                f"this program waited {waited:.2f} s of its deadline of {profile.timeout_s:g} s "
                f"for the conversation's previous program, and the {left:.2f} s left were too "
                f"few to start a new container (the last start took {self._last_start_s:.2f} "
                "s); it did not run",
                waited,
            )
        # Waited for by what is left of this run's deadline, not by the kept profile's:
        # the harness shortens a run's to what its session has left.
        asked = time.perf_counter()
        container = await self._start(self.profile.model_copy(update={"timeout_s": left}))
        self._last_start_s = time.perf_counter() - asked
        if self._closed:
            # close() came during the start (which may take many seconds) and found
            # no container to remove: this one is nobody's, and nothing runs in it.
            # Removed off the run's path (close() waits for it): the run returns by
            # its deadline, and releases the lock close() waits for, at once.
            self._remove_later(container)
            raise self._cut_off("while its container started")
        self._container = container
        self.starts += 1
        return container

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        task = asyncio.get_running_loop().create_task(self._expire_now(self._timer))
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire_now(self, timer: asyncio.TimerHandle | None) -> None:
        async with self._lock:
            # A program that started meanwhile replaced the timer: the container stays.
            if timer is not None and self._timer is timer:
                self._timer = None
                _log.info("kept sandbox of %s idle: container removed", self.owner.user_id)
                self._drop_later()

    def _removed_by_close(self, container: SandboxContainer) -> None:
        """After :meth:`close`, of the container a program ran in: close's removal of it
        goes on, and only one that failed is tried again, in the background too (the
        result waits for no removal, and none is asked of the engine twice at once)."""
        removal = self._closing_removal
        if removal is None or (removal.done() and (removal.cancelled() or not removal.result())):
            self._remove_later(container)

    def _drop_later(self) -> None:
        """Forget the container now and remove it in the background (:meth:`close` waits)."""
        container, self._container = self._container, None
        if container is not None:
            self._remove_later(container)

    def _remove_later(self, container: SandboxContainer) -> asyncio.Future[bool]:
        task = asyncio.ensure_future(destroy(container))
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)
        return task

    async def close(self) -> None:
        """Remove the container, even under a program in flight: its run raises
        :class:`SandboxClosed` within a bounded time, its runner gone (a result that came
        first stands), and so do runs waiting for it. A container still starting is removed
        in the background once the start ends (its run raises :class:`SandboxClosed` at once;
        this waits for that removal too). Calls made after this are refused
        (:class:`UsageError`). Returns within :data:`_CLOSE_WAIT_S`, a removal the engine has
        not answered by then going on in the background."""
        self._closed = True
        self._cancel_timer()
        deadline = asyncio.get_running_loop().time() + _CLOSE_WAIT_S
        container, self._container = self._container, None
        if container is not None:  # (none on a second close)
            # Aborts its links: a program in flight returns, and its run leaves this
            # removal to go on.
            self._closing_removal = self._remove_later(container)
        try:
            async with asyncio.timeout_at(deadline), self._lock:
                pass  # the program in flight has ended
        except TimeoutError:
            _log.warning("a program of the kept sandbox of %s did not end", self.owner.user_id)
        for task in list(self._expiring):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, SandboxFailure):
                await task
        if self._removals:
            left = deadline - asyncio.get_running_loop().time()
            _, stuck = await asyncio.wait(list(self._removals), timeout=max(left, 0.0))
            if stuck:
                _log.warning("the kept container of %s is still being removed", self.owner.user_id)


async def _acquire(lock: asyncio.Lock, timeout: float, *, alone: bool) -> bool:
    """Acquire ``lock`` within ``timeout`` seconds; never leaves it held on ``False`` (nor
    when cancelled: :meth:`asyncio.Lock.acquire` gives up a lock it was handed then). With
    ``alone`` (no other run waits for it, one woken and not yet running included), a free
    lock is taken at once, with no timer: arming one cost a warm run 50 us."""
    if alone and not lock.locked():
        return await lock.acquire()
    try:
        async with asyncio.timeout(timeout):
            await lock.acquire()
    except TimeoutError:
        return False
    return True


def _timed_out(message: str, waited: float) -> RunResult:
    return RunResult(
        status="limit_exceeded",
        exit_status=137,
        has_value=False,
        limit="timeout",
        error=ProgramError(type="LimitExceeded", message=message),
        duration_s=waited,
    )


def _identity(principal: Principal) -> tuple[str, str]:
    return principal.user_id, principal.tenant_id
