"""A model that replays recorded turns, so the whole tool loop runs without a live model.

A replay file holds the assistant turns of one conversation in the Anthropic Messages format:

    {"prompt": "Find the duplicate payments.",
     "turns": [{"content": [{"type": "text", ...}, {"type": "tool_use", "id", "name", "input"}]},
               ...]}

Each turn's tool calls go to :func:`~airlock.handle_turn`; the answers become the next user
message. Arguments are recorded values only: a later turn cannot compute from an earlier
result, which keeps a replay deterministic and its effects visible in the file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from airlock.frontends._call_arguments import MAX_ARGUMENT_DEPTH, too_deep
from airlock.frontends._providers import handle_turn
from airlock.harness import ModelToolSurface
from airlock.policies import UsageError

__all__ = [
    "ContextBytes",
    "ReplayError",
    "ReplayModel",
    "ReplayTurn",
    "Transcript",
    "content_problem",
]

_LEVELS = MAX_ARGUMENT_DEPTH + 5


class ReplayError(UsageError):
    """A replay file cannot be read or is not in the replay format; :attr:`source` says which."""

    code = "replay_file"

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(
            f"replay {source}: {reason}; "
            'write {"turns": [{"content": [<Anthropic content blocks>]}, ...]}'
        )
        self.source = source
        self.reason = reason


class ReplayTurn(BaseModel):
    """One recorded assistant turn: Anthropic content blocks (text, tool_use)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: list[dict[str, Any]] = Field(description="The assistant message's content blocks.")
    note: str = Field(default="", description="What the turn is for (not sent anywhere).")

    @field_validator("content")
    @classmethod
    def _blocks(cls, content: list[dict[str, Any]]) -> list[dict[str, Any]]:
        problem = content_problem(content)
        if problem is not None:
            raise ValueError(problem)
        return content


def content_problem(blocks: Sequence[object]) -> str | None:
    """What makes ``blocks`` no assistant content that can be printed and sent back as it
    is, or None: each block must be a JSON object, and a text block's ``text`` a string.
    (A tool call's own faults are its answer's: see :func:`~airlock.handle_turn`.)"""
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            return f"content block {index} is {type(block).__name__}, not an object"
        if block.get("type") == "text" and not isinstance(block.get("text"), str):
            return f"text block {index} has no string 'text'"
    return None


class ReplayModel(BaseModel):
    """A scripted model: its turns are played in order against a session's tools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str = Field(default="", description="The user message that opens the conversation.")
    turns: list[ReplayTurn] = Field(description="The assistant turns, in order.")

    @classmethod
    def from_json(cls, text: str, *, source: str = "<replay>") -> ReplayModel:
        """Parse a replay from JSON text.

        Raises:
            ReplayError: the text is not JSON that can be read, nests deeper than a call's
                input may, or is not in the replay format.
        """
        try:
            data = json.loads(text)
            # An input sits five levels below the top (turns, a turn, content, the block,
            # input): a file deeper than that holds a call refused anyway, and its messages
            # could not be sent or printed (json.dumps recurses).
            if text.count("[") + text.count("{") > _LEVELS and too_deep(data, levels=_LEVELS):
                raise ReplayError(source, f"nests deeper than {_LEVELS} levels")
            return cls.model_validate(data)
        except json.JSONDecodeError as exc:
            raise ReplayError(source, f"not JSON: {exc.msg} at line {exc.lineno}") from exc
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "top level"
            raise ReplayError(source, f"{where}: {first['msg']}") from exc
        except RecursionError:
            raise ReplayError(source, "not JSON that can be read: it nests too deep") from None
        except ValueError:  # (after ValidationError, one too) an integer too long for int()
            digits = sys.get_int_max_str_digits()
            raise ReplayError(source, f"holds an integer longer than {digits} digits") from None

    @classmethod
    def load(cls, path: str | Path) -> ReplayModel:
        """Read a replay file.

        Raises:
            ReplayError: the file cannot be read or is not a replay.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ReplayError(str(path), f"cannot read it: {exc}") from exc
        return cls.from_json(text, source=str(path))

    async def play(
        self,
        surface: ModelToolSurface,
        *,
        after_turn: Callable[[int, list[dict[str, Any]]], Awaitable[None]] | None = None,
        on_message: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> Transcript:
        """Run every turn's tool calls and collect the conversation.

        ``after_turn(index, answers)`` runs after each turn, before the next one: the place
        where an application approves a paused write. ``on_message(message)`` sees each
        message as it is added (to print a conversation as it goes).

        Raises:
            MalformedBlockError: a recorded turn holds a malformed tool call.
        """
        transcript = Transcript(messages=[])

        async def add(message: dict[str, Any]) -> None:
            transcript.messages.append(message)
            if on_message is not None:
                await on_message(message)

        if self.prompt:
            await add({"role": "user", "content": self.prompt})
        for index, turn in enumerate(self.turns):
            await add({"role": "assistant", "content": turn.content})
            answers = await handle_turn(surface, turn.content)
            if answers:
                await add({"role": "user", "content": answers})
            if after_turn is not None:
                await after_turn(index, answers)
        return transcript


class Transcript(BaseModel):
    """The conversation a replay produced, in Anthropic Messages format."""

    messages: list[dict[str, Any]] = Field(description="User and assistant messages, in order.")

    def results(self) -> Iterator[dict[str, Any]]:
        """Every tool_result block, in order."""
        for message in self.messages:
            if message["role"] == "user" and isinstance(message["content"], list):
                yield from message["content"]

    def result(self, tool_use_id: str) -> dict[str, Any]:
        """The tool_result answering ``tool_use_id``.

        Raises:
            KeyError: no call had that id.
        """
        for block in self.results():
            if block.get("tool_use_id") == tool_use_id:
                return block
        raise KeyError(tool_use_id)

    def context_bytes(self) -> int:
        """Bytes of tool results that went back into the model's context."""
        return sum(len(str(block.get("content", "")).encode()) for block in self.results())

    def context(self, *, upto: str | None = None) -> ContextBytes:
        """What the tool calls put into the model's context: the calls themselves (a
        program's text, or each call's arguments) and their results, up to and including
        the result of the call ``upto`` (all of them when None)."""
        calls = results = call_bytes = 0
        blocks = (b for m in self.messages if isinstance(m["content"], list) for b in m["content"])
        for block in blocks:
            if block.get("type") == "tool_use":
                calls += 1
                call_bytes += len(json.dumps(block, separators=(",", ":")).encode())
            elif block.get("type") == "tool_result":
                results += len(str(block.get("content", "")).encode())
                if upto is not None and block.get("tool_use_id") == upto:
                    break
        return ContextBytes(calls=calls, result_bytes=results, call_bytes=call_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextBytes:
    """What a conversation's tool calls put into the model's context."""

    calls: int
    """Tool calls the model made."""
    result_bytes: int
    """Bytes of the tool results sent back to the model."""
    call_bytes: int
    """Bytes of the model's own tool calls (a program's text, or each call's arguments)."""

    @property
    def total(self) -> int:
        return self.result_bytes + self.call_bytes
