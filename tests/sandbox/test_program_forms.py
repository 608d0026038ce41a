"""Top-level ``await``, and statements the compiler refuses where they stand, in the real
runner as a process on the host: the first runs on an event loop of its own, the others are
the program's error with their line, never a runner that dies."""

from __future__ import annotations

import pytest

from tests.sandbox.test_guest_runner import run_in_process

MODES = ["restricted", "full"]

AWAITED = [
    ("await_sleep", "import asyncio\nawait asyncio.sleep(0)\n'slept'\n", "slept"),
    (
        "gather",
        "import asyncio\nasync def two(x):\n    return 2 * x\n"
        "sum(await asyncio.gather(*(two(n) for n in range(4))))\n",
        12,
    ),
    ("await_in_last_expression", "import asyncio\nasync def f():\n    return 7\nawait f()\n", 7),
    (
        "async_for",
        "import asyncio\nasync def g():\n    yield 1\n    yield 2\n"
        "total = 0\nasync for x in g():\n    total += x\ntotal\n",
        3,
    ),
    ("result_set_inside", "import asyncio\nawait asyncio.sleep(0)\nresult(5)\n", 5),
    (
        "a_coroutine_value_is_not_awaited",  # no top-level await: the program's own object
        "async def f():\n    return 1\nc = f()\nc.close()\nstr(c).split()[0]\n",
        "<coroutine",
    ),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("case", "program", "value"), AWAITED, ids=[a[0] for a in AWAITED])
def test_top_level_await_runs(mode: str, case: str, program: str, value: object) -> None:
    result = run_in_process(program, mode=mode)
    assert (result["status"], result["value"]) == ("ok", value), result["error"]


MISPLACED = [
    ("return", "x = 1\nreturn x\n", 2, "'return' outside function"),
    ("break", "x = 1\nbreak\n", 2, "'break' outside loop"),
    ("continue", "continue\n", 1, "'continue' not properly in loop"),
    ("yield", "x = 1\n\nyield x\n", 3, "'yield' outside function"),
    ("await_in_plain_function", "def f():\n    await g()\n", 2, "'await' outside async function"),
    ("return_in_last_line", "x = 1\nreturn\n", 2, "'return' outside function"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("case", "program", "line", "message"), MISPLACED, ids=[m[0] for m in MISPLACED]
)
def test_a_misplaced_statement_is_the_programs_error_with_its_line(
    mode: str, case: str, program: str, line: int, message: str
) -> None:
    result = run_in_process(program, mode=mode)
    assert result["status"] == "error"
    error = result["error"]
    assert (error["type"], error["line"]) == ("SyntaxError", line)
    assert message in error["message"]
