"""Restricted mode is a guard: the known routes from a restricted program to a module, a frame
or an unguarded evaluator, each refused with the guard's error.

Each program, if its route were open, would end with a value that proves the crossing (a pid
from ``os``, a module, a frame's globals). The table is run by the real runner as a host
process (fast); one container run checks that the image ships the same guard. The container
stays the boundary: this is defence in depth.
"""

from __future__ import annotations

import pytest

from tests.conftest import Sandbox
from tests.sandbox.guest_image import load_guest
from tests.sandbox.test_guest_runner import run_in_process

language = load_guest("airlock_language")

# (route, program, error type, a phrase of the message). "invalid_program": refused before
# running, by RestrictedPython's compiler.
BYPASSES: list[tuple[str, str, str, str]] = [
    ("typing_sys_modules", "import typing\ntyping.sys.modules['os'].getpid()\n",
     "AttributeError", "the module 'sys'"),
    ("statistics_sys", "import statistics\nstatistics.sys.modules\n",
     "AttributeError", "the module 'sys'"),
    ("from_typing_import_sys", "from typing import sys\nsys.modules['os'].getpid()\n",
     "ImportError", "the module 'sys'"),
    ("getattr_module", "import typing\ngetattr(typing, 'sys').modules\n",
     "AttributeError", "the module 'sys'"),
    ("getattr_with_default", "import typing\ngetattr(typing, 'sys', None).modules\n",
     "AttributeError", "the module 'sys'"),
    ("dir_walk", "import datetime\n[getattr(datetime, n) for n in dir(datetime) if n == 'sys']\n",
     "AttributeError", "the module 'sys'"),
    ("re_enum", "import re\nre.enum.sys\n", "AttributeError", "the module 'enum'"),
    ("asyncio_os", "import asyncio\nasyncio.base_events.os.getpid()\n",
     "AttributeError", "the module 'os'"),
    ("asyncio_subprocess_module", "import asyncio\nasyncio.subprocess.subprocess\n",
     "AttributeError", "the module 'subprocess'"),
    ("dataclasses_builtins", "import dataclasses\ndataclasses.builtins.open\n",
     "AttributeError", "the module 'builtins'"),
    ("typing_types", "import typing\ntyping.types.FunctionType\n",
     "AttributeError", "the module 'types'"),
    ("get_type_hints", "import typing, dataclasses\n"
     "C = dataclasses.make_dataclass('C', [('a', \"__import__('os').getpid()\")])\n"
     "typing.get_type_hints(C)\n", "AttributeError", "evaluates strings"),
    ("from_typing_import_get_type_hints", "from typing import get_type_hints\n",
     "ImportError", "evaluates strings"),
    ("forward_ref", "import typing\ntyping.ForwardRef('1')\n", "AttributeError", "evaluates strings"),
    ("singledispatch_register", "import functools\n"
     "@functools.singledispatch\ndef f(x):\n    return x\n", "AttributeError", "evaluates strings"),
    ("generator_frame", "def g():\n    yield 1\ng().gi_frame.f_globals\n",
     "invalid_program", "gi_frame"),
    ("getattr_generator_frame", "def g():\n    yield 1\ngetattr(g(), 'gi_frame')\n",
     "AttributeError", "restricted name"),
    ("task_stack_frame", "import asyncio\nasync def m():\n"
     "    return getattr(asyncio.current_task().get_stack()[0], 'f_globals')\n"
     "asyncio.run(m())\n", "AttributeError", "restricted name"),
    ("coroutine_frame", "async def m():\n    return 1\ngetattr(m(), 'cr_frame')\n",
     "AttributeError", "restricted name"),
    ("str_format_attribute", "'{0.gi_frame}'.format((x for x in []))\n",
     "NotImplementedError", "format"),
    ("str_format_map", "'{x}'.format_map({'x': 1})\n", "NotImplementedError", "format"),
    ("subclasses", "().__class__.__base__.__subclasses__()\n", "invalid_program", "__class__"),
    ("getattr_dunder", "getattr((), '__class__')\n", "AttributeError", "starts with"),
    ("builtins_name", "__builtins__\n", "invalid_program", "__builtins__"),
    ("traceback_of_exception", "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__\n",
     "invalid_program", "__traceback__"),
    ("tools_connection", "tools._connection\n", "invalid_program", "_connection"),
    ("import_os", "import os\nos.getpid()\n", "invalid_program", "'os' is not allowed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("route", "program", "error", "phrase"), BYPASSES, ids=[row[0] for row in BYPASSES]
)
def test_a_known_route_out_of_restricted_mode_is_refused(
    route: str, program: str, error: str, phrase: str
) -> None:
    result = run_in_process(program, mode="restricted")
    if error == "invalid_program":
        assert result["status"] == "invalid_program", (route, result)
    else:
        assert result["status"] == "error", (route, result["value"])
        assert result["error"]["type"] == error, result["error"]
    assert phrase in result["error"]["message"], result["error"]
    assert not result["has_value"]


@pytest.mark.parametrize(
    "program",
    [
        "import collections.abc\nisinstance([], collections.abc.Sequence)\n",
        "import json\njson.decoder.JSONDecoder().decode('[1]')\n",
        "import asyncio\nasync def m():\n    return 2\nasyncio.run(m())\n",
        "import dataclasses\nP = dataclasses.make_dataclass('P', ['x'])\nP(1).x\n",
        "import typing\ntyping.Optional[int] is not None\n",
    ],
    ids=["submodule_of_an_import", "json", "asyncio", "dataclass", "typing_alias"],
)
def test_what_a_program_imports_stays_usable(program: str) -> None:
    result = run_in_process(program, mode="restricted")
    assert result["status"] == "ok", result["error"]


def test_every_evaluator_is_refused_as_a_value() -> None:
    allowed = frozenset({"typing", "functools"})
    for evaluator in language.evaluators():
        assert language.refusal(evaluator, allowed)


@pytest.mark.docker
def test_the_image_ships_the_guard(sandbox: Sandbox) -> None:
    result = sandbox.run("import typing\ntyping.sys.modules['os'].getpid()\n")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "AttributeError"
    assert "the module 'sys'" in result.error.message
