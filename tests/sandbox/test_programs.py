"""Programs that fail, are refused, or return values: clear results through a real container."""

from __future__ import annotations

import pytest

from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

CASES = [
    # (name, program, status, error type, line)
    ("raises", "def f():\n    return 1 / 0\nf()\n", "error", "ZeroDivisionError", None),
    ("syntax_error", "x = (\n", "invalid_program", "InvalidProgram", 1),
    ("forbidden_import", "import json\nimport os\n", "invalid_program", "InvalidProgram", 2),
    (
        "forbidden_from_import",
        "from subprocess import run\n",
        "invalid_program",
        "InvalidProgram",
        1,
    ),
    ("dunder_access", "x = ()\nx.__class__.__bases__\n", "invalid_program", "InvalidProgram", 2),
    ("builtin_open", "open('/etc/passwd').read()\n", "error", "NameError", None),
    ("exec_call", "exec('1')\n", "invalid_program", "InvalidProgram", 1),
    ("unserializable_value", "result({1, 2})\n", "error", "InvalidResult", None),
    ("system_exit", "raise SystemExit(3)\n", "error", "SystemExit", None),
    # A missing attribute raises as in Python, not a silent None that fails later.
    ("missing_attribute", "'abc'.no_such_method()\n", "error", "AttributeError", None),
    ("missing_getattr", "getattr('abc', 'no_such_method')\n", "error", "AttributeError", None),
    # A run without tools: any tool is one the program was not given.
    (
        "unknown_tool",
        "tools.billing_refund_create(invoice_id='in_1')\n",
        "error",
        "UnknownTool",
        None,
    ),
]


@pytest.mark.parametrize(("name", "program", "status", "error_type", "line"), CASES)
def test_failing_programs_have_clear_errors(
    sandbox: Sandbox, name: str, program: str, status: str, error_type: str, line: int | None
) -> None:
    result = sandbox.run(program)
    assert result.status == status, (name, result)
    assert result.error is not None
    assert result.error.type == error_type
    if line is not None:
        assert result.error.line == line
    assert not result.has_value
    assert result.reason()


def test_traceback_shows_only_program_frames(sandbox: Sandbox) -> None:
    result = sandbox.run("def inner():\n    raise ValueError('bad id')\ninner()\n")
    assert result.error is not None
    assert result.error.traceback is not None
    assert 'File "<program>", line 2, in inner' in result.error.traceback
    assert "airlock_runner" not in result.error.traceback


def test_restricted_program_returns_last_expression(sandbox: Sandbox) -> None:
    program = (
        "import json, statistics, asyncio\n"
        "class Row:\n"
        "    def __init__(self, n):\n"
        "        self.n = n\n"
        "async def double(x):\n"
        "    await asyncio.sleep(0)\n"
        "    return x * 2\n"
        "async def main():\n"
        "    return await asyncio.gather(*[double(r.n) for r in rows])\n"
        "rows = [Row(n) for n in range(5)]\n"
        "print('rows:', len(rows))\n"
        "{'doubled': asyncio.run(main()), 'mean': statistics.mean(r.n for r in rows)}\n"
    )
    result = sandbox.run(program)
    assert result.ok, result.error
    assert result.value == {"doubled": [0, 2, 4, 6, 8], "mean": 2}
    assert result.stdout == "rows: 5\n"


def test_explicit_result_wins_over_last_expression(sandbox: Sandbox) -> None:
    result = sandbox.run("result({'answer': 42})\n'ignored'\n")
    assert result.value == {"answer": 42}


def test_program_without_value(sandbox: Sandbox) -> None:
    result = sandbox.run("x = 1\n")
    assert result.ok
    assert not result.has_value
    assert result.value is None


def test_oversized_program_is_refused_before_a_container_starts(sandbox: Sandbox) -> None:
    result = sandbox.run("x = 1\n" * 300_000)
    assert result.status == "invalid_program"
    assert result.error is not None
    assert "limit" in result.error.message


def test_each_run_gets_a_fresh_container(sandbox: Sandbox) -> None:
    first = sandbox.run(
        "import os\nopen('/tmp/mark', 'w').write('1')\nos.uname().nodename\n", language_mode="full"
    )
    second = sandbox.run("import os\nos.path.exists('/tmp/mark')\n", language_mode="full")
    assert first.ok
    assert second.ok
    assert second.value is False


def test_ssl_is_not_loaded_ahead_and_still_imports(sandbox: Sandbox) -> None:
    # The runner keeps OpenSSL out of every container's start; a program may still use it.
    loaded = sandbox.run("import sys\n'ssl' in sys.modules\n", language_mode="full")
    assert loaded.ok, loaded.error
    assert loaded.value is False
    imported = sandbox.run("import ssl\nssl.OPENSSL_VERSION.split()[0]\n", language_mode="full")
    assert imported.ok, imported.error
    assert imported.value == "OpenSSL"
