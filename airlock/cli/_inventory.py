"""``airlock inventory`` and ``airlock program-effects``: what an agent can reach.

Exit codes of ``inventory``: 0 done (and, with ``--check``, the reachable set did not grow);
1 the reachable set grew (``--check``); 2 a usage error (bad ``--registry``, policy file,
lock file, ...), printed with its stable code.

Exit codes of ``program-effects``: 0 complete (every tool the program can call is listed);
1 resolved, but it names a tool the principal cannot call from code; 2 a usage error;
3 unresolved (a route the analysis cannot follow: it may reach every tool callable from code).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.console import Console
from rich.table import Table

from airlock.cli._settings import Settings
from airlock.frontends import ANTHROPIC_URL
from airlock.harness import database_url
from airlock.inventory import (
    Format,
    HarnessConnection,
    Inventory,
    PolicyDocument,
    ProgramEffects,
    Selection,
    ToolCatalog,
    build_inventory,
    check_program,
    compare_locks,
    harness_connections,
    load_policy_document,
    load_registry,
    lock_from_inventory,
    read_lock,
    render,
    render_changes,
    sandbox_effects,
    write_lock,
)
from airlock.policies import AirlockError, UsageError
from airlock.sandbox import read_image_digest

__all__ = [
    "APPROVALS_HOST",
    "APPROVALS_PORT",
    "MCP_HOST",
    "MODEL_KEY",
    "harness",
    "inventory",
    "load_inventory",
    "program_effects",
    "usage_errors",
]

_FORMATS: Final = ("table", "json", "markdown")
MODEL_KEY: Final = "ANTHROPIC_API_KEY"
"""The environment variable ``airlock chat`` reads the live model's key from."""
MCP_HOST: Final = "127.0.0.1"
"""Where ``airlock serve --mcp --http`` listens (``airlock.frontends.mcp.LOOPBACK``; that
module needs the ``mcp`` extra, so the inventory names it here and a test keeps them equal)."""
APPROVALS_HOST: Final = "127.0.0.1"
APPROVALS_PORT: Final = 8470
"""Where ``airlock approvals serve`` listens by default (``--port``; its module needs the
``web`` extra, so the inventory names them here and a test keeps them equal)."""
# Read as airlock.harness's OTLP export and the exporter read them: the traces variable
# first, else the base endpoint with the traces path (a test keeps them in step).
_SPANS_AT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_SPANS_BASE: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
_SPANS_HEADERS: Final = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
_EXIT_PROGRAM: Final = {"complete": 0, "unknown_tools": 1, "unresolved": 3}

RegistryOption = Annotated[
    str, typer.Option("--registry", help="The tool registry, as MODULE:OBJECT.", show_default=False)
]
PolicyOption = Annotated[
    Path,
    typer.Option("--policy", help="The policy file (TOML).", dir_okay=False, show_default=False),
]
TenantOption = Annotated[
    str | None,
    typer.Option(help="Tenant to evaluate principals in (default: the one the policy names)."),
]


@contextmanager
def usage_errors() -> Iterator[None]:
    """Print an :class:`AirlockError` as ``error (code): message`` and exit with status 2."""
    try:
        yield
    except AirlockError as exc:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"error ({exc.code}): {exc}", markup=False
        )
        raise typer.Exit(2) from None


@dataclass(frozen=True, slots=True)
class Loaded:
    """An inventory and what it was built from."""

    inventory: Inventory
    catalog: ToolCatalog
    document: PolicyDocument


def load_inventory(
    registry: str,
    policy: Path,
    *,
    selection: Selection,
    image_digest: str | None = None,
) -> Loaded:
    """Import the registry, read the policy and build the inventory of ``selection``.

    Raises:
        RegistryRefError, PolicyFileError, UnknownSubjectError, UnsafeRegistryError: see
            their docstrings.
        UsageError: ``AIRLOCK_DATABASE_URL`` is not a database URL.
    """
    catalog = load_registry(registry)
    document = load_policy_document(policy)
    subjects = document.select(
        principals=selection.principals,
        roles=selection.roles,
        every_principal=selection.every_principal,
        tenant=selection.tenant,
    )
    settings = Settings.from_env()
    profile = document.policy.sandbox
    image = settings.data_image if profile.image == "data" else settings.image
    digest = image_digest if image_digest is not None else read_image_digest(image)
    built = build_inventory(
        catalog,
        subjects,
        # The profile serve and chat run programs under: the policy file's [sandbox] table.
        sandbox=sandbox_effects(profile, image=image, image_digest=digest),
        registry=registry,
        policy=str(policy),
        harness=harness(settings),
    )
    return Loaded(built, catalog, document)


def harness(settings: Settings) -> tuple[HarnessConnection, ...]:
    """The connections airlock's own commands make under ``settings`` and this environment.

    Raises:
        UsageError: ``AIRLOCK_DATABASE_URL`` is not a database URL.
    """
    spans, variable, headers = _audit_spans(os.environ)
    return harness_connections(
        home=settings.home,
        model_endpoint=ANTHROPIC_URL,
        model_credential=MODEL_KEY,
        mcp_host=MCP_HOST,
        docker_host=os.environ.get("DOCKER_HOST") or None,
        database=database_url(),  # the stores every harness opens (AIRLOCK_DATABASE_URL)
        spans_endpoint=spans,
        spans_credential=headers,
        spans_variable=variable,
        approval_page=(APPROVALS_HOST, APPROVALS_PORT),
        # libpq's PG* variables move the stores; the proxy variables route the model client,
        # the OTLP exporter and a TCP engine's client, which all read them.
        environ=os.environ,
    )


def _audit_spans(environ: Mapping[str, str]) -> tuple[str | None, str, str | None]:
    """Where a harness's audit log exports spans over OTLP under ``environ`` (None: it
    exports none), the variable that names it, and the variable whose headers go with them."""
    base = environ.get(_SPANS_BASE)
    endpoint = environ.get(_SPANS_AT) or (base and f"{base.removesuffix('/')}/v1/traces")
    variable = _SPANS_AT if environ.get(_SPANS_AT) else _SPANS_BASE
    headers = next((name for name in _SPANS_HEADERS if environ.get(name)), None)
    return endpoint or None, variable, headers if endpoint else None


def _format(value: str) -> Format:
    for known in _FORMATS:
        if value == known:
            return known
    raise UsageError(f"--format {value!r} is not one of {', '.join(_FORMATS)}")


def inventory(
    registry: RegistryOption,
    policy: PolicyOption,
    principal: Annotated[
        list[str] | None,
        typer.Option(help="A principal's user id ('*': anyone not named); repeatable."),
    ] = None,
    role: Annotated[
        list[str] | None, typer.Option(help="A role of the policy; repeatable.")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every principal the policy names (the default).")
    ] = False,
    tenant: TenantOption = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="table (the default), json or markdown; the listing only, not with --lock "
            "or --check.",
            show_default=False,
        ),
    ] = None,
    lock: Annotated[
        Path | None, typer.Option(help="Write the reachable set to this lock file.")
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option(help="Compare with this lock file; exit 1 when the reachable set grew."),
    ] = None,
) -> None:
    """List every tool a principal can reach, with its effects, destinations, credential
    names, preconditions and approval rule, the sandbox's own effects under the policy's
    [sandbox] profile, the harness's own connections, and the composed reachable set."""
    with usage_errors():
        chosen = _format(fmt if fmt is not None else "table")
        if every and principal:
            raise UsageError("give --principal or --all, not both")
        if lock is not None and check is not None:
            raise UsageError("give --lock or --check, not both")
        if fmt is not None and (lock is not None or check is not None):
            # --lock writes the lock file's one format and --check prints its changes.
            option = "--lock" if lock is not None else "--check"
            raise UsageError(f"give --format or {option}, not both")
        selection = Selection(
            every_principal=every,
            principals=tuple(principal or ()),
            roles=tuple(role or ()),
            tenant=tenant,
        )
        if check is not None:
            old = read_lock(check)
            if not (every or principal or role or tenant is not None):
                selection = old.selection.as_meant()
            loaded = load_inventory(registry, policy, selection=selection)
            changes = compare_locks(old, lock_from_inventory(loaded.inventory, selection))
            typer.echo(render_changes(changes), nl=False)
            raise typer.Exit(1 if any(c.direction == "growth" for c in changes) else 0)
        loaded = load_inventory(registry, policy, selection=selection)
        if lock is not None:
            write_lock(lock_from_inventory(loaded.inventory, selection), lock)
            count = len(loaded.inventory.subjects)
            typer.echo(f"wrote the reachable set of {count} subject(s) to {lock}")
            return
        typer.echo(render(loaded.inventory, chosen), nl=False)


def program_effects(
    program: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="The program to check.")
    ],
    registry: RegistryOption,
    policy: PolicyOption,
    principal: Annotated[
        str, typer.Option(help="The principal the program would run for ('*': anyone).")
    ] = "*",
    tenant: TenantOption = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
) -> None:
    """Before a program runs: the tools it can call and their effects, from its source.

    Exits 0 when complete, 1 when it names a tool the principal cannot call from code, and
    3 when it is unresolved: a route the analysis cannot follow (a computed name, dynamic
    code, frames, ...) means it may reach every tool callable from code.
    """
    with usage_errors():
        chosen = _format(fmt)
        catalog = load_registry(registry)
        document = load_policy_document(policy)
        subject = document.principal(principal, tenant=tenant)
        try:
            source = program.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the program {str(program)!r}: {exc}") from exc
        report = check_program(source, catalog, subject.principal)
    if chosen == "json":
        summary = {"complete": report.complete, "verdict": report.verdict}
        typer.echo(json.dumps({**report.model_dump(mode="json"), **summary}))
    else:
        typer.echo(_program_table(report), nl=False)
    raise typer.Exit(_EXIT_PROGRAM[report.verdict])


def _program_table(report: ProgramEffects) -> str:
    console = Console(width=160, color_system=None, highlight=False)
    with console.capture() as captured:
        table = Table("line", "tool", "form", "via")
        for use in report.uses:
            table.add_row(str(use.line), use.tool, use.form, use.via or "")
        console.print(table if report.uses else "no tool calls found")
        console.print(f"tools: {', '.join(report.tools) or 'none'}", markup=False)
        console.print(f"effects: {', '.join(report.effects) or 'none'}", markup=False)
        if report.proposals:
            console.print(
                f"proposes (each approved before it is made): {', '.join(report.proposals)}",
                markup=False,
            )
        for unknown in report.unknown:
            console.print(
                f"unknown tool {unknown.name!r} at line {unknown.line}: {unknown.reason}",
                markup=False,
            )
        for item in report.unresolved:
            console.print(
                f"unresolved at line {item.line}: {item.reason}: {item.source}", markup=False
            )
        if report.unresolved:
            console.print(
                f"the program may reach every effect callable from code: "
                f"{', '.join(report.may_reach) or 'none'}",
                markup=False,
            )
        console.print(f"verdict: {report.verdict}", markup=False)
    return captured.get()
