"""airlock: a model's tool calls, sandboxed programs and approved writes, in one harness.

The packages, from the bottom up (each imports only those below it):

- :mod:`airlock.policies`: the authority model (principals, effects, grants, approval
  rules, the sandbox profile), pure and I/O-free;
- :mod:`airlock.tools`: tool contracts, the registry and its admission, the write path on a
  durable ledger, the audit log, the REST adapter;
- :mod:`airlock.bridge`: the wire between a sandboxed program and the registry;
- :mod:`airlock.sandbox`: running programs in hardened containers;
- the composition root: :mod:`airlock.harness` (sessions), :mod:`airlock.frontends`
  (provider formats, replay, chat, MCP), :mod:`airlock.inventory` (what an agent can
  reach) and :mod:`airlock.cli` (the ``airlock`` command).

The names below are the ones an application needs to run a session.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airlock._extras import MissingExtraError, requires_extra

if TYPE_CHECKING:
    from airlock.frontends import (
        MalformedBlockError,
        Provider,
        ReplayError,
        ReplayModel,
        Transcript,
        anthropic_tools,
        handle_block,
        handle_turn,
        openai_chat_tools,
        openai_responses_tools,
        render_tools,
    )
    from airlock.harness import (
        Budget,
        Harness,
        ModelResult,
        ModelTool,
        ModelToolSurface,
        PendingWrite,
        Session,
    )

__all__ = [
    "Budget",
    "Harness",
    "MalformedBlockError",
    "MissingExtraError",
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
    "requires_extra",
]

# Loaded on first use, so that importing a lower package (``airlock.policies``, say) does
# not import the whole composition root and its dependencies.
_FROM_HARNESS = frozenset(
    {"Budget", "Harness", "ModelResult", "ModelTool", "ModelToolSurface", "PendingWrite", "Session"}
)


def __getattr__(name: str) -> Any:
    if name in __all__:
        home = "airlock.harness" if name in _FROM_HARNESS else "airlock.frontends"
        module = importlib.import_module(home)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'airlock' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
