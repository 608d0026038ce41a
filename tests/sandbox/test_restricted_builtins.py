"""Builtins a restricted program needs for the tools' API and asyncio: ``TimeoutError``
(``asyncio.timeout``), ``ExceptionGroup`` and ``BaseExceptionGroup`` (a ``TaskGroup``), and a
``hasattr`` that answers through the mode's attribute guard (``hasattr(tools, name)``, as
``UnknownTool``'s docstring says). Each was a ``NameError``. A name the guard refuses reads as
missing, no more; ``type`` stays out (it makes classes) and ``except*`` stays refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sandbox.test_guest_runner import run_in_process

TIMEOUT = """
import asyncio
async def main():
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)
    except TimeoutError as e:
        return 'timed out'
asyncio.run(main())
"""
GROUP = """
import asyncio
async def fails():
    raise ValueError('x')
async def main():
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(fails())
    except ExceptionGroup as eg:
        return [str(e) for e in eg.exceptions]
asyncio.run(main())
"""
TASKS = """
import asyncio
async def main():
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(tools.t.aio(arg=n)) for n in range(3)]
    return [t.result() for t in tasks]
asyncio.run(main())
"""
# (case, program, status, final value or error type, calls the host received)
PROGRAMS = [
    ("timeout_error", TIMEOUT, "ok", "timed out", 0),
    ("exception_group", GROUP, "ok", ["x"], 0),
    ("raise_exception_group", "try:\n    raise ExceptionGroup('g', [ValueError(1)])\n"
     "except BaseExceptionGroup as eg:\n    r = len(eg.exceptions)\nr\n", "ok", 1, 0),
    ("hasattr_a_tool", "[hasattr(tools, 't'), hasattr(tools, 'missing')]\n", "ok",
     [True, False], 0),
    ("hasattr_a_value", "[hasattr('a', 'upper'), hasattr(1, 'nope')]\n", "ok", [True, False],
     0),
    # A "_" name reads as missing, as getattr refuses it: not whether it exists.
    ("hasattr_underscore", "[hasattr(tools, '__class__'), hasattr(1, '__dict__'), "
     "hasattr(tools, '_connection')]\n", "ok", [False, False, False], 0),
    ("getattr_underscore", "getattr(tools, '_connection')\n", "error", "AttributeError", 0),
    ("task_group_of_calls", TASKS, "ok", ["answered"] * 3, 3),
    ("type_stays_out", "type('C', (), {})\n", "error", "NameError", 0),
    ("except_star_refused", "try:\n    pass\nexcept* ValueError:\n    pass\n",
     "invalid_program", "InvalidProgram", 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "program", "status", "outcome", "calls"), PROGRAMS, ids=[row[0] for row in PROGRAMS]
)
def test_a_restricted_program_has_the_builtins_asyncio_and_the_api_need(
    case: str, program: str, status: str, outcome: Any, calls: int
) -> None:
    received: list[dict[str, Any]] = []

    def answer(frame: dict[str, Any]) -> dict[str, Any]:
        received.append(frame)
        return {"ok": True, "value": "answered"}

    result = run_in_process(program, tools=["t"], answer=answer)
    assert result["status"] == status, (case, result["error"])
    assert len(received) == calls, case
    if status == "ok":
        assert result["value"] == outcome, case
    else:
        assert result["error"]["type"] == outcome, (case, result["error"])
