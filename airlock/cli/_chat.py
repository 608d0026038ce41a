"""``airlock chat``: a conversation with a model over a session's tools, printed as it goes.

With ``--replay FILE`` the model's turns come from a recording (no network, no key); else a
live Anthropic model is called with the key in ``ANTHROPIC_API_KEY``. Exit codes: 0 done;
2 a usage error (no key and no replay, bad registry, policy or replay file); 3 the sandbox is
unavailable; 4 the model API failed.

A chat that ends while writes or batches it asked for still wait for a person says so on
stderr, each with its fingerprint and the command that approves and commits it: once the
chat has ended, no session is left to commit what a person approves.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.text import Text

from airlock.cli._approval_ledger import open_approval_ledger
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
from airlock.harness import Session
from airlock.policies import UsageError
from airlock.sandbox import SandboxError
from airlock.tools import BATCH_PREFIX, LedgerError, LedgerStore, ToolError, batch_items

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


@dataclass(slots=True)
class _Left:
    """What the session had not settled when it ended: its paused writes (preview id and
    the fingerprint the model was shown) and its batches' ids."""

    writes: list[tuple[str, str]] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)

    def take(self, session: Session) -> None:
        self.writes = [(p.preview_id, p.fingerprint) for p in session.pending()]
        self.batches = session.pending_batches()


def _still_waiting(store: LedgerStore, left: _Left, now: float) -> list[tuple[str, str]]:
    """Those of ``left`` that wait for a person now, with the fingerprint to approve: a
    preview not decided nor expired, a batch with such an item. One that does not read back
    is left out (``approvals list`` names it)."""
    found: list[tuple[str, str]] = []
    for preview_id, fingerprint in left.writes:
        preview = store.preview(preview_id)
        if preview is not None and preview.state == "prepared" and not preview.expired(now):
            found.append((preview_id, fingerprint))
    for batch_id in left.batches:
        batch = store.batch(batch_id)
        try:
            items = batch_items(store, batch_id, now=now) if batch is not None else ()
        except ToolError:
            continue
        if batch is not None and any(item.state == "waiting" for item in items):
            found.append((batch_id, batch.fingerprint))
    return found


def _tell_waiting(left: _Left, *, registry: str, policy: Path, ledger: Path | None) -> None:
    """On stderr, one line each: what of the ended session waits for a person, and the
    command that approves and commits it (no session is left to commit an approval)."""
    if not left.writes and not left.batches:
        return
    errors = Console(stderr=True, soft_wrap=True, highlight=False)
    try:
        store = open_approval_ledger(ledger, readonly=True)
        try:
            waiting = _still_waiting(store, left, time.time())
        finally:
            store.close()
    except (LedgerError, typer.Exit):
        ids = ", ".join([pid for pid, _ in left.writes] + left.batches)
        errors.print(literal(f"the chat ended; these may still wait: {ids} (`approvals list`)"))
        return
    if not waiting:
        return
    where = [] if ledger is None else ["--ledger", str(ledger)]
    batches = sum(1 for ident, _ in waiting if ident.startswith(BATCH_PREFIX))
    counts = [(len(waiting) - batches, "write(s)"), (batches, "batch(es)")]
    what = " and ".join(f"{n} {noun}" for n, noun in counts if n)
    errors.print(
        f"the chat ended with {what} waiting for approval, and no session is left to commit "
        "them: review each (`airlock approvals show ID`), then approve and commit it here "
        "with the command on its line (an approved read, or a write holding a secret, only "
        "its own session could run: the command approves it and says so)"
    )
    for ident, fingerprint in waiting:
        command = ["airlock", "approvals", "approve", ident, "--fingerprint", fingerprint]
        command += ["--commit", "--registry", registry, "--policy", str(policy), *where]
        errors.print(literal(f"{ident}  fingerprint {fingerprint}:  {shlex.join(command)}"))


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
    waits with it, commits it once approved and tells the model). What still waits when the
    chat ends is listed on stderr, each with the command that approves and commits it. Files
    the programs leave in /out are stored under AIRLOCK_HOME/artifacts (`airlock artifacts`)."""
    console = Console(highlight=False)
    settings = Settings.from_env()
    options = SandboxOptions(
        timeout=timeout, memory=memory, image=image, keep_state=keep_state, inputs=inputs
    )

    async def show(message: dict[str, Any]) -> None:
        print_message(console, message)

    left = _Left()

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
            try:
                return await talk(session, recorded, key)
            finally:
                left.take(session)  # however it ends: a person must learn what waits

    async def talk(session: Session, recorded: ReplayModel | None, key: str) -> Transcript:
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

    try:
        transcript = _run(go, replay=replay, prompt=prompt)
        console.print(
            f"[dim]{transcript.context_bytes():,} bytes of tool results entered the context[/]"
        )
    finally:  # however the chat ended (an error, ^C too): what waits is said last
        _tell_waiting(left, registry=registry, policy=policy, ledger=ledger)


def _run(
    go: Callable[[ReplayModel | None, str], Awaitable[Transcript]],
    *,
    replay: Path | None,
    prompt: str | None,
) -> Transcript:
    """Check the replay, prompt and key, and run ``go`` with them.

    Raises:
        typer.Exit: 2 a usage error, 3 the sandbox is unavailable, 4 the model API failed
            (each said on stderr).
    """
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
            return anyio.run(go, recorded, key)
        except SandboxError as exc:
            Console(stderr=True).print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
            raise typer.Exit(3) from None
        except ModelAPIError as exc:
            # The provider's answer can quote the model's text: never markup.
            failed = (f"model API ({exc.code}):", "red")
            Console(stderr=True).print(Text.assemble(failed, " ", literal(str(exc))))
            raise typer.Exit(4) from None
