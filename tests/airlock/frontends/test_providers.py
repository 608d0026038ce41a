"""Provider tool-use formats against fixtures of the real wire shapes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

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
from airlock.frontends._call_arguments import MAX_ARGUMENT_DEPTH
from tests.airlock.fake_surface import INVOICE_TOOL, EchoSurface

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def nested(levels: int) -> list[Any]:
    """A list nesting ``levels`` deep (``[]`` is one), built without recursion."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def responses_call(arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": "call_1",
        "name": "billing_invoice_get",
        "arguments": arguments,
    }


def chat_call(arguments: str) -> dict[str, Any]:
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": "billing_invoice_get", "arguments": arguments},
    }


def anthropic_call(arguments: object) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": "billing_invoice_get", "input": arguments}


DEEP_TEXT = '{"invoice_id": ' + "[" * 100_000 + "]" * 100_000 + "}"
LONG_INT_TEXT = '{"invoice_id": ' + "1" * 5000 + "}"
# Deeper than the limit, shallow enough for json.loads (and a registry's json.dumps, which
# recurses, would stop on its way down at about 1,000 levels).
BELOW_LIMIT_TEXT = '{"invoice_id": ' + "[" * 201 + "]" * 201 + "}"
LOADABLE_DEEP_TEXT = '{"invoice_id": ' + "[" * 700 + "]" * 700 + "}"
CYCLIC: dict[str, Any] = {}
CYCLIC["invoice_id"] = CYCLIC


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


# --- provider SDK objects -----------------------------------------------------------------
# Stand-ins for the SDKs' content blocks, which are pydantic models of the same wire shapes.


class TextBlock(BaseModel):
    type: Literal["text"]
    text: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ResponseReasoningItem(BaseModel):
    type: Literal["reasoning"]
    id: str
    summary: list[Any]


class ResponseFunctionToolCall(BaseModel):
    type: Literal["function_call"]
    id: str | None = None
    call_id: str
    name: str
    arguments: str
    status: str | None = None


class Function(BaseModel):
    name: str
    arguments: str


class ChatCompletionMessageToolCall(BaseModel):
    id: str
    type: Literal["function"]
    function: Function


class ChatCompletionMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ChatCompletionMessageToolCall] | None = None


class ToDictBlock:
    """An SDK object that is no pydantic model but turns itself into a dict."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)


def anthropic_sdk_content() -> list[TextBlock | ToolUseBlock]:
    return [
        TextBlock.model_validate(b) if b["type"] == "text" else ToolUseBlock.model_validate(b)
        for b in fixture("anthropic_response.json")["content"]
    ]


@pytest.mark.anyio
async def test_anthropic_sdk_blocks_are_answered_like_their_dicts() -> None:
    surface = EchoSurface()
    answers = await handle_turn(surface, anthropic_sdk_content())
    assert answers == fixture("anthropic_request.json")["messages"][2]["content"]
    assert surface.calls == [
        ("billing_invoice_get", {"invoice_id": "inv_1"}),
        ("billing_invoice_get", {"invoice_id": "inv_2"}),
    ]


@pytest.mark.anyio
async def test_openai_responses_sdk_items_are_answered_like_their_dicts() -> None:
    items: list[ResponseReasoningItem | ResponseFunctionToolCall] = [
        ResponseReasoningItem.model_validate(i)
        if i["type"] == "reasoning"
        else ResponseFunctionToolCall.model_validate(i)
        for i in fixture("openai_responses_response.json")["output"]
    ]
    answers = await handle_turn(EchoSurface(), items)
    assert answers == fixture("openai_responses_request.json")["input"]


@pytest.mark.anyio
async def test_openai_chat_sdk_message_and_tool_calls_are_answered_like_their_dicts() -> None:
    raw = fixture("openai_chat_response.json")["choices"][0]["message"]
    message = ChatCompletionMessage.model_validate(raw)
    expected = fixture("openai_chat_request.json")["messages"]
    assert await handle_turn(EchoSurface(), [message]) == expected
    assert message.tool_calls is not None
    assert await handle_turn(EchoSurface(), message.tool_calls) == expected
    # A dict message whose tool calls are SDK objects reads the same.
    mixed = {"role": "assistant", "content": None, "tool_calls": message.tool_calls}
    assert await handle_turn(EchoSurface(), [mixed]) == expected


@pytest.mark.anyio
async def test_handle_block_takes_an_sdk_block_and_answers_with_a_dict() -> None:
    block = anthropic_sdk_content()[1]
    answer = await handle_block(EchoSurface(), block)
    assert answer == {
        "type": "tool_result",
        "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
        "content": '{"invoice_id":"inv_1"}',
        "is_error": False,
    }


@pytest.mark.anyio
async def test_an_object_with_to_dict_is_read_through_it() -> None:
    block = ToDictBlock(
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "billing_invoice_get",
            "arguments": '{"invoice_id":"inv_9"}',
        }
    )
    answer = await handle_block(EchoSurface(), block)
    assert answer == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": '{"invoice_id":"inv_9"}',
    }
    assert parse_block(block).arguments == {"invoice_id": "inv_9"}


class BrokenDump:
    def model_dump(self) -> dict[str, Any]:
        raise RuntimeError("cannot serialize")


class ListDump:
    def model_dump(self) -> list[str]:
        return ["tool_use"]


class NoConversion:
    pass


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("block", "fragment"),
    [
        (BrokenDump(), "BrokenDump.model_dump() failed"),
        (ListDump(), "ListDump.model_dump() gave list, not a JSON object"),
        (NoConversion(), "must be a JSON object, not NoConversion"),
    ],
)
async def test_an_object_that_gives_no_block_is_malformed_and_runs_no_call(
    block: object, fragment: str
) -> None:
    surface = EchoSurface()
    good = anthropic_sdk_content()[1]
    with pytest.raises(MalformedBlockError, match=re.escape(fragment)):
        await handle_turn(surface, [good, block])  # type: ignore[list-item]
    with pytest.raises(MalformedBlockError):
        await handle_block(surface, block)  # type: ignore[arg-type]
    assert surface.calls == []


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
        # Hostile arguments: each is that call's problem, never an exception for the turn.
        (responses_call(DEEP_TEXT), "output", "'arguments' nests deeper than 200 levels"),
        (chat_call(DEEP_TEXT), "content", "'arguments' nests deeper than 200 levels"),
        (responses_call(LONG_INT_TEXT), "output", "integer longer than 4300 digits"),
        (chat_call(LONG_INT_TEXT), "content", "integer longer than 4300 digits"),
        (responses_call('{"invoice_id": NaN}'), "output", "holds NaN, which is not JSON"),
        (chat_call('{"invoice_id": -Infinity}'), "content", "holds -Infinity, which is not JSON"),
        (responses_call(BELOW_LIMIT_TEXT), "output", "'arguments' nests deeper than 200 levels"),
        (chat_call(LOADABLE_DEEP_TEXT), "content", "'arguments' nests deeper than 200 levels"),
        (anthropic_call({"invoice_id": nested(201)}), "content", "'input' nests deeper than"),
        (anthropic_call(json.loads(LOADABLE_DEEP_TEXT)), "content", "'input' nests deeper than"),
        (anthropic_call(CYCLIC), "content", "'input' nests deeper than 200 levels"),
        (
            {"type": "tool_use", "id": "toolu_1", "name": nested(100_000), "input": {}},
            "content",
            "needs a tool name, got an array",
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
        # Values whose repr would recurse past the interpreter's limit.
        {"type": nested(100_000)},
        {"type": "function_call", "call_id": nested(100_000), "name": "x", "arguments": "{}"},
    ],
)
async def test_a_block_without_an_id_or_of_unknown_type_raises(block: Any) -> None:
    with pytest.raises(MalformedBlockError) as raised:
        await handle_block(EchoSurface(), block)
    assert raised.value.code == "malformed_block"
    assert raised.value.retryable is False


def assistant_nesting(levels: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "tool_calls": []}
    for _ in range(levels - 1):
        message = {"role": "assistant", "tool_calls": [message]}
    return message


@pytest.mark.anyio
@pytest.mark.parametrize(
    "blocks",
    [
        [{"type": []}],  # not even hashable
        [{"type": {"a": 1}}],
        [{"role": "assistant", "tool_calls": 5}],
        [assistant_nesting(5000)],  # tool_calls hold calls, not messages again
        [{"type": "function_call", "call_id": nested(100_000), "name": "x", "arguments": "{}"}],
    ],
)
async def test_a_hostile_turn_raises_malformed_block_and_runs_no_call(blocks: Any) -> None:
    surface = EchoSurface()
    with pytest.raises(MalformedBlockError) as raised:
        await handle_turn(surface, [anthropic_call({"invoice_id": "inv_1"}), *blocks])
    assert raised.value.code == "malformed_block"
    assert surface.calls == []


@pytest.mark.anyio
@pytest.mark.parametrize("call", [responses_call, chat_call])
async def test_hostile_arguments_cost_only_their_own_call(call: Any) -> None:
    surface = EchoSurface()
    good = call('{"invoice_id": "inv_1"}')
    hostile = [call(DEEP_TEXT), call(LONG_INT_TEXT), call(LOADABLE_DEEP_TEXT)]
    for index, block in enumerate(hostile, start=2):
        block["call_id" if "call_id" in block else "id"] = f"call_{index}"
    answers = await handle_turn(surface, [good, *hostile])
    texts = [json.loads(a.get("output") or a["content"]) for a in answers]
    assert texts[0] == {"invoice_id": "inv_1"}
    assert [t["error"] for t in texts[1:]] == ["invalid_input"] * 3
    assert surface.calls == [("billing_invoice_get", {"invoice_id": "inv_1"})]


@pytest.mark.anyio
async def test_arguments_at_the_depth_limit_reach_the_surface() -> None:
    surface = EchoSurface()
    at_limit = {"invoice_id": nested(MAX_ARGUMENT_DEPTH)}
    text = json.dumps(at_limit)
    for block in (responses_call(text), anthropic_call(json.loads(text))):
        assert parse_block(block).problem is None
    await handle_block(surface, chat_call(text))
    assert surface.calls == [("billing_invoice_get", at_limit)]


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
