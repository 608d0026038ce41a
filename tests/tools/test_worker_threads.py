"""A sync handler (or ``prepare``) past its deadline is abandoned, never stopped: its thread
runs on, counted against its tool until it ends. A tool with ``MOST_OUTLIVING`` such threads
takes no more calls (``upstream``, retryable, outcome ``error``: nothing ran) until some end;
the count goes back to nothing, and the process keeps no entry of the tool, once they have.

Before, each timed-out call's thread ran on uncounted, and a program could start any number
of them (1,500 blocked handler threads at once, from one program). A call cancelled before
its thread started (waiting for one of anyio's thread tokens, or at its deadline) never runs
and is not counted: counted, its tool was refused for good after 16 of them, and in the
bridge such a call kept its place forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Annotated

import anyio
import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import Grant, Principal, read, write
from airlock.tools import (
    AuditLog,
    MemoryAuditStore,
    Registry,
    RunAuthority,
    SQLiteLedgerStore,
    ToolError,
    ToolSpec,
    ToolTimeoutError,
    WritePath,
    write_tool,
)
from airlock.tools._worker_threads import _OUTLIVING, MOST_OUTLIVING, WorkerThread, outliving

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"jobs.read", "jobs.write"}))
GRANT = Grant(
    scopes=frozenset({"jobs.read", "jobs.write"}),
    effects=(read("jobs:job/*"), write("jobs:job/*")),
)
JobId = Annotated[str, Field(max_length=20)]
READ, WRITE = "jobs_job_get", "jobs_job_cancel"


class Job(BaseModel):
    job_id: str


class CancelArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    job_id: JobId


class Blocked:
    """Sync tool code that blocks until :attr:`release` is set; counts how many run at once,
    from their threads."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.now = 0
        self.peak = 0
        self.started = 0
        self._lock = threading.Lock()

    def block(self, job_id: str) -> Job:
        with self._lock:
            self.now += 1
            self.started += 1
            self.peak = max(self.peak, self.now)
        try:
            self.release.wait(10)  # (a safety: the tests set it)
        finally:
            with self._lock:
                self.now -= 1
        return Job(job_id=job_id)

    def wait_idle(self) -> None:
        deadline = time.monotonic() + 5
        while self.now and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.now == 0, "handlers still running"


@pytest.fixture
def blocked() -> Iterator[Blocked]:
    b = Blocked()
    try:
        yield b
    finally:
        b.release.set()
        b.wait_idle()


def build_registry(blocked: Blocked, *, proposable: bool = False, timeout: float = 0.1) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("jobs:job/{job_id}")], scope="jobs.read",
                   callers={"direct", "code"}, timeout=timeout)  # fmt: skip
    def jobs_job_get(job_id: JobId) -> Job:
        """Read one job from a blocking client. Use it to test timeouts.
        It returns the job id only."""
        return blocked.block(job_id)

    registry.register(
        write_tool(
            name=WRITE,
            description="Cancel one job. Use it to test timeouts. It returns the job id only.",
            input_model=CancelArgs,
            effect_model=Job,
            receipt_model=Job,
            prepare=lambda args, principal: blocked.block(args.job_id),
            commit=lambda effect, key: {"job_id": effect.job_id},
            effects=[write("jobs:job/{job_id}")],
            scope="jobs.write",
            timeout=timeout,
            proposable=proposable,
        )
    )
    return registry


def spec_of(registry: Registry, name: str) -> ToolSpec:
    spec = registry.get(name)
    assert spec is not None
    return spec


async def ended(spec: ToolSpec) -> None:
    """Wait until none of ``spec``'s threads runs on past its call."""
    with anyio.fail_after(5):
        while outliving(spec):
            await asyncio.sleep(0.01)


async def fail(call: Awaitable[object]) -> ToolError:
    with pytest.raises(ToolError) as caught:
        await call
    return caught.value


# tool -> how its call is made (a read's handler; a write's prepare, proposed directly)
@pytest.mark.parametrize("tool", [READ, WRITE])
async def test_a_tool_with_most_outliving_threads_refuses_further_calls(
    tool: str, blocked: Blocked, tmp_path: Path
) -> None:
    # (0.5 s: each of the calls at once gets its thread before its deadline on a loaded machine)
    registry = build_registry(blocked, timeout=0.5)
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    writes = WritePath(registry, ledger)
    spec = spec_of(registry, tool)
    authority = RunAuthority(principal=ALICE, grant=GRANT, run_id="r")
    call = writes.call if tool == WRITE else registry.call
    try:
        timeouts = await asyncio.gather(
            *(
                fail(call(tool, {"job_id": f"j{n}"}, authority.context("direct", f"c{n}")))
                for n in range(MOST_OUTLIVING)
            )
        )
        assert [(e.code, e.outcome) for e in timeouts] == [
            ("timeout", "unknown" if tool == READ else "error")
        ] * MOST_OUTLIVING
        assert blocked.started == MOST_OUTLIVING
        assert outliving(spec) == MOST_OUTLIVING
        running = [e.handler_running for e in timeouts if isinstance(e, ToolTimeoutError)]
        assert len(running) == MOST_OUTLIVING
        assert all(f is not None and not f.done() for f in running)

        refused = await fail(call(tool, {"job_id": "j_more"}, authority.context("direct", "c")))
        assert (refused.code, refused.retryable, refused.outcome) == ("upstream", True, "error")
        assert f"{MOST_OUTLIVING} calls still running past their timeouts" in refused.message
        assert blocked.started == MOST_OUTLIVING  # no thread started for it
        last = registry.audit.events()[-1]
        assert (last.outcome, last.code) == ("error", "upstream")

        blocked.release.set()
        await ended(spec)
        assert spec.name not in _OUTLIVING  # nothing of the tool is kept
        with anyio.fail_after(5):
            await asyncio.gather(*(f for f in running if f is not None))
        # It takes calls again.
        assert await call(tool, {"job_id": "j_after"}, authority.context("direct", "a"))
        assert outliving(spec) == 0
    finally:
        blocked.release.set()
        await ended(spec)
        ledger.close()


async def test_a_thread_that_ends_in_time_is_never_counted(blocked: Blocked) -> None:
    registry = build_registry(blocked)
    spec = spec_of(registry, READ)
    blocked.release.set()
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r").context("direct", "c")
    for n in range(20):
        assert await registry.call(READ, {"job_id": f"j{n}"}, ctx) == {"job_id": f"j{n}"}
    assert outliving(spec) == 0
    assert spec.name not in _OUTLIVING


# The two orders the lock allows a thread that ends as its call gives up on it.
async def test_a_thread_that_ends_as_its_call_gives_up_is_not_left_counted() -> None:
    spec = spec_of(build_registry(Blocked()), READ)
    ended_first = WorkerThread(spec)
    ended_first._thread_ended()
    ended_first._give_up()
    assert (outliving(spec), ended_first.ended) == (0, None)

    gave_up_first = WorkerThread(spec)
    gave_up_first._started = True  # (its thread runs)
    gave_up_first._give_up()
    gave_up_first._give_up()  # (a second cancellation counts it once)
    assert outliving(spec) == 1
    future = gave_up_first.ended
    assert future is not None
    assert not future.done()
    gave_up_first._thread_ended()
    assert outliving(spec) == 0
    assert spec.name not in _OUTLIVING
    with anyio.fail_after(1):
        await future


async def test_a_call_cancelled_before_its_thread_started_never_runs_nor_counts() -> None:
    spec = spec_of(build_registry(Blocked()), READ)
    ran: list[int] = []
    free = threading.Event()
    limiter = anyio.to_thread.current_default_thread_limiter()
    # Every thread token taken (by other work of the process): the calls wait for one.
    holders = [
        asyncio.ensure_future(anyio.to_thread.run_sync(free.wait))
        for _ in range(int(limiter.total_tokens))
    ]
    try:
        while limiter.borrowed_tokens < limiter.total_tokens:
            await asyncio.sleep(0.001)
        for n in range(MOST_OUTLIVING + 4):
            call = WorkerThread(spec)
            with anyio.move_on_after(0.01):
                await call.run(lambda n=n: ran.append(n))  # type: ignore[misc]
            assert (outliving(spec), call.ended, call.never_ran) == (0, None, True)
    finally:
        free.set()
        await asyncio.gather(*holders)
    assert await WorkerThread(spec).run(lambda: "taken") == "taken"  # (not refused)
    await asyncio.sleep(0.05)
    assert (ran, outliving(spec), spec.name in _OUTLIVING) == ([], 0, False)


async def test_threads_that_end_at_their_cancel_leave_no_count() -> None:
    """The caller is cancelled just as its thread returns, again and again: whichever came
    first, nothing stays counted."""
    spec = spec_of(build_registry(Blocked()), READ)
    loop = asyncio.get_running_loop()
    for n in range(200):
        with anyio.CancelScope() as scope:

            def cancel_and_return(n: int = n) -> int:
                # Returning just after the cancel is scheduled (0 to 0.3 ms): sometimes the
                # thread has ended when the cancel reaches its caller, mostly not.
                loop.call_soon_threadsafe(scope.cancel)
                time.sleep(n % 4 / 10_000)
                return n

            await WorkerThread(spec).run(cancel_and_return)
    with anyio.fail_after(5):
        while outliving(spec):
            await asyncio.sleep(0.01)
    assert spec.name not in _OUTLIVING


async def test_the_error_of_a_timeout_keeps_its_thread_off_the_wire(blocked: Blocked) -> None:
    registry = build_registry(blocked)
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r").context("direct", "c")
    try:
        error = await fail(registry.call(READ, {"job_id": "j1"}, ctx))
        assert isinstance(error, ToolTimeoutError)
        assert error.handler_running is not None
        assert "handler_running" not in error.to_wire()
        assert ToolTimeoutError.wire_fields() == ("seconds",)
    finally:
        blocked.release.set()
        await ended(spec_of(registry, READ))


async def test_a_handler_denied_as_it_ran_on_says_its_thread_runs_on(blocked: Blocked) -> None:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("jobs:job/{job_id}")], scope="jobs.read",
                   callers={"direct", "code"}, timeout=0.5)  # fmt: skip
    def jobs_job_peek(job_id: JobId) -> Job:  # (0.5 s: its thread starts in time, loaded too)
        """Read one job, looking up a host it does not declare. Use it to test timeouts.
        It returns the job id only."""
        with contextlib.suppress(PermissionError):  # refused before any lookup is made
            socket.getaddrinfo("undeclared.example", 443)
        return blocked.block(job_id)

    spec = spec_of(registry, "jobs_job_peek")
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r").context("direct", "c")
    try:
        error = await fail(registry.call("jobs_job_peek", {"job_id": "j1"}, ctx))
        assert error.code == "denied"
        timeout = error.__cause__
        assert isinstance(timeout, ToolTimeoutError)
        assert timeout.handler_running is not None
        assert not timeout.handler_running.done()
        assert outliving(spec) == 1
        blocked.release.set()
        with anyio.fail_after(5):
            await timeout.handler_running
    finally:
        blocked.release.set()
        await ended(spec)
