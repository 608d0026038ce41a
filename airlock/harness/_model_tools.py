"""The provider-neutral surface a model talks to: tool definitions and tool results.

A :class:`ModelTool` is what a session offers a model; a :class:`ModelResult` is what goes
back into the model's context after a call. Provider formats (Anthropic Messages, OpenAI
Responses and Chat Completions) and the MCP server are thin renderings of these two models,
so every front end shows the model the same tools and the same answers.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from airlock.sandbox import ArtifactRef

__all__ = ["ModelResult", "ModelTool", "ModelToolSurface"]


class ModelTool(BaseModel):
    """One tool as offered to a model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The tool's name, as the model calls it.")
    description: str = Field(
        description="What it does, when to use it, and (for execute_code) the typed API."
    )
    input_schema: dict[str, Any] = Field(description="Strict JSON Schema of the arguments.")
    read_only: bool = Field(
        description="It changes nothing anywhere and reaches no network destination a call "
        "names (MCP readOnlyHint): a tool with a network effect is not read-only."
    )
    destructive: bool = Field(
        description="It may change or destroy existing state (MCP destructiveHint)."
    )
    idempotent: bool = Field(
        description="Calling it again with the same arguments has no further effect "
        "(MCP idempotentHint)."
    )
    open_world: bool = Field(
        default=True,
        description="It reaches network destinations beyond its own system of record: it "
        "declares a network effect, or (execute_code) a tool its programs call does "
        "(MCP openWorldHint).",
    )


class ModelResult(BaseModel):
    """The answer to one model tool call, as it enters the model's context."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    is_error: bool = Field(description="The call did not do what was asked.")
    content: str = Field(description="The text the model reads: JSON, compact.")
    code: str | None = Field(
        default=None,
        description="Stable error or pause code (``needs_approval``, ``denied``, ...); "
        "None on success.",
    )
    retryable: bool = Field(default=False, description="The same call may succeed later.")
    artifacts: tuple[ArtifactRef, ...] = Field(
        default=(),
        description="Files a program left in /out, stored on the host: their references are "
        "in ``content`` too, never their bytes. An MCP server offers them as resources.",
    )


class ModelToolSurface(Protocol):
    """What a front end (provider loop, MCP server) needs from a session."""

    def tools(self) -> list[ModelTool]:
        """The tools this session's principal may use, ``execute_code`` first."""
        ...

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        """Run one model tool call to its model-facing result; never raises for tool errors."""
        ...
