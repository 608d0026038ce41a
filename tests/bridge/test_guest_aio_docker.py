"""``tools.NAME.aio(...)`` taken wherever a coroutine is, in a real container and in both
language modes: ``create_task`` (it raised ``TypeError`` after the call had left), a
``TaskGroup`` (the program saw "unhandled errors in a TaskGroup"), ``asyncio.run`` of the call
itself (``ValueError``), a ``gather`` of 200, and ``wait_for`` whose timeout cancels the call
on the host. The values come back right, and the run's ``tool_calls`` counts what was sent."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.bridge import ToolSession
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

GET = "tools.records_item_get.aio(record_id='rec_{n}')"
SLOW = "tools.records_slow_get.aio(record_id='rec_{n}')"
MAIN = "import asyncio\nasync def main():\n{body}\nr = asyncio.run(main())\nr['total']\n"


def _main(*lines: str) -> str:
    return MAIN.format(body="\n".join("    " + line for line in lines))


# (case, program, final value, tool_calls, calls audited ok)
PROGRAMS: list[tuple[str, str, Any, int, int]] = [
    ("create_task", _main(f"return await asyncio.create_task({GET.format(n=1)})"), 10, 1, 1),
    (
        "task_group",
        _main(
            "async with asyncio.TaskGroup() as group:",
            "    tasks = [",
            "        group.create_task(tools.records_item_get.aio(record_id=f'rec_{n}'))",
            "        for n in (2, 3)",
            "    ]",
            "return {'total': [t.result()['total'] for t in tasks]}",
        ),
        [20, 30],
        2,
        2,
    ),
    (
        "asyncio_run_of_the_call",
        f"import asyncio\nasyncio.run({GET.format(n=4)})['total']\n",
        40,
        1,
        1,
    ),
    (
        "gather_200",
        _main(
            "calls = [tools.records_item_get.aio(record_id=f'rec_{n}') for n in range(1, 201)]",
            "return {'total': sum(r['total'] for r in await asyncio.gather(*calls))}",
        ),
        sum(n * 10 for n in range(1, 201)),
        200,
        200,
    ),
    (
        "wait_for_cancels",
        _main(
            "try:",
            f"    await asyncio.wait_for(asyncio.create_task({SLOW.format(n=5)}), 0.05)",
            "except TimeoutError:",
            f"    return await {GET.format(n=6)}",
        ),
        60,
        2,
        1,
    ),
]


@pytest.mark.parametrize("mode", ["restricted", "full"])
@pytest.mark.parametrize(
    ("case", "program", "value", "calls", "ok"), PROGRAMS, ids=[row[0] for row in PROGRAMS]
)
def test_an_awaitable_call_is_taken_as_a_coroutine(
    sandbox: Sandbox, mode: str, case: str, program: str, value: Any, calls: int, ok: int
) -> None:
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=5.0)
    tools = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
    result = sandbox.run(program, tools=tools, language_mode=mode)
    assert result.status == "ok", (case, mode, result.error)
    assert result.value == value, case
    assert result.tool_calls == calls, case
    events = registry.audit.events(run_id=tools.run_id)
    assert sum(1 for e in events if e.outcome == "ok") == ok, case
