"""``airlock chat``: a conversation with a model over a session's tools, printed as it goes.

With ``--replay FILE`` the model's turns come from a recording (no network, no key); else a
live Anthropic model is called with the key in ``ANTHROPIC_API_KEY``. Exit codes: 0 done;
2 a usage error (no key and no replay, bad registry, policy or replay file); 3 the sandbox is
unavailable; 4 the model API failed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.text import Text

from airlock.cli._inventory import PolicyOption, RegistryOption, TenantOption, usage_errors
from airlock.cli._literal import literal, visible_json
from airlock.cli._serve import (
    ImageOption,
    InputsOption,
    KeepStateOption,
    MemoryOption,
    SandboxOptions,
    TimeoutOption,
    open_session,
)
from airlock.cli._settings import Settings
from airlock.frontends import (
    DEFAULT_MODEL,
    AnthropicModel,
    ModelAPIError,
    ReplayModel,
    Transcript,
    chat_loop,
)
from airlock.policies import UsageError
from airlock.sandbox import SandboxError

__all__ = ["chat", "print_message"]

_SHOWN_CHARS = 600


def print_message(console: Console, message: Mapping[str, Any]) -> None:
    """One message, compactly: text, tool calls with their arguments, tool results. All of
    it is the model's or a tool's text, printed literally (:mod:`airlock.cli._literal`).
    A value of another shape than expected is printed as ``str()`` makes it, never raised
    on: the answer or replay it came from is checked before, and printing is no place to
    fail."""
    content = message.get("content")
    role = (f"{message.get('role')}:", "bold")
    if not isinstance(content, list):
        console.print(Text.assemble(role, " ", literal(str(content), lines=True)))
        return
    for block in content:
        if not isinstance(block, Mapping):
            console.print(Text.assemble(role, " ", literal(str(block), lines=True)))
            continue
        kind = block.get("type")
        if kind == "text":
            console.print(Text.assemble(role, " ", literal(str(block.get("text")), lines=True)))
        elif kind == "tool_use":
            given = block.get("input")
            code = given.get("code") if isinstance(given, dict) else None
            # A program reads better as code than as an escaped JSON string.
            arguments = code if isinstance(code, str) else visible_json(given, indent=None)
            name = literal(f"→ {block.get('name')}", "cyan")
            console.print(Text.assemble(name, " ", literal(str(block.get("id")), "dim")))
            console.print(literal(_cut(arguments), lines=True))
        elif kind == "tool_result":
            style = "red" if block.get("is_error") else "green"
            result = str(block.get("content", ""))
            size = len(result.encode("utf-8", "surrogatepass"))
            call = literal(f"← {block.get('tool_use_id')}", style)
            console.print(Text.assemble(call, " ", (f"{size} bytes", "dim")))
            console.print(literal(_cut(result), lines=True))


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + f"… ({len(text)} chars)"


def chat(
    registry: RegistryOption,
    policy: PolicyOption,
    user: Annotated[str, typer.Option(help="The principal the session acts for (user id).")],
    prompt: Annotated[
        str | None, typer.Argument(help="What to ask (a replay brings its own).")
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option(help="Play recorded model turns from this file instead of a live model."),
    ] = None,
    model: Annotated[str, typer.Option(help="The Anthropic model of a live chat.")] = (
        DEFAULT_MODEL
    ),
    max_turns: Annotated[int, typer.Option(help="Most model turns of a live chat.", min=1)] = 20,
    tenant: TenantOption = None,
    ledger: Annotated[
        Path | None,
        typer.Option(help="Ledger database (default: ledger.db in AIRLOCK_HOME)."),
    ] = None,
    timeout: TimeoutOption = None,
    memory: MemoryOption = None,
    image: ImageOption = None,
    keep_state: KeepStateOption = False,
    inputs: InputsOption = None,
) -> None:
    """Talk with a model (live, or a recorded replay) over the session's tools; every tool
    call and result is printed; a write waits for `airlock approvals approve` (a live chat
    waits with it, commits it once approved and tells the model). Files the
    programs leave in /out are stored under AIRLOCK_HOME/artifacts (`airlock artifacts`)."""
    console = Console(highlight=False)
    settings = Settings.from_env()
    options = SandboxOptions(
        timeout=timeout, memory=memory, image=image, keep_state=keep_state, inputs=inputs
    )

    async def show(message: dict[str, Any]) -> None:
        print_message(console, message)

    async def go(recorded: ReplayModel | None, key: str) -> Transcript:
        async with open_session(
            registry,
            policy,
            user=user,
            tenant=tenant,
            ledger=ledger,
            settings=settings,
            options=options,
        ) as session:
            if recorded is not None:
                return await recorded.play(session, on_message=show)
            live = AnthropicModel(key, model=model)
            try:
                await show({"role": "user", "content": prompt or ""})
                return await chat_loop(
                    live,
                    session,
                    prompt or "",
                    max_turns=max_turns,
                    on_message=show,
                    writes=session,  # writes it asked for: wait, commit once approved, tell
                )
            finally:
                await live.aclose()

    with usage_errors():
        recorded = ReplayModel.load(replay) if replay is not None else None
        if recorded is not None and prompt:
            recorded = recorded.model_copy(update={"prompt": prompt})
        key = os.environ.get("ANTHROPIC_API_KEY", "")
        if recorded is None and not key:
            raise UsageError("set ANTHROPIC_API_KEY for a live model, or pass --replay FILE")
        if recorded is None and not prompt:
            raise UsageError("give a prompt: airlock chat 'what to do' --registry ...")
        try:
            transcript = anyio.run(go, recorded, key)
        except SandboxError as exc:
            Console(stderr=True).print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
            raise typer.Exit(3) from None
        except ModelAPIError as exc:
            # The provider's answer can quote the model's text: never markup.
            failed = (f"model API ({exc.code}):", "red")
            Console(stderr=True).print(Text.assemble(failed, " ", literal(str(exc))))
            raise typer.Exit(4) from None
    console.print(
        f"[dim]{transcript.context_bytes():,} bytes of tool results entered the context[/]"
    )
