"""The exact wire shapes of three provider tool-use formats, and nothing else.

    Anthropic Messages      tools  {"name", "description", "input_schema"}
                            call   {"type": "tool_use", "id", "name", "input": {...}}
                            answer {"type": "tool_result", "tool_use_id", "content", "is_error"}
    OpenAI Responses        tools  {"type": "function", "name", "description", "parameters",
                                    "strict"}
                            call   {"type": "function_call", "call_id", "name",
                                    "arguments": "<json>"}
                            answer {"type": "function_call_output", "call_id", "output"}
    OpenAI Chat Completions tools  {"type": "function", "function": {"name", "description",
                                    "parameters", "strict"}}
                            call   {"id", "type": "function", "function": {"name",
                                    "arguments": "<json>"}}   (an assistant message's tool_calls)
                            answer {"role": "tool", "tool_call_id", "content"}

Blocks may also be the provider SDKs' own objects (Anthropic and OpenAI content blocks are
pydantic models): :func:`plain_block` turns anything with ``model_dump()`` or ``to_dict()`` into
the dict of its wire shape, the one place such objects are translated.

Parsing turns a call block into a provider-neutral :class:`ToolCall`; rendering turns a
:class:`~airlock.ModelResult` back into the answer block of the same provider. Running the call
is :mod:`airlock.frontends._providers`' job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias, assert_never

from airlock.frontends._call_arguments import json_type, read_arguments, too_deep, too_deep_problem
from airlock.harness import ModelResult, ModelTool
from airlock.policies import AirlockError

__all__ = [
    "Block",
    "MalformedBlockError",
    "Provider",
    "SupportsModelDump",
    "SupportsToDict",
    "ToolCall",
    "anthropic_tools",
    "is_tool_call",
    "openai_chat_tools",
    "openai_responses_tools",
    "parse_block",
    "plain_block",
    "render_result",
    "render_tools",
]

Provider = Literal["anthropic", "openai_responses", "openai_chat"]
PROVIDERS: Final[tuple[Provider, ...]] = ("anthropic", "openai_responses", "openai_chat")


class MalformedBlockError(AirlockError):
    """A block is not a tool call of any known format, or lacks the id to answer it by.

    Raised only when no answer can be addressed to the model: a call whose id is known gets an
    error *result* instead. :attr:`reason` says what is wrong; :attr:`block_type` is the block's
    ``type`` when it has one.
    """

    code = "malformed_block"

    def __init__(self, reason: str, *, block_type: str | None = None) -> None:
        super().__init__(
            f"{reason}; expected an Anthropic tool_use block, an OpenAI Responses function_call "
            "item or a Chat Completions tool_calls entry"
        )
        self.reason = reason
        self.block_type = block_type


class SupportsModelDump(Protocol):
    """A pydantic model, such as an Anthropic or OpenAI SDK content block."""

    def model_dump(self) -> Any:
        """The model as plain Python data (a dict for a block)."""
        ...


class SupportsToDict(Protocol):
    """An SDK object that turns itself into a dict."""

    def to_dict(self) -> Any:
        """The object as plain Python data (a dict for a block)."""
        ...


Block: TypeAlias = Mapping[str, Any] | SupportsModelDump | SupportsToDict
"""A block as a front end receives it: a dict of the wire shape, or an SDK object."""


def plain_block(block: object) -> object:
    """``block`` as plain data: a mapping as it is, an SDK object through its ``model_dump()``
    (or else ``to_dict()``), anything else unchanged (so parsing reports it).

    Raises:
        MalformedBlockError: the object's own conversion failed or gave no mapping.
    """
    if isinstance(block, Mapping):
        return block
    for method in ("model_dump", "to_dict"):
        convert = getattr(block, method, None)
        if not callable(convert):
            continue
        kind = type(block).__name__
        try:
            plain = convert()
        except Exception as exc:
            raise MalformedBlockError(f"{kind}.{method}() failed: {exc!r}"[:300]) from exc
        if not isinstance(plain, Mapping):
            raise MalformedBlockError(
                f"{kind}.{method}() gave {type(plain).__name__}, not a JSON object"
            )
        return plain
    return block


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One model tool call, whatever format it came in."""

    provider: Provider
    call_id: str
    name: str
    arguments: dict[str, Any]
    problem: str | None = None
    """Set when the call's id is known but its name or arguments are unusable."""


def is_tool_call(block: object) -> bool:
    """Whether ``block`` claims to be a tool call in one of the three formats."""
    if not isinstance(block, Mapping):
        return False
    kind = block.get("type")
    return kind in ("tool_use", "function_call") or (kind == "function" and "function" in block)


def parse_block(given: object) -> ToolCall:
    """Read a call block of any of the three formats, as a dict or an SDK object.

    Raises:
        MalformedBlockError: the block is no known tool call, or its id is missing.
    """
    block = plain_block(given)
    if not isinstance(block, Mapping):
        raise MalformedBlockError(f"a tool call must be a JSON object, not {type(block).__name__}")
    kind = block.get("type")
    if kind == "tool_use":
        call_id = _id(block, "id", kind)
        name, problem = _name(block.get("name"))
        arguments: object = block.get("input")
        if problem is None and not isinstance(arguments, dict):
            problem = f"'input' must be a JSON object, not {json_type(arguments)}"
        elif problem is None and too_deep(arguments):
            problem = too_deep_problem("'input'")
        return _call("anthropic", call_id, name, arguments, problem)
    if kind == "function_call":
        call_id = _id(block, "call_id", kind)
        name, problem = _name(block.get("name"))
        arguments, problem = _json_arguments(block.get("arguments"), problem)
        return _call("openai_responses", call_id, name, arguments, problem)
    if kind == "function" and "function" in block:
        call_id = _id(block, "id", kind)
        function = block["function"]
        if not isinstance(function, Mapping):
            return _call("openai_chat", call_id, "", {}, "'function' must be a JSON object")
        name, problem = _name(function.get("name"))
        arguments, problem = _json_arguments(function.get("arguments"), problem)
        return _call("openai_chat", call_id, name, arguments, problem)
    shown = kind if isinstance(kind, str) else None
    raise MalformedBlockError(f"unknown block type {_shown(kind)}", block_type=shown)


def render_result(call: ToolCall, result: ModelResult) -> dict[str, Any]:
    """The provider's answer block for ``call``, carrying ``result``.

    Only Anthropic has an error flag; the OpenAI formats carry the error in the text, which
    is why a result's content always names its code.
    """
    if call.provider == "anthropic":
        return {
            "type": "tool_result",
            "tool_use_id": call.call_id,
            "content": result.content,
            "is_error": result.is_error,
        }
    if call.provider == "openai_responses":
        return {"type": "function_call_output", "call_id": call.call_id, "output": result.content}
    if call.provider == "openai_chat":
        return {"role": "tool", "tool_call_id": call.call_id, "content": result.content}
    assert_never(call.provider)


def anthropic_tools(tools: Sequence[ModelTool]) -> list[dict[str, Any]]:
    """``tools`` for the Anthropic Messages API."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    ]


def openai_responses_tools(tools: Sequence[ModelTool]) -> list[dict[str, Any]]:
    """``tools`` for the OpenAI Responses API (flat function definitions)."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.input_schema,
            "strict": _strict_ok(t.input_schema),
        }
        for t in tools
    ]


def openai_chat_tools(tools: Sequence[ModelTool]) -> list[dict[str, Any]]:
    """``tools`` for OpenAI Chat Completions (definitions nested under ``function``)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": _strict_ok(t.input_schema),
            },
        }
        for t in tools
    ]


def render_tools(tools: Sequence[ModelTool], provider: Provider) -> list[dict[str, Any]]:
    """``tools`` in the given provider's format."""
    if provider == "anthropic":
        return anthropic_tools(tools)
    if provider == "openai_responses":
        return openai_responses_tools(tools)
    if provider == "openai_chat":
        return openai_chat_tools(tools)
    assert_never(provider)


def _strict_ok(schema: Mapping[str, Any]) -> bool:
    # OpenAI rejects strict mode for an object schema that allows extra keys or leaves a
    # property optional; registry schemas satisfy both, and anything else is sent non-strict
    # rather than refused by the provider.
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        return False
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    return isinstance(properties, Mapping) and set(properties) == set(required)


def _call(
    provider: Provider, call_id: str, name: str, arguments: object, problem: str | None
) -> ToolCall:
    if problem is not None or not isinstance(arguments, dict):
        return ToolCall(
            provider=provider,
            call_id=call_id,
            name=name,
            arguments={},
            problem=problem or "arguments must be a JSON object",
        )
    return ToolCall(provider=provider, call_id=call_id, name=name, arguments=arguments)


def _id(block: Mapping[str, Any], key: str, kind: str) -> str:
    value = block.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedBlockError(
            f"a {kind!r} block needs a non-empty string {key!r}, got {_shown(value)}",
            block_type=kind,
        )
    return value


def _name(value: object) -> tuple[str, str | None]:
    if isinstance(value, str) and value:
        return value, None
    return "", f"the call needs a tool name, got {_shown(value)}"


def _shown(value: object) -> str:
    # A hostile value's repr can be huge, recurse past the interpreter's limit (a list nested
    # 1,000 deep) or refuse outright (an integer of 5,000 digits): name its type instead.
    if isinstance(value, str):
        return repr(value[:80])
    if value is None or isinstance(value, bool):
        return repr(value)
    return json_type(value)


def _json_arguments(value: object, problem: str | None) -> tuple[object, str | None]:
    if problem is not None:
        return {}, problem
    if not isinstance(value, str):
        return {}, f"'arguments' must be a JSON string, not {json_type(value)}"
    return read_arguments(value)
