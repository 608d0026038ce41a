"""Provider tool-use formats against fixtures of the real wire shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airlock.frontends import (
    MalformedBlockError,
    anthropic_tools,
    call_blocks,
    handle_block,
    handle_turn,
    openai_chat_tools,
    openai_responses_tools,
    parse_block,
    render_tools,
)
from tests.airlock.fake_surface import INVOICE_TOOL, EchoSurface

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


# --- tool lists -------------------------------------------------------------------------


def test_anthropic_tools_match_the_request_fixture() -> None:
    assert anthropic_tools([INVOICE_TOOL]) == fixture("anthropic_request.json")["tools"]


def test_openai_responses_tools_match_the_request_fixture() -> None:
    assert (
        openai_responses_tools([INVOICE_TOOL]) == fixture("openai_responses_request.json")["tools"]
    )


def test_openai_chat_tools_match_the_request_fixture() -> None:
    assert openai_chat_tools([INVOICE_TOOL]) == fixture("openai_chat_request.json")["tools"]


def test_render_tools_dispatches_by_provider() -> None:
    assert render_tools([INVOICE_TOOL], "anthropic") == anthropic_tools([INVOICE_TOOL])
    assert render_tools([INVOICE_TOOL], "openai_chat") == openai_chat_tools([INVOICE_TOOL])


def test_a_schema_that_allows_extra_keys_is_sent_non_strict() -> None:
    loose = INVOICE_TOOL.model_copy(update={"input_schema": {"type": "object", "properties": {}}})
    assert openai_responses_tools([loose])[0]["strict"] is False
    assert openai_chat_tools([loose])[0]["function"]["strict"] is False


# --- one turn, three formats ---------------------------------------------------------------


@pytest.mark.anyio
async def test_anthropic_turn_answers_each_tool_use_by_id() -> None:
    content = fixture("anthropic_response.json")["content"]
    answers = await handle_turn(EchoSurface(), content)
    assert answers == fixture("anthropic_request.json")["messages"][2]["content"]


@pytest.mark.anyio
async def test_openai_responses_turn_answers_each_function_call_by_call_id() -> None:
    output = fixture("openai_responses_response.json")["output"]
    answers = await handle_turn(EchoSurface(), output)
    assert answers == fixture("openai_responses_request.json")["input"]


@pytest.mark.anyio
async def test_openai_chat_turn_answers_each_tool_call_by_id() -> None:
    message = fixture("openai_chat_response.json")["choices"][0]["message"]
    expected = fixture("openai_chat_request.json")["messages"]
    assert await handle_turn(EchoSurface(), message["tool_calls"]) == expected
    assert await handle_turn(EchoSurface(), [message]) == expected


@pytest.mark.anyio
async def test_calls_of_one_turn_run_concurrently_and_answer_in_call_order() -> None:
    surface = EchoSurface(delays={"inv_1": 0.2, "inv_2": 0.0})
    content = fixture("anthropic_response.json")["content"]
    answers = await handle_turn(surface, content)
    assert surface.most_in_flight == 2
    assert [a["tool_use_id"] for a in answers] == [
        "toolu_01A09q90qw90lq917835lq9",
        "toolu_01B7Xk2mZ9pQ3rT8vW4yN6cD",
    ]
    assert [json.loads(a["content"])["invoice_id"] for a in answers] == ["inv_1", "inv_2"]


@pytest.mark.anyio
async def test_tool_errors_keep_the_error_flag_in_anthropic_format() -> None:
    block = {"type": "tool_use", "id": "toolu_x", "name": "nope_tool", "input": {}}
    answer = await handle_block(EchoSurface(), block)
    assert answer == {
        "type": "tool_result",
        "tool_use_id": "toolu_x",
        "content": '{"error":"unknown_tool"}',
        "is_error": True,
    }


# --- malformed blocks ----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("block", "answer_key", "fragment"),
    [
        (
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "billing_invoice_get",
                "arguments": "{not json",
            },
            "output",
            "not valid JSON",
        ),
        (
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "billing_invoice_get",
                "arguments": "[1, 2]",
            },
            "output",
            "must encode a JSON object, not an array",
        ),
        (
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "billing_invoice_get", "arguments": {"invoice_id": "inv_1"}},
            },
            "content",
            "must be a JSON string, not an object",
        ),
        (
            {"type": "tool_use", "id": "toolu_1", "name": "billing_invoice_get", "input": "inv_1"},
            "content",
            "'input' must be a JSON object, not a string",
        ),
        (
            {"type": "tool_use", "id": "toolu_1", "input": {}},
            "content",
            "needs a tool name",
        ),
    ],
)
async def test_a_call_with_a_known_id_and_bad_arguments_answers_invalid_input(
    block: dict[str, Any], answer_key: str, fragment: str
) -> None:
    surface = EchoSurface()
    answer = await handle_block(surface, block)
    text = json.loads(answer[answer_key])
    assert text["error"] == "invalid_input"
    assert fragment in text["message"]
    assert surface.calls == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    "block",
    [
        {"type": "tool_use", "name": "billing_invoice_get", "input": {}},
        {"type": "function_call", "call_id": "", "name": "x", "arguments": "{}"},
        {"type": "function", "function": {"name": "x", "arguments": "{}"}},
        {"type": "image", "source": {}},
        ["not", "an", "object"],
    ],
)
async def test_a_block_without_an_id_or_of_unknown_type_raises(block: Any) -> None:
    with pytest.raises(MalformedBlockError) as raised:
        await handle_block(EchoSurface(), block)
    assert raised.value.code == "malformed_block"
    assert raised.value.retryable is False


@pytest.mark.anyio
async def test_a_malformed_turn_runs_no_call() -> None:
    surface = EchoSurface()
    good = {"type": "tool_use", "id": "toolu_1", "name": "billing_invoice_get", "input": {}}
    with pytest.raises(MalformedBlockError):
        await handle_turn(surface, [good, {"type": "tool_use", "name": "x", "input": {}}])
    with pytest.raises(MalformedBlockError, match="share the id"):
        await handle_turn(surface, [good, good])
    openai = {"type": "function_call", "call_id": "c", "name": "x", "arguments": "{}"}
    with pytest.raises(MalformedBlockError, match="mixes"):
        await handle_turn(surface, [good, openai])
    assert surface.calls == []


def test_text_and_reasoning_blocks_need_no_answer() -> None:
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "hi"},
        {"type": "reasoning", "summary": []},
    ]
    assert call_blocks(blocks) == []


def test_parse_block_is_provider_neutral() -> None:
    a = parse_block({"type": "tool_use", "id": "t", "name": "n", "input": {"k": 1}})
    b = parse_block({"type": "function_call", "call_id": "t", "name": "n", "arguments": '{"k":1}'})
    assert (a.name, a.arguments, a.call_id) == (b.name, b.arguments, b.call_id)
    assert (a.provider, b.provider) == ("anthropic", "openai_responses")


def test_the_front_end_api_is_exported() -> None:
    import airlock

    for name in (
        "MalformedBlockError",
        "ReplayModel",
        "Transcript",
        "anthropic_tools",
        "handle_block",
        "handle_turn",
        "openai_chat_tools",
        "openai_responses_tools",
        "render_tools",
    ):
        assert name in airlock.__all__
        assert getattr(airlock, name) is not None
