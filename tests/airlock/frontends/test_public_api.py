from __future__ import annotations

from airlock import frontends
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
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


def test_public_api_is_pinned() -> None:
    assert_public_api(frontends, PUBLIC_API)
