"""The questions ``airlock audit`` answers in one command: ``find`` (which runs touched a
resource, whether code-called tools wrote or reached the network) and ``effects`` (what a
run exercised against what it could reach, or what no run used in a period), and the
options and output helpers the audit commands share."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from airlock.tools.postgres import PostgresAuditStore
from airlock.cli._inventory import load_inventory, usage_errors
from airlock.cli._literal import literal, visible, visible_json
from airlock.cli._settings import Settings
from airlock.harness import database_url, open_audit_store
from airlock.inventory import (
    ANY_PRINCIPAL,
    ExercisedTool,
    Selection,
    parse_since,
    run_effects,
    unused_effects,
    users_of,
)
from airlock.policies import UsageError
from airlock.sandbox import UNKNOWN_DIGEST
from airlock.tools import AuditEvent, Caller, FoundCall, SQLiteAuditStore, find_calls

__all__ = [
    "DbOption",
    "JsonOption",
    "SinceOption",
    "event_json",
    "find",
    "open_store",
    "print_json",
    "since_cutoff",
    "time_text",
    "unused_or_run_effects",
]

DbOption = Annotated[
    Path | None,
    typer.Option("--db", help="Audit database (default: audit.db in AIRLOCK_HOME)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
SinceOption = Annotated[
    str | None, typer.Option(help="Only the last PERIOD, e.g. 30m, 12h, 7d, 2w.")
]


def open_store(
    db: Path | None, *, key: Path | None = None
) -> SQLiteAuditStore | PostgresAuditStore:
    """The audit store at ``db`` (default: the database ``AIRLOCK_DATABASE_URL`` names, else
    the one in ``AIRLOCK_HOME``), read-only; exits 1 when there is none (nothing is created),
    2 when it cannot be read."""
    settings = Settings.from_env()
    url = database_url()
    if db is None and url is not None:
        with usage_errors():
            return open_audit_store(url, readonly=True, key_file=key)
    path = db if db is not None else settings.audit_db
    if not path.exists():
        Console(stderr=True).print(
            literal(f"no audit log at {path}; run something first or pass --db")
        )
        raise typer.Exit(code=1)
    with usage_errors():
        return SQLiteAuditStore(
            path, readonly=True, key_file=key, busy_timeout=settings.busy_timeout
        )


def time_text(ts: float) -> str:
    """``ts`` as UTC, to the millisecond; a time no date can hold (``1e300``, ``inf``, ``nan``:
    a corrupt or forged record) as its number, so one record cannot stop a whole listing."""
    try:
        return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return repr(ts)


def since_cutoff(since: str | None) -> float | None:
    """The epoch time ``since`` (``7d``...) ago, or ``None``; exits 2 when malformed."""
    if since is None:
        return None
    with usage_errors():
        return time.time() - parse_since(since)


def print_json(value: object) -> None:
    """``value`` as indented JSON on standard output, nothing in it a terminal acts on."""
    print(visible_json(value))


def event_json(record: int, e: AuditEvent) -> dict[str, Any]:
    """One audit record as a JSON object."""
    return {
        "record": record,
        "ts": e.ts,
        "run_id": e.run_id,
        "call_id": e.call_id,
        "caller": e.caller,
        "tool": e.tool,
        "user_id": e.user_id,
        "tenant_id": e.tenant_id,
        "args_hash": e.args_hash,
        "stage": e.stage,
        "decision": e.decision,
        "rule": e.rule,
        "outcome": e.outcome,
        "code": e.code,
        "duration_s": e.duration_s,
        "effects": list(e.effects),
        "detail": e.detail,
        "final": e.final,
        "approver": e.approver,
        "exercised": e.exercised,
    }


def find(
    resource: Annotated[
        str | None,
        typer.Option(help="A target pattern, e.g. 'billing:invoice/inv_1*' or 'api.example.com'."),
    ] = None,
    effect: Annotated[
        str | None,
        typer.Option(help="Effect kinds, comma-separated: read, write, network, spend, disclose."),
    ] = None,
    caller: Annotated[
        str | None, typer.Option(help="Only calls made by 'code' or 'direct'.")
    ] = None,
    tool: Annotated[str | None, typer.Option(help="Only calls of this tool.")] = None,
    since: SinceOption = None,
    attempted: Annotated[
        bool,
        typer.Option("--attempted", help="Also calls that did not run (refused, previews)."),
    ] = False,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many runs.")] = 100,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Which runs touched a resource or used an effect kind, newest first: for example
    --resource 'billing:invoice/inv_1*' --since 7d, or --caller code --effect write,network.

    A call whose tool recorded only a pattern overlapping the resource (a list that does not
    say which records it returned) is shown as 'possible'. Exits 0 whether or not anything
    matched; the JSON says how many runs and calls did.
    """
    with usage_errors():
        if caller not in (None, "code", "direct"):
            raise UsageError(f"--caller {caller!r}: give 'code' or 'direct'")
        kinds = [k.strip() for k in (effect or "").split(",") if k.strip()]
        cutoff = since_cutoff(since)
        store = open_store(db)
        try:
            chosen: Caller | None = "code" if caller == "code" else "direct" if caller else None
            found = find_calls(
                store,
                resource=resource,
                kinds=kinds,
                caller=chosen,
                tool=tool,
                since=cutoff,
                attempted=attempted,
                runs=limit,  # (only the runs shown are built; the counts come from the store)
            )
        finally:
            store.close()
    shown = _by_run(found)
    if json_output:
        print_json(
            {
                "runs_found": found.runs_found,
                "calls_found": found.calls_found,
                "runs": [_run_json(run_id, calls) for run_id, calls in shown],
            }
        )
        return
    title = f"{found.runs_found} run(s), {found.calls_found} call(s) matched (newest first)"
    table = Table(title=title)
    for column in ("run", "last (UTC)", "users", "calls", "tools", "matched effects"):
        table.add_column(column, justify="right" if column == "calls" else "left")
    for run_id, calls in shown:
        matched = sorted({m for c in calls for m in c.matched})
        possible = sum(not c.certain for c in calls)
        more = f"\n… {len(matched) - 5} more" if len(matched) > 5 else ""
        table.add_row(
            literal(run_id),
            time_text(max(c.ts for c in calls)),
            literal(", ".join(sorted({f"{c.user_id}@{c.tenant_id}" for c in calls}))),
            str(len(calls)) + (f" ({possible} possible)" if possible else ""),
            literal(", ".join(sorted({c.tool for c in calls}))),
            literal("\n".join(map(visible, matched[:5])) + more, lines=True),
        )
    console = Console(width=200, highlight=False)
    console.print(table if shown else "no run matched")
    if found.runs_found > limit:
        console.print(f"{found.runs_found - limit} older run(s) not shown; raise --limit or --json")


def _by_run(found: list[FoundCall]) -> list[tuple[str, list[FoundCall]]]:
    by_run: dict[str, list[FoundCall]] = {}
    for call in found:
        by_run.setdefault(call.run_id, []).append(call)
    return sorted(by_run.items(), key=lambda item: item[1][-1].record, reverse=True)


def _run_json(run_id: str, calls: list[FoundCall]) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "users": sorted({f"{c.user_id}@{c.tenant_id}" for c in calls}),
        "first": min(c.ts for c in calls),
        "last": max(c.ts for c in calls),
        "calls": [
            {
                "record": c.record,
                "call_id": c.call_id,
                "tool": c.tool,
                "caller": c.caller,
                "outcome": c.outcome,
                "code": c.code,
                "approver": c.approver,
                "ts": c.ts,
                "matched": list(c.matched),
                "certain": c.certain,
            }
            for c in calls
        ],
    }


def unused_or_run_effects(
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
    json_output: JsonOption = False,
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
        cutoff = since_cutoff(since)
    store = open_store(db)
    try:
        events = store.query(run_id=run, since=cutoff)
    finally:
        store.close()
    console = Console(width=200, highlight=False)
    if run is not None:
        _run_effects(console, run, events, registry, policy, principal, json_output)
    else:
        _unused(console, since or "", events, registry, policy, principal, json_output)


def _run_effects(
    console: Console,
    run: str,
    events: list[AuditEvent],
    registry: str,
    policy: Path,
    principals: list[str] | None,
    json_output: bool,
) -> None:
    if not events:
        Console(stderr=True).print(literal(f"no audit events for run {run!r}"))
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
    subjects: list[dict[str, Any]] = []
    for subject in loaded.inventory.subjects:
        mine = [e for e in events if e.user_id in (subject.name, subject.user_id)]
        found = run_effects(mine, subject)
        called = {item.tool for item in found}
        idle = [t.name for t in subject.tools if t.reach and t.name not in called]
        failed |= any(item.outside for item in found)
        subjects.append({"principal": subject.name, "exercised": found, "idle": idle})
        if not json_output:
            _print_exercised(console, run, subject.name, found, idle)
    if json_output:
        print_json(
            {
                "run_id": run,
                "outside": failed,
                "subjects": [
                    {
                        "principal": s["principal"],
                        "exercised": [_exercised_json(item) for item in s["exercised"]],
                        "reachable_not_called": s["idle"],
                    }
                    for s in subjects
                ],
            }
        )
    raise typer.Exit(1 if failed else 0)


def _exercised_json(item: ExercisedTool) -> dict[str, Any]:
    return {
        "tool": item.tool,
        "callers": list(item.callers),
        "calls": item.calls,
        "effects": list(item.effects),
        "outside": list(item.outside),
    }


def _print_exercised(
    console: Console, run: str, name: str, found: list[ExercisedTool], idle: list[str]
) -> None:
    table = Table(title=literal(f"run {run}: effects exercised by {name}"))
    for column in ("tool", "callers", "calls", "effects exercised", "outside the inventory"):
        table.add_column(column, justify="right" if column == "calls" else "left")
    for item in found:
        table.add_row(
            literal(item.tool),
            literal(", ".join(item.callers)),
            str(item.calls),
            literal("\n".join(map(visible, item.effects)), lines=True),
            literal("\n".join(map(visible, item.outside)), lines=True),
        )
    console.print(table if found else f"{name}: no call of this run ran")
    console.print(f"reachable but not called in this run: {', '.join(idle) or 'none'}")


def _unused(
    console: Console,
    since: str,
    events: list[AuditEvent],
    registry: str,
    policy: Path,
    principals: list[str] | None,
    json_output: bool,
) -> None:
    selection = Selection(
        every_principal=not principals, principals=tuple(principals or ()), roles=(), tenant=None
    )
    with usage_errors():
        loaded = load_inventory(registry, policy, selection=selection, image_digest=UNKNOWN_DIGEST)
    named = set(loaded.document.principals)
    report = []
    for subject in loaded.inventory.subjects:
        if subject.name == ANY_PRINCIPAL:
            mine = [e for e in events if e.user_id not in named]
        else:
            mine = [e for e in events if e.user_id == subject.name]
        unused = unused_effects(mine, subject)
        report.append(
            {
                "principal": subject.name,
                "unused": [{"tool": u.tool, "effect": u.effect} for u in unused],
            }
        )
        if json_output:
            continue
        table = Table(title=f"reachable by {subject.name}, never used in the last {since}")
        table.add_column("tool")
        table.add_column("unused")
        for item in unused:
            table.add_row(item.tool, item.effect or "the whole tool (never called)")
        console.print(table if unused else f"{subject.name}: every reachable effect was used")
    if json_output:
        print_json({"period": since, "subjects": report})
