"""What the count of threads outliving their calls is keyed by and bounded at, how it crosses
a fork, and what a sync call whose code never ran, or raised a TimeoutError of its own, answers.

Before: the count was kept per spec (``id(spec)``), and each registry copies its specs, so a
process building a registry per request started 200 threads of one tool and refused none; a
forked child kept its parent's counts for threads it does not have (the tool refused for good)
and, forked as a worker thread held the count's lock, deadlocked on its next sync call; a
prepare that raised its own ``TimeoutError`` (a socket's) was answered as its deadline passing,
after a millisecond; and a call whose deadline passed while it waited for a worker thread was
answered outcome ``unknown`` ("do not assume it ran"), though it never started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from airlock.policies import read, write
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
from airlock.tools._worker_threads import (
    _LOCK,
    _OUTLIVING,
    MOST_OUTLIVING,
    MOST_OUTLIVING_IN_PROCESS,
    WorkerThread,
    outliving,
    outliving_in_process,
)
from tests.tools.test_worker_threads import (
    ALICE,
    GRANT,
    READ,
    WRITE,
    Blocked,
    CancelArgs,
    Job,
    JobId,
    blocked,
    build_registry,
    fail,
    spec_of,
)

__all__ = ["blocked"]  # (the fixture, shared)


def context(n: int | str = "c") -> Any:
    return RunAuthority(principal=ALICE, grant=GRANT, run_id="r").context("direct", f"c{n}")


async def all_ended() -> None:
    """Wait until no thread of the process runs on past its call."""
    with anyio.fail_after(5):
        while outliving_in_process():
            await asyncio.sleep(0.01)


def tools_named(blocked: Blocked, names: list[str]) -> Registry:
    """One registry of read tools of those names, each as :func:`build_registry`'s read."""
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    for name in names:

        def handler(job_id: JobId) -> Job:
            return blocked.block(job_id)

        # (0.5 s: every call's thread starts before its deadline, even on a loaded machine)
        registry.tool(effects=[read("jobs:job/{job_id}")], scope="jobs.read", timeout=0.5,
                      name=name, description="Read one job from a blocking client. Use it to "
                      "test timeouts. It returns the job id only.")(handler)  # fmt: skip
    return registry


def per_request(blocked: Blocked) -> tuple[list[list[tuple[Registry, str]]], tuple[Registry, str]]:
    """The one read tool, from a registry built for each call."""
    fill = [[(build_registry(blocked, timeout=0.5), READ) for _ in range(MOST_OUTLIVING)]]
    return fill, (build_registry(blocked, timeout=0.5), READ)


def many_tools(blocked: Blocked) -> tuple[list[list[tuple[Registry, str]]], tuple[Registry, str]]:
    """Tools of many names, each with fewer outliving threads than its own bound."""
    each = MOST_OUTLIVING // 2
    names = [f"jobs_job_get{k}" for k in range(MOST_OUTLIVING_IN_PROCESS // each + 1)]
    registry = tools_named(blocked, names)
    # (a batch per tool: fewer calls at once than anyio's thread tokens, so each one starts)
    fill = [[(registry, name)] * each for name in names[:-1]]
    return fill, (registry, names[-1])


# case -> (the calls that leave threads running on, in batches; the call then refused,
#          what its message says)
BOUNDS: dict[str, tuple[Callable[..., Any], str]] = {
    "one_tool_from_a_registry_per_call": (per_request, f"{READ!r} has {MOST_OUTLIVING} calls"),
    "many_tools_up_to_the_process_bound": (
        many_tools,
        f"the host has {MOST_OUTLIVING_IN_PROCESS} tool calls still running",
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(BOUNDS))
async def test_outliving_threads_are_bounded_per_tool_name_and_in_the_process(
    case: str, blocked: Blocked
) -> None:
    build, message = BOUNDS[case]
    fill, (registry, name) = build(blocked)
    try:
        for batch in fill:
            answers = await asyncio.gather(
                *(
                    fail(r.call(tool, {"job_id": "j"}, context(n)))
                    for n, (r, tool) in enumerate(batch)
                )
            )
            assert {a.code for a in answers} == {"timeout"}
        started = sum(map(len, fill))
        assert (blocked.started, outliving_in_process()) == (started, started)

        refused = await fail(registry.call(name, {"job_id": "j"}, context()))
        assert (refused.code, refused.outcome, refused.retryable) == ("upstream", "error", True)
        assert message in refused.message
        assert blocked.started == started  # nothing ran for it
        assert all(isinstance(key, str) for key in _OUTLIVING)  # (names: no spec kept)
    finally:
        blocked.release.set()
        await all_ended()
    assert _OUTLIVING == {}


def in_a_child(report: Callable[[], object]) -> object:
    """What ``report()`` returns in a forked child (through JSON): its error's repr if it
    raised, what ended it if it hung (an alarm) or died."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the child: it never returns into pytest)
        try:
            os.close(read_end)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # (not pytest-timeout's)
            signal.alarm(5)  # a child that hangs ends so
            try:
                answer = report()
            except BaseException as exc:
                answer = repr(exc)
            os.write(write_end, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"ended by signal {os.WTERMSIG(status)}"
    return json.loads(data)


def a_call_in_this_process(spec: ToolSpec, before: Callable[[], object]) -> Callable[[], object]:
    """In the child: ``before()``, then the counts and how a sync call of ``spec`` ends."""

    def report() -> object:
        before()

        async def call() -> str:
            with anyio.move_on_after(2):
                return await WorkerThread(spec).run(lambda: "ran")
            return "timed out"

        counts = [outliving(spec), outliving_in_process()]
        try:
            return [*counts, asyncio.run(call())]
        except ToolError as exc:
            return [*counts, exc.code]

    return report


def given_up(spec: ToolSpec) -> WorkerThread:
    """A call that gave up on its thread, which runs on (its end left to the test)."""
    thread = WorkerThread(spec)
    thread._started = True
    thread._give_up()
    return thread


@contextlib.contextmanager
def threads_running_on(spec: ToolSpec) -> Iterator[Callable[[], object]]:
    threads = [given_up(spec) for _ in range(MOST_OUTLIVING)]
    yield lambda: None
    for thread in threads:
        thread._thread_ended()


@contextlib.contextmanager
def lock_held(spec: ToolSpec) -> Iterator[Callable[[], object]]:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _LOCK:
            held.set()
            release.wait(0.3)  # (the fork waits for it)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    yield lambda: None
    holder.join()


@contextlib.contextmanager
def ending_in_the_child(spec: ToolSpec) -> Iterator[Callable[[], object]]:
    threads = [given_up(spec) for _ in range(MOST_OUTLIVING)]
    yield threads[0]._thread_ended  # (the thread that forked, its call given up on)
    for thread in threads:
        thread._thread_ended()


# case -> (the parent at the fork, giving what the child does first)
FORKS = {
    "counts_of_threads_running_on_in_the_parent": threads_running_on,
    "lock_held_by_a_thread_of_the_parent": lock_held,
    "thread_counted_in_the_parent_ending_in_the_child": ending_in_the_child,
}


@pytest.mark.parametrize("case", sorted(FORKS))
def test_a_forked_child_counts_none_of_its_parents_threads(case: str) -> None:
    spec = spec_of(build_registry(Blocked()), READ)
    with FORKS[case](spec) as first:
        seen = in_a_child(a_call_in_this_process(spec, first))
    assert seen == [0, 0, "ran"]
    assert (outliving(spec), outliving_in_process()) == (0, 0)  # (the parent's, counted out)


def raising_timeout(*args: object) -> Job:
    raise TimeoutError("connect timed out")  # (a socket's own timeout)


async def raising_timeout_async(*args: object) -> Job:
    raise TimeoutError("connect timed out")


def prepared_by(prepare: Callable[..., Any]) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))
    registry.register(
        write_tool(
            name=WRITE,
            description="Cancel one job. Use it to test errors. It returns the job id only.",
            input_model=CancelArgs,
            effect_model=Job,
            receipt_model=Job,
            prepare=prepare,
            commit=lambda effect, key: {"job_id": effect.job_id},
            effects=[write("jobs:job/{job_id}")],
            scope="jobs.write",
            timeout=5,
        )
    )
    return registry


# case -> the prepare that raises a TimeoutError of its own, at once
PREPARES = {"sync": raising_timeout, "async": raising_timeout_async}


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(PREPARES))
async def test_a_timeout_error_of_prepare_is_its_failure_not_its_deadline(
    case: str, tmp_path: Path
) -> None:
    registry = prepared_by(PREPARES[case])
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    try:
        error = await fail(WritePath(registry, ledger).call(WRITE, {"job_id": "j"}, context()))
    finally:
        ledger.close()
    assert (error.code, error.outcome, error.message) == (
        "upstream",
        "error",
        "preparing the change failed; nothing was changed",
    )
    assert "TimeoutError: connect timed out" in (error.detail or "")


@pytest.mark.anyio
@pytest.mark.parametrize("tool", [READ, WRITE])
async def test_a_call_whose_deadline_passed_before_a_thread_took_it_did_not_run(
    tool: str, blocked: Blocked, tmp_path: Path
) -> None:
    registry = build_registry(blocked)
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    call = WritePath(registry, ledger).call if tool == WRITE else registry.call
    free = threading.Event()
    limiter = anyio.to_thread.current_default_thread_limiter()
    # Every thread token taken (by other work of the process): the call waits for one.
    holders = [
        asyncio.ensure_future(anyio.to_thread.run_sync(free.wait))
        for _ in range(int(limiter.total_tokens))
    ]
    try:
        while limiter.borrowed_tokens < limiter.total_tokens:
            await asyncio.sleep(0.001)
        error = await fail(call(tool, {"job_id": "j"}, context()))
    finally:
        free.set()
        await asyncio.gather(*holders)
        ledger.close()
    assert isinstance(error, ToolTimeoutError)
    assert (error.code, error.outcome, error.handler_running) == ("timeout", "error", None)
    assert "it did not run" in error.message
    await asyncio.sleep(0.05)
    assert (blocked.started, outliving_in_process()) == (0, 0)
