"""What ``tools.NAME.aio(...)`` returns is taken wherever a coroutine is: ``create_task``, a
``TaskGroup``, ``asyncio.run``, ``gather`` and ``wait_for`` (it was a future, or an awaitable
of its own: ``create_task`` refused it with ``TypeError`` after its call had left). The image's
own guest half against the real host server, as in ``test_guest_calls``; in a container, and
in restricted mode, in ``test_guest_aio_docker``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.test_guest_calls import audited_ok, bridge, total

Program = Callable[[Any], Coroutine[Any, Any, Any]]


async def _create_task(tools: Any) -> Any:
    return await asyncio.create_task(tools.records_item_get.aio(record_id="rec_1"))


async def _task_group(tools: Any) -> Any:
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(tools.records_item_get.aio(record_id=f"rec_{n}")) for n in (1, 2)
        ]
    return [task.result() for task in tasks]


async def _gather_200(tools: Any) -> Any:
    calls = [tools.records_item_get.aio(record_id=f"rec_{n}") for n in range(1, 201)]
    return await asyncio.gather(*calls)


async def _gather_of_tasks(tools: Any) -> Any:
    calls = [tools.records_item_get.aio(record_id=f"rec_{n}") for n in (3, 4)]
    return await asyncio.gather(*[asyncio.ensure_future(c) for c in calls])


async def _wait_for(tools: Any) -> Any:
    return await asyncio.wait_for(tools.records_item_get.aio(record_id="rec_5"), 10)


async def _wait_for_a_task(tools: Any) -> Any:
    return await asyncio.wait_for(
        asyncio.create_task(tools.records_item_get.aio(record_id="rec_6")), 10
    )


async def _timed_out_task(tools: Any) -> Any:
    # The task wrapping the call times out: the call is cancelled on the host too.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(
            asyncio.create_task(tools.records_slow_get.aio(record_id="rec_1")), 0.05
        )
    return [await tools.records_item_get.aio(record_id="rec_7")]


async def _task_cancelled_before_its_step(tools: Any) -> Any:
    task = asyncio.create_task(tools.records_slow_get.aio(record_id="rec_2"))
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return [task.cancelled(), await tools.records_item_get.aio(record_id="rec_8")]


# (case, the program's coroutine, its value seen through total(), calls sent, calls answered ok)
PROGRAMS: list[tuple[str, Program, Any, int, int]] = [
    ("create_task", _create_task, 10, 1, 1),
    ("task_group", _task_group, [10, 20], 2, 2),
    ("gather_200", _gather_200, [n * 10 for n in range(1, 201)], 200, 200),
    ("gather_of_tasks", _gather_of_tasks, [30, 40], 2, 2),
    ("wait_for", _wait_for, 50, 1, 1),
    ("wait_for_a_task", _wait_for_a_task, 60, 1, 1),
    ("timed_out_task", _timed_out_task, [70], 2, 1),
    ("task_cancelled_before_its_step", _task_cancelled_before_its_step, [True, 80], 2, 1),
]


def _seen(value: Any) -> Any:
    if isinstance(value, list):
        return [_seen(v) for v in value]
    return total(value) if isinstance(value, dict) else value


@pytest.mark.parametrize(
    ("case", "program", "value", "sent", "ok"), PROGRAMS, ids=[row[0] for row in PROGRAMS]
)
def test_an_awaitable_call_is_taken_as_a_coroutine(
    tmp_path: Path, case: str, program: Program, value: Any, sent: int, ok: int
) -> None:
    with bridge(tmp_path) as (tools, _, session, host):
        got = asyncio.run(program(tools))
    assert host.outcome == {"type": "done", "result": None}
    assert _seen(got) == value, case
    assert session.calls == sent, case
    assert audited_ok(session) == ok, case


def test_an_awaitable_call_made_where_no_loop_runs_is_a_coroutine(tmp_path: Path) -> None:
    with bridge(tmp_path) as (tools, _, session, host):
        made = [tools.records_item_get.aio(record_id=f"rec_{n}") for n in (1, 2, 3)]
        direct = asyncio.run(made[0])

        async def in_a_task() -> Any:
            return await asyncio.create_task(made[1])

        tasked = asyncio.run(in_a_task())
        assert asyncio.iscoroutine(made[2])
        made[2].close()  # never sent
        with pytest.raises(RuntimeError):
            asyncio.run(made[2])
    assert host.outcome == {"type": "done", "result": None}
    assert (total(direct), total(tasked)) == (10, 20)
    assert session.calls == 2


def test_a_refused_awaitable_made_where_no_loop_runs_sends_nothing(tmp_path: Path) -> None:
    with bridge(tmp_path) as (tools, _, session, host):
        call = tools.records_item_get.aio(record_id="rec_1")

        async def main() -> None:
            with pytest.raises(TypeError):  # asyncio refuses a coroutine here, as any
                await asyncio.wait([call])
            call.close()
            await asyncio.sleep(0.05)

        asyncio.run(main())
    assert host.outcome == {"type": "done", "result": None}
    assert session.calls == 0
