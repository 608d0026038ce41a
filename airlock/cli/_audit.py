"""``airlock audit``: read, search, check and export the audit log.

``list`` runs, ``show RUN``, ``effects`` (what a run exercised, or what no run used),
``find`` (which runs touched a resource, or used an effect kind), ``program HASH`` (the
text of a program that ran), ``verify`` (the hash chain) and ``export`` (JSON lines). Every
command but ``program`` and ``export`` takes ``--json``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from airlock.cli._audit_queries import (
    DbOption,
    JsonOption,
    SinceOption,
    event_json,
    find,
    open_store,
    print_json,
    since_cutoff,
    time_text,
    unused_or_run_effects,
)
from airlock.cli._inventory import usage_errors
from airlock.cli._literal import literal, visible, visible_json
from airlock.harness import EXECUTE_CODE
from airlock.policies import UsageError

__all__ = ["audit_app"]

audit_app = typer.Typer(
    name="audit",
    help="Read the audit log: which runs called which tools, what they touched, and whether "
    "the log is intact.",
    no_args_is_help=True,
)
audit_app.command("effects")(unused_or_run_effects)
audit_app.command("find")(find)


@audit_app.command("list")
def list_runs(
    db: DbOption = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many runs.")] = 50,
    json_output: JsonOption = False,
) -> None:
    """List the most recent runs with their call counts by outcome."""
    with _store(db) as store:
        runs = store.runs(limit=limit)
    if json_output:
        print_json(
            {
                "runs": [
                    {
                        "run_id": r.run_id,
                        "started": r.started,
                        "ended": r.ended,
                        "calls": r.calls,
                        "ok": r.ok,
                        "preview": r.previews,
                        "error": r.error,
                        "unknown": r.unknown,
                        "users": list(r.users),
                    }
                    for r in runs
                ]
            }
        )
        return
    table = Table(title="airlock runs (most recent first)")
    counts = ("calls", "ok", "preview", "error", "unknown")
    for column in ("run", "started (UTC)", *counts, "users"):
        table.add_column(column, justify="right" if column in counts else "left")
    for run in runs:
        table.add_row(
            literal(run.run_id),
            time_text(run.started),
            str(run.calls),
            str(run.ok),
            str(run.previews),
            str(run.error),
            str(run.unknown),
            literal(", ".join(run.users)),
        )
    Console(width=200).print(table if runs else "no runs recorded")


@audit_app.command("show")
def show_run(
    run: Annotated[str, typer.Argument(help="The run id, as `audit list` prints it.")],
    db: DbOption = None,
    tool: Annotated[str | None, typer.Option(help="Only calls of this tool.")] = None,
    json_output: JsonOption = False,
) -> None:
    """Show every record of one run: tool, caller, where admission stopped, outcome,
    effects, and who approved a write."""
    with _store(db) as store:
        events = [(n, e) for n, e, _ in store.records(run_id=run) if tool in (None, e.tool)]
    if not events:
        Console(stderr=True).print(literal(f"no audit events for run {run!r}"))
        raise typer.Exit(code=1)
    if json_output:
        print_json({"run_id": run, "events": [event_json(n, e) for n, e in events]})
        return
    table = Table(title=literal(f"run {run}"))
    columns = ("record", "time (UTC)", "call", "caller", "tool", "stage", "decision", "rule")
    for column in (*columns, "outcome", "code", "ms", "effects", "approver"):
        table.add_column(column, justify="right" if column in ("ms", "record") else "left")
    for number, e in events:
        table.add_row(
            str(number),
            time_text(e.ts),
            *map(literal, (e.call_id, e.caller, e.tool, e.stage, e.decision, e.rule, e.outcome)),
            literal(e.code or ""),
            f"{e.duration_s * 1000:.2f}",
            _effects_text(e.effects),
            literal(e.approver or ""),
        )
    Console(width=260).print(table)


@audit_app.command("program")
def show_program(
    digest: Annotated[
        str | None,
        typer.Argument(
            metavar="[HASH]", help="The program's hash (its args_hash in `audit show`)."
        ),
    ] = None,
    run: Annotated[
        str | None, typer.Option(help="Every program this run ran, in order, instead.")
    ] = None,
    db: DbOption = None,
) -> None:
    """Print the text of a program that ran, by its hash (or a unique prefix of it), or
    every program of a run (--run RUN), each under a comment line naming it."""
    with usage_errors():
        if (digest is None) == (run is None):
            raise UsageError("give a program's HASH or --run RUN")
    with _store(db) as store:
        if run is not None:
            ran = [(n, e) for n, e, _ in store.records(run_id=run) if e.tool == EXECUTE_CODE]
            texts = [(n, e, store.program(e.args_hash)) for n, e in ran if e.final]
        else:
            prefix = (digest or "").lower()
            found = store.read(
                lambda conn: conn.execute(
                    "SELECT hash FROM audit_programs WHERE hash >= ? AND hash < ? LIMIT 2",
                    (prefix, prefix + "g"),
                ).fetchall()
            )
            text = store.program(str(found[0][0])) if len(found) == 1 else None
    if run is not None:
        if not texts:
            Console(stderr=True).print(literal(f"run {run!r} ran no program"))
            raise typer.Exit(code=1)
        for number, event, text in texts:
            sys.stdout.write(
                visible(f"# record {number}, call {event.call_id}, program {event.args_hash}")
                + "\n"
            )
            shown = "# (its text is not stored)" if text is None else visible(text, lines=True)
            sys.stdout.write(_ended(shown))
        return
    if text is None:
        why = "matches more than one program" if len(found) > 1 else "is not a stored program"
        Console(stderr=True).print(
            literal(f"{digest!r} {why}; `airlock audit show RUN` lists hashes")
        )
        raise typer.Exit(code=1)
    sys.stdout.write(_ended(visible(text, lines=True)))


def _ended(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


@audit_app.command("verify")
def verify(
    db: DbOption = None,
    key: Annotated[
        Path | None,
        typer.Option(help="The chain key (default: the database path plus .key).", dir_okay=False),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Check the hash chain: every record, the head, the effect index and every stored
    program. Exits 1 naming the first record that was changed, is missing, or is out of
    place."""
    with _store(db, key=key) as store, usage_errors():
        report = store.verify()
    if json_output:
        print_json(
            {
                "ok": report.ok,
                "records": report.records,
                "head": report.head,
                "programs": report.programs,
                "last_chain": report.last_chain,
                "problem": report.problem,
                "record": report.record,
                "detail": report.detail,
            }
        )
    elif report.ok:
        Console(highlight=False).print(
            literal(
                f"ok: {report.records} records and {report.programs} programs, chain intact; "
                f"last chain {report.last_chain or '(empty)'}"
            )
        )
    else:
        intact = (
            f"the chain of its {report.records} records is intact"
            if report.problem == "program"
            else f"{report.records} records before it are intact"
        )
        # The detail quotes what the store holds (a program row's hash is not chained, so
        # whoever tampered with the file wrote it): text, never markup or a control.
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            Text.assemble(
                literal(str(report.problem), "red"),
                literal(f": record {report.record}: {report.detail} ({intact})"),
            )
        )
    raise typer.Exit(0 if report.ok else 1)


@audit_app.command("export")
def export(
    db: DbOption = None,
    since: SinceOption = None,
    run: Annotated[str | None, typer.Option(help="Only the records of this run.")] = None,
) -> None:
    """Write the records as JSON lines on standard output, oldest first, each with its
    record number and chain (to keep a copy elsewhere, or feed another system)."""
    cutoff = since_cutoff(since)
    with _store(db) as store:
        for number, event, chain in store.records(run_id=run, since=cutoff):
            line: dict[str, Any] = event_json(number, event)
            line["chain"] = chain
            sys.stdout.write(visible_json(line, indent=None) + "\n")


def _effects_text(effects: tuple[str, ...], shown: int = 20) -> Text:
    more = len(effects) - shown
    lines = "\n".join(map(visible, effects[:shown]))  # each effect one line, then joined
    return literal(lines + (f"\n… {more} more" if more > 0 else ""), lines=True)


@contextmanager
def _store(db: Path | None, *, key: Path | None = None) -> Iterator[Any]:
    store = open_store(db, key=key)
    try:
        yield store
    finally:
        store.close()
