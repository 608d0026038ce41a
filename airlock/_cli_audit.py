"""``airlock audit``: read the audit log (``list`` runs, ``show RUN``)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from airlock._settings import Settings
from tools import SQLiteAuditStore

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
    for column in ("run", "started (UTC)", "calls", "ok", "error", "unknown", "users"):
        table.add_column(column, justify="right" if column in ("calls", "ok") else "left")
    for run in runs:
        table.add_row(
            run.run_id,
            _time(run.started),
            str(run.calls),
            str(run.ok),
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
