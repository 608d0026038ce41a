"""``airlock audit``: read the audit log (``list`` runs, ``show RUN``, ``effects``)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from airlock.cli._inventory import load_inventory, usage_errors
from airlock.cli._settings import Settings
from airlock.inventory import (
    ANY_PRINCIPAL,
    Selection,
    parse_since,
    run_effects,
    unused_effects,
    users_of,
)
from airlock.policies import UsageError
from airlock.sandbox import UNKNOWN_DIGEST
from airlock.tools import AuditEvent, SQLiteAuditStore

__all__ = ["audit_app"]

audit_app = typer.Typer(
    name="audit",
    help="Read the audit log: which runs called which tools, and how each call ended.",
    no_args_is_help=True,
)

DbOption = Annotated[
    Path | None,
    typer.Option("--db", help="Audit database (default: the one in AIRLOCK_HOME)."),
]


def _open(db: Path | None) -> SQLiteAuditStore:
    path = db if db is not None else Settings.from_env().audit_db
    if not path.exists():
        Console(stderr=True).print(f"no audit log at {path}; run something first or pass --db")
        raise typer.Exit(code=1)
    return SQLiteAuditStore(path, readonly=True)


def _time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@audit_app.command("list")
def list_runs(
    db: DbOption = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many runs.")] = 50,
) -> None:
    """List the most recent runs with their call counts by outcome."""
    store = _open(db)
    try:
        runs = store.runs(limit=limit)
    finally:
        store.close()
    table = Table(title="airlock runs (most recent first)")
    counts = ("calls", "ok", "preview", "error", "unknown")
    for column in ("run", "started (UTC)", *counts, "users"):
        table.add_column(column, justify="right" if column in counts else "left")
    for run in runs:
        table.add_row(
            run.run_id,
            _time(run.started),
            str(run.calls),
            str(run.ok),
            str(run.previews),
            str(run.error),
            str(run.unknown),
            ", ".join(run.users),
        )
    Console(width=200).print(table if runs else "no runs recorded")


@audit_app.command("show")
def show_run(
    run: Annotated[str, typer.Argument(help="The run id, as `audit list` prints it.")],
    db: DbOption = None,
    tool: Annotated[str | None, typer.Option(help="Only calls of this tool.")] = None,
) -> None:
    """Show every call of one run: tool, caller, where admission stopped, outcome, effects."""
    store = _open(db)
    try:
        events = store.query(run_id=run, tool=tool)
    finally:
        store.close()
    if not events:
        Console(stderr=True).print(f"no audit events for run {run!r}")
        raise typer.Exit(code=1)
    table = Table(title=f"run {run}")
    for column in (
        "time (UTC)",
        "call",
        "caller",
        "tool",
        "stage",
        "decision",
        "rule",
        "outcome",
        "code",
        "ms",
        "effects",
    ):
        table.add_column(column, justify="right" if column == "ms" else "left")
    for e in events:
        table.add_row(
            _time(e.ts),
            e.call_id,
            e.caller,
            e.tool,
            e.stage,
            e.decision,
            e.rule,
            e.outcome,
            e.code or "",
            f"{e.duration_s * 1000:.2f}",
            "\n".join(e.effects),
        )
    Console(width=240).print(table)


@audit_app.command("effects")
def effects(
    run: Annotated[str | None, typer.Argument(help="A run id: what this run touched.")] = None,
    since: Annotated[
        str | None,
        typer.Option(help="A period such as 7d: reachable effects no run used in it."),
    ] = None,
    registry: Annotated[
        str, typer.Option(help="The tool registry, as MODULE:OBJECT.", show_default=False)
    ] = "",
    policy: Annotated[
        Path | None, typer.Option(help="The policy file (TOML).", dir_okay=False)
    ] = None,
    principal: Annotated[
        list[str] | None,
        typer.Option(help="Principal(s) to judge against (default: the run's user, or all)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """Effects a run exercised, set against what was reachable (RUN), or the reachable
    effects no run used in a period (--since 7d): candidates for removal.

    Exits 1 when a run exercised something the current inventory does not allow.
    """
    with usage_errors():
        if (run is None) == (since is None):
            raise UsageError("give a RUN id or --since PERIOD (for example --since 7d)")
        if not registry or policy is None:
            raise UsageError("give --registry MODULE:OBJECT and --policy FILE")
        window = parse_since(since) if since is not None else None
    store = _open(db)
    try:
        events = store.query(run_id=run)
    finally:
        store.close()
    console = Console(width=200, highlight=False)
    if run is not None:
        _run_effects(console, run, events, registry, policy, principal)
    else:
        cutoff = time.time() - (window or 0)
        recent = [e for e in events if e.ts >= cutoff]
        _unused(console, since or "", recent, registry, policy, principal)


def _run_effects(
    console: Console,
    run: str,
    events: list[AuditEvent],
    registry: str,
    policy: Path,
    principals: list[str] | None,
) -> None:
    if not events:
        Console(stderr=True).print(f"no audit events for run {run!r}")
        raise typer.Exit(code=1)
    users = users_of(events)
    chosen = tuple(principals or dict.fromkeys(user for user, _ in users))
    tenant = users[0][1] if len(users) == 1 and not principals else None
    with usage_errors():
        loaded = load_inventory(
            registry,
            policy,
            selection=Selection(every_principal=False, principals=chosen, roles=(), tenant=tenant),
            image_digest=UNKNOWN_DIGEST,
        )
    failed = False
    for subject in loaded.inventory.subjects:
        mine = [e for e in events if e.user_id in (subject.name, subject.user_id)]
        found = run_effects(mine, subject)
        table = Table(title=f"run {run}: effects exercised by {subject.name}")
        for column in ("tool", "callers", "calls", "effects exercised", "outside the inventory"):
            table.add_column(column, justify="right" if column == "calls" else "left")
        for item in found:
            table.add_row(
                item.tool,
                ", ".join(item.callers),
                str(item.calls),
                "\n".join(item.effects),
                "\n".join(item.outside),
            )
        console.print(table if found else f"{subject.name}: no call of this run ran")
        called = {item.tool for item in found}
        idle = [t.name for t in subject.tools if t.reach and t.name not in called]
        console.print(f"reachable but not called in this run: {', '.join(idle) or 'none'}")
        failed |= any(item.outside for item in found)
    raise typer.Exit(1 if failed else 0)


def _unused(
    console: Console,
    since: str,
    events: list[AuditEvent],
    registry: str,
    policy: Path,
    principals: list[str] | None,
) -> None:
    selection = Selection(
        every_principal=not principals, principals=tuple(principals or ()), roles=(), tenant=None
    )
    with usage_errors():
        loaded = load_inventory(registry, policy, selection=selection, image_digest=UNKNOWN_DIGEST)
    named = set(loaded.document.principals)
    for subject in loaded.inventory.subjects:
        if subject.name == ANY_PRINCIPAL:
            mine = [e for e in events if e.user_id not in named]
        else:
            mine = [e for e in events if e.user_id == subject.name]
        unused = unused_effects(mine, subject)
        table = Table(title=f"reachable by {subject.name}, never used in the last {since}")
        table.add_column("tool")
        table.add_column("unused")
        for item in unused:
            table.add_row(item.tool, item.effect or "the whole tool (never called)")
        console.print(table if unused else f"{subject.name}: every reachable effect was used")
