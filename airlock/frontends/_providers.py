"""Answer a model's tool calls in the model's own wire format.

A front end hands over the call blocks of one model turn, as dicts of the wire shape or as the
provider SDK's own objects (converted by :func:`plain_block` as they are read); each is parsed
(:mod:`airlock.frontends._provider_wire`), run through a :class:`~airlock.ModelToolSurface`,
and answered with a result block carrying the call's own id. Calls of one turn run
concurrently; the answers come back in the order the calls were made, which is the order every
provider expects. A turn ends with all its calls: one that raises cancels the others and waits
for them, so none runs on unseen once the turn has returned or raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio

from airlock.frontends._provider_wire import (
    Block,
    MalformedBlockError,
    ToolCall,
    parse_block,
    plain_block,
    render_result,
)
from airlock.harness import ModelResult, ModelToolSurface, failure

__all__ = ["call_blocks", "handle_block", "handle_turn"]

# Content blocks an assistant turn may carry next to its calls; they need no answer.
_NOT_CALLS: Final = frozenset(
    {"text", "thinking", "redacted_thinking", "message", "reasoning", "output_text"}
)


async def handle_block(surface: ModelToolSurface, block: Block) -> dict[str, Any]:
    """Run one tool call block and return the provider's result block for it.

    ``block`` is a dict of the provider's wire shape or the provider SDK's object for it
    (anything with ``model_dump()`` or ``to_dict()``); the answer is always a dict. A call
    whose id is known never raises: arguments that are no JSON, nest deeper than
    :data:`~airlock.frontends._call_arguments.MAX_ARGUMENT_DEPTH` levels or hold an integer
    too long to read, a missing name or a non-object input answer ``invalid_input`` to the
    model, and tool errors come back from the surface as results.

    Raises:
        MalformedBlockError: the block is no tool call of a known format, or has no id.
    """
    return await _answer(surface, parse_block(block))


async def handle_turn(surface: ModelToolSurface, blocks: Sequence[Block]) -> list[dict[str, Any]]:
    """Answer every tool call of one model turn, concurrently, in the order they were made.

    ``blocks`` may be an assistant message's whole content (text and thinking blocks are
    skipped), a Responses API ``output``, or a Chat Completions assistant message in a list
    (its ``tool_calls`` are answered); as dicts or as the provider SDK's objects (anything
    with ``model_dump()`` or ``to_dict()``). The answers are dicts, which every SDK accepts.
    Every block is checked before any call runs, so a malformed turn changes nothing.

    A call that raises (the surface failed, not the tool: a tool's errors are answers)
    cancels the turn's other calls; its error is raised once they have ended. Cancelling
    the turn cancels its calls. No call of the turn runs after this returns or raises.

    Raises:
        MalformedBlockError: a block is malformed (see :func:`handle_block`), two calls share
            an id, or the calls mix formats.
        Exception: what the surface raised for a call (the first, when several did).
    """
    calls = [parse_block(block) for block in call_blocks(blocks)]
    seen: set[str] = set()
    for call in calls:
        if call.call_id in seen:
            raise MalformedBlockError(f"two calls in one turn share the id {call.call_id!r}")
        seen.add(call.call_id)
    if len({call.provider for call in calls}) > 1:
        raise MalformedBlockError("one turn mixes tool call formats")
    answers: list[dict[str, Any]] = [{} for _ in calls]

    async def answer(index: int, call: ToolCall) -> None:
        answers[index] = await _answer(surface, call)

    try:
        async with anyio.create_task_group() as group:
            for index, call in enumerate(calls):
                group.start_soon(answer, index, call)
    except BaseExceptionGroup as failed:
        # The others were cancelled and awaited: raise the call's own error, as it was.
        raise failed.exceptions[0] from None
    return answers


def call_blocks(blocks: Sequence[Block]) -> list[object]:
    """The tool call blocks of a turn as plain data, without the content that needs no
    answer; SDK objects are converted with :func:`plain_block`.

    Raises:
        MalformedBlockError: an SDK object's conversion failed, or a message's ``tool_calls``
            is no list.
    """
    found: list[object] = []
    for given in blocks:
        block = plain_block(given)
        if isinstance(block, Mapping) and block.get("role") == "assistant":
            tool_calls = block.get("tool_calls") or []
            if not isinstance(tool_calls, Sequence) or isinstance(tool_calls, str):
                raise MalformedBlockError("an assistant message's 'tool_calls' must be a list")
            # Its entries are calls, never messages again: no recursion a block could nest.
            found.extend(plain_block(call) for call in tool_calls)
        elif isinstance(block, Mapping) and _kind(block) in _NOT_CALLS:
            continue
        else:
            found.append(block)  # unknown shapes are reported by parse_block, never dropped
    return found


def _kind(block: Mapping[str, Any]) -> str | None:
    # Any JSON value may stand in "type"; a list is not even hashable.
    kind = block.get("type")
    return kind if isinstance(kind, str) else None


async def _answer(surface: ModelToolSurface, call: ToolCall) -> dict[str, Any]:
    result: ModelResult
    if call.problem is not None:
        result = failure("invalid_input", f"{call.problem}; fix the call and send it again")
    else:
        result = await surface.call(call.name, call.arguments)
    return render_result(call, result)
