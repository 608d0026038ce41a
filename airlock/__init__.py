"""airlock: a model's tool calls, sandboxed programs and approved writes, in one harness."""

from airlock._budget import Budget
from airlock._harness import Harness
from airlock._model_tools import ModelResult, ModelTool, ModelToolSurface
from airlock._provider_wire import (
    MalformedBlockError,
    Provider,
    anthropic_tools,
    openai_chat_tools,
    openai_responses_tools,
    render_tools,
)
from airlock._providers import handle_block, handle_turn
from airlock._replay import ReplayError, ReplayModel, Transcript
from airlock._session import PendingWrite, Session

__all__ = [
    "Budget",
    "Harness",
    "MalformedBlockError",
    "ModelResult",
    "ModelTool",
    "ModelToolSurface",
    "PendingWrite",
    "Provider",
    "ReplayError",
    "ReplayModel",
    "Session",
    "Transcript",
    "anthropic_tools",
    "handle_block",
    "handle_turn",
    "openai_chat_tools",
    "openai_responses_tools",
    "render_tools",
]
