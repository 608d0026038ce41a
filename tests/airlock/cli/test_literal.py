"""Text from the ledger, the audit log or the model, as the CLI shows it: the helper itself,
and ``airlock chat``'s printing of the model's messages."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from airlock.cli._chat import print_message
from airlock.cli._literal import json_text, literal, visible, visible_json
from tests.airlock.cli.hostile_text import BEYOND_C0, BEYOND_C0_IDS, HOSTILE, IDS, INVISIBLE, hidden


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_visible_writes_each_hidden_character_as_an_escape(
    case: str, text: str, shown: str
) -> None:
    assert visible(text) == shown
    assert visible(shown) == shown  # what is shown once stays as it is
    assert not hidden(visible(text))


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("café, 東京, 🙂, a\\u202eb, C:\\temp", "café, 東京, 🙂, a\\u202eb, C:\\temp"),
        ("line 1\n\tline 2\r\n", "line 1\n\tline 2\\r\n"),
        ("\x1b[1A\x1b[2Kprint('ok')\n", "\\x1b[1A\\x1b[2Kprint('ok')\n"),
        ("\u2066x\u2069\n\u200d", "\\u2066x\\u2069\n\\u200d"),
        ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
    ],
)
def test_a_block_of_lines_keeps_its_layout_and_nothing_else(text: str, shown: str) -> None:
    assert visible(text, lines=True) == shown


@pytest.mark.parametrize(("case", "text", "shown"), HOSTILE, ids=IDS)
def test_json_keeps_the_data_and_escapes_what_hides(case: str, text: str, shown: str) -> None:
    value = {"body": text, "items": [text, 1]}
    for indent in (2, None):
        dumped = visible_json(value, indent=indent)
        assert json.loads(dumped) == value
        assert not hidden(dumped)
        assert json.dumps(text) in dumped  # each hidden character as JSON writes it in ASCII
    assert str(json_text(value)) == visible_json(value)


def test_literal_text_is_never_markup() -> None:
    text = literal("[bold]x[/] \x1b[31m", "red")
    assert text.plain == "[bold]x[/] \\x1b[31m"
    assert str(text.style) == "red"


def _printed(message: dict[str, Any]) -> str:
    out = io.StringIO()
    print_message(Console(file=out, width=200, highlight=False), message)
    return out.getvalue()


def _blocks(kind: str, text: str) -> dict[str, Any]:
    block: dict[str, Any] = {
        "text": {"type": "text", "text": text},
        "tool name": {"type": "tool_use", "id": "t1", "name": text, "input": {}},
        "call id": {"type": "tool_use", "id": text, "name": "billing_get", "input": {}},
        "arguments": {"type": "tool_use", "id": "t1", "name": "x", "input": {"note": text}},
        "program": {
            "type": "tool_use",
            "id": "t1",
            "name": "execute_code",
            "input": {"code": text},
        },
        "result": {"type": "tool_result", "tool_use_id": "t1", "content": text},
        "result id": {"type": "tool_result", "tool_use_id": text, "content": "ok"},
    }[kind]
    return {"role": "assistant", "content": [block]}


# Where each kind of text went before: through markup (a tool name, an id, a message) or
# raw (a program, a result); a message and a program keep their newlines.
ONE_LINE = [row for row in HOSTILE if "\n" not in row[1]]
CHAT: list[tuple[str, str, str, str]] = [
    *[(kind, *row) for kind in ("tool name", "call id", "result id") for row in HOSTILE],
    *[("text", *row) for row in ONE_LINE],
    *[(kind, *row) for kind in ("program", "result") for row in INVISIBLE if row in ONE_LINE],
]


@pytest.mark.parametrize(
    ("kind", "case", "text", "shown"), CHAT, ids=[f"{k}: {c}" for k, c, _, _ in CHAT]
)
def test_chat_prints_the_models_text_literally(kind: str, case: str, text: str, shown: str) -> None:
    printed = _printed(_blocks(kind, text))
    assert shown in printed, printed
    assert not hidden(printed)


@pytest.mark.parametrize(("case", "text", "shown"), BEYOND_C0, ids=BEYOND_C0_IDS)
def test_chat_prints_arguments_as_json_that_hides_nothing(case: str, text: str, shown: str) -> None:
    printed = _printed(_blocks("arguments", text))
    assert json.dumps({"note": text}) in printed, printed  # ASCII: hidden characters escaped
    assert not hidden(printed)


def test_chat_keeps_the_lines_of_a_program_and_of_a_message() -> None:
    program = "for i in range(2):\n    print(i)\x1b[1A\x1b[2K\n"
    assert "for i in range(2):\n    print(i)\\x1b[1A\\x1b[2K\n" in _printed(
        _blocks("program", program)
    )
    assert _printed({"role": "user", "content": "two\nlines [/]"}) == "user: two\nlines [/]\n"
