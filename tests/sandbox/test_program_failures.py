"""A failed program's error is reported whatever its exception's class makes the runner read.

The exception is the program's: its ``__str__``, an exception group's ``exceptions``, a
metaclass's ``__name__``, a ``SystemExit``'s ``code``, a tool error's ``code`` or an
``OSError``'s ``errno`` may raise. Formatting an ``ExceptionGroup`` subclass whose
``exceptions`` was not a sequence ended the runner (``RunnerDied``, no error at all); each row
is now an ``error`` result naming the exception's type.
"""

from __future__ import annotations

import pytest

from tests.sandbox.test_guest_runner import run_in_process

GROUP_BAD_EXCEPTIONS = (
    "class E(ExceptionGroup):\n    exceptions = 5\nraise E('m', [ValueError('a')])\n"
)
STR_RAISES = (
    "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise E()\n"
)
STR_NOT_TEXT = "class E(Exception):\n    def __str__(self):\n        return 5\nraise E()\n"
METACLASS_NAME = (
    "class M(type):\n    @property\n    def __name__(cls):\n        raise RuntimeError('no')\n"
    "class E(Exception, metaclass=M):\n    pass\nraise E('x')\n"
)
EXIT_CODE_RAISES = (
    "class X(SystemExit):\n    @property\n    def code(self):\n        raise RuntimeError('no')\n"
    "raise X(3)\n"
)
ERRNO_RAISES = (
    "class O(OSError):\n    @property\n    def errno(self):\n        raise RuntimeError('no')\n"
    "raise O('x')\n"
)
TOOL_CODE_RAISES = (  # (read as it is made; only the runner's reading of it raises)
    "class T(tools.ToolError):\n    reads = 0\n    @property\n    def code(self):\n"
    "        T.reads += 1\n        if T.reads > 1:\n            raise RuntimeError('no')\n"
    "        return 'tool_error'\nraise T('x')\n"
)

FAKE_INT = (
    "class F:\n    @property\n    def __class__(self):\n        return int\n"
    "class X(SystemExit):\n    @property\n    def code(self):\n        return F()\n"
    "raise X(3)\n"
)
CLASS_RAISES = (
    "class E(Exception):\n    @property\n    def __class__(self):\n"
    "        raise RuntimeError('no')\nraise E('x')\n"
)
NAME_SUBCLASS = (
    "class S(str):\n    def __format__(self, spec):\n        raise RuntimeError('no')\n"
    "    def __getitem__(self, i):\n        return object()\n"
    "class E(Exception):\n    def __str__(self):\n        return S('odd')\n"
    "E.__name__ = S('Named')\nraise E()\n"
)
HUGE_NAME = "class E(Exception):\n    pass\nE.__name__ = 'N' * 2**20\nraise E('x')\n"

# (case, program, mode, the error's type, its message)
FAILURES = [
    ("exit_with_an_int_too_long_to_write", "raise SystemExit(10 ** 5000)\n", "restricted",
     "SystemExit", "exit status 1"),
    ("exit_with_a_large_int", "raise SystemExit(10 ** 100)\n", "restricted", "SystemExit",
     "exit status 1"),
    ("exit_with_a_fake_int", FAKE_INT, "full", "SystemExit", "exit status 1"),
    ("class_property_raises", CLASS_RAISES, "full", "E", "x"),
    ("name_and_message_str_subclasses", NAME_SUBCLASS, "full", "Named", "odd"),
    ("huge_type_name", HUGE_NAME, "full", "N" * 200, "x"),
    ("group_with_bad_exceptions", GROUP_BAD_EXCEPTIONS, "restricted", "E", "m (1 sub-exception)"),
    ("group_with_bad_exceptions_full", GROUP_BAD_EXCEPTIONS, "full", "E", "m (1 sub-exception)"),
    ("str_raises", STR_RAISES, "full", "E", "(the E's message could not be read)"),
    ("str_not_text", STR_NOT_TEXT, "full", "E", "(the E's message could not be read)"),
    ("metaclass_name_raises", METACLASS_NAME, "full", "E", "x"),
    ("exit_code_raises", EXIT_CODE_RAISES, "full", "SystemExit", "exit status 1"),
    ("errno_raises", ERRNO_RAISES, "full", "O", "x"),
    ("tool_code_raises", TOOL_CODE_RAISES, "full", "T", "x"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "program", "mode", "kind", "message"), FAILURES, ids=[row[0] for row in FAILURES]
)
def test_a_program_whose_exception_resists_reading_still_gets_its_error(
    case: str, program: str, mode: str, kind: str, message: str
) -> None:
    result = run_in_process(program, mode, tools=["t"])
    assert result["status"] == "error", (case, result)
    assert (result["error"]["type"], result["error"]["message"]) == (kind, message), case
    assert "code" not in result["error"]
