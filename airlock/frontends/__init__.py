"""Front ends: a session's tools in each provider's wire format, recorded and live model
loops, and (in :mod:`airlock.frontends.mcp`, with the ``mcp`` extra) an MCP server.

Every front end shows the model the same tools and the same answers: they render
:class:`~airlock.harness.ModelTool` and :class:`~airlock.harness.ModelResult`, and call
``surface.call`` for every tool call.
"""

from airlock.frontends._chat import (
    ANTHROPIC_URL,
    DEFAULT_MODEL,
    AnthropicModel,
    ModelAPIError,
    chat_loop,
)
from airlock.frontends._provider_wire import (
    MalformedBlockError,
    Provider,
    ToolCall,
    anthropic_tools,
    openai_chat_tools,
    openai_responses_tools,
    parse_block,
    render_result,
    render_tools,
)
from airlock.frontends._providers import call_blocks, handle_block, handle_turn
from airlock.frontends._replay import ContextBytes, ReplayError, ReplayModel, Transcript

__all__ = [
    "ANTHROPIC_URL",
    "DEFAULT_MODEL",
    "AnthropicModel",
    "ContextBytes",
    "MalformedBlockError",
    "ModelAPIError",
    "Provider",
    "ReplayError",
    "ReplayModel",
    "ToolCall",
    "Transcript",
    "anthropic_tools",
    "call_blocks",
    "chat_loop",
    "handle_block",
    "handle_turn",
    "openai_chat_tools",
    "openai_responses_tools",
    "parse_block",
    "render_result",
    "render_tools",
]
