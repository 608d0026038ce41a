"""`airlock run` and `airlock doctor`: a program in the sandbox, and a check of the sandbox."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, get_args

import typer
from rich.console import Console
from rich.table import Table

from airlock.cli._settings import Settings
from airlock.harness import EXECUTE_CODE
from airlock.policies import ContainerRuntime, LanguageMode, Principal, SandboxProfile
from airlock.sandbox import (
    PROBE_PROGRAM,
    DockerBackend,
    ProbeFinding,
    RunResult,
    SandboxError,
    check_engine,
    describe_guest_filter,
    judge_probe,
)
from airlock.tools import AuditLog, Caller, SQLiteAuditStore, audit_event

__all__ = ["doctor", "parse_size", "run"]

_RUNTIMES: tuple[ContainerRuntime, ...] = get_args(ContainerRuntime)
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """Parse ``512m``, ``1g``, ``65536`` into bytes.

    Raises:
        typer.BadParameter: the text is not a size.
    """
    match = _SIZE.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a size; write for example 256m or 1g")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _print_result(console: Console, result: RunResult) -> None:
    if result.stdout:
        console.print(result.stdout, end="", markup=False, highlight=False)
    if result.stderr:
        console.print(result.stderr, end="", markup=False, highlight=False, style="red")
    if result.truncated:
        console.print("[yellow](output truncated at the limit)[/]")
    if result.has_value:
        console.print_json(json.dumps(result.value))
    style = "green" if result.ok else "red"
    console.print(
        f"[{style}]{result.reason()}[/] in {result.duration_s * 1000:.1f} ms"
        + (f", cpu {result.cpu_time_s * 1000:.1f} ms" if result.cpu_time_s is not None else "")
        + (
            f", peak memory {result.peak_memory_bytes / 2**20:.1f} MiB"
            if result.peak_memory_bytes
            else ""
        )
    )
    if result.error and result.error.traceback:
        console.print(result.error.traceback, markup=False, highlight=False, style="dim")


def run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Program to run.")],
    timeout: Annotated[float, typer.Option(help="Wall-clock deadline in seconds.")] = 10.0,
    memory: Annotated[str, typer.Option(help="Memory limit, e.g. 256m.")] = "256m",
    mode: Annotated[str, typer.Option(help="restricted or full.")] = "restricted",
    runtime: Annotated[str, typer.Option(help="runc, or runsc (gVisor).")] = "runc",
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Run a Python program in the sandbox and print its result.

    Exits non-zero when the program failed or hit a limit.
    """
    if mode not in ("restricted", "full"):
        raise typer.BadParameter(f"--mode must be restricted or full, not {mode!r}")
    language_mode: LanguageMode = "full" if mode == "full" else "restricted"
    profile = SandboxProfile(
        language_mode=language_mode,
        timeout_s=timeout,
        memory_bytes=parse_size(memory),
        runtime=_runtime(runtime),
    )
    settings = Settings.from_env()
    console = Console(stderr=False)
    program = file.read_text()

    async def go() -> RunResult:
        async with DockerBackend(image=settings.image, profile=profile) as backend:
            return await backend.run(program)

    began = time.perf_counter()
    try:
        result = asyncio.run(go())
    except SandboxError as exc:
        Console(stderr=True).print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
        raise typer.Exit(3) from None
    _audit_run(settings, program, result, time.perf_counter() - began)
    if json_output:
        print(result.model_dump_json(indent=2))
    else:
        _print_result(console, result)
    raise typer.Exit(0 if result.ok else 1)


@dataclass(frozen=True, slots=True)
class _Operator:
    """Whose run ``airlock run`` records: the operating-system user, in tenant ``local``."""

    principal: Principal
    run_id: str
    call_id: str
    caller: Caller = "direct"


def _audit_run(settings: Settings, program: str, result: RunResult, seconds: float) -> None:
    """Record the program (its text by hash) and how it ended in ``audit.db`` in
    ``AIRLOCK_HOME``, as any program a session runs is."""
    run_id = "run_" + uuid.uuid4().hex
    who = _Operator(Principal(user_id=_os_user(), tenant_id="local"), run_id, run_id)
    with AuditLog(SQLiteAuditStore(settings.audit_db)) as log:
        log.record(
            audit_event(
                who,
                EXECUTE_CODE,
                stage="done",
                decision="allow",
                rule="airlock run",
                outcome="ok" if result.ok else "error",
                code=None if result.ok else result.status,
                args_hash=log.record_program(program),
                detail=f"program {result.status} (airlock run)",
                duration_s=seconds,
            )
        )


def _os_user() -> str:
    try:
        name = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (a bare container)
        name = ""
    name = re.sub(r"[^A-Za-z0-9_.@:-]", "_", name)[:128].lstrip("_.@:-")
    return name or f"uid-{os.getuid()}"


def _runtime(text: str) -> ContainerRuntime:
    for runtime in _RUNTIMES:
        if text == runtime:
            return runtime
    raise typer.BadParameter(f"--runtime must be one of {', '.join(_RUNTIMES)}, not {text!r}")


def _print_guest_filter(console: Console) -> None:
    # The second seccomp layer, as the runner loads it: the rules, then the exact filter.
    for mode in ("restricted", "full"):
        layer = describe_guest_filter(mode)
        console.print(f"\n[bold]second seccomp layer, {mode} mode[/] (loaded before the program)")
        for rule in layer.rules:
            console.print(f"  {rule.syscall}: {rule.errno} {rule.when} ({rule.why})", markup=False)
        if layer.pfc is None:
            console.print("  (no libseccomp on this host: the PFC text cannot be rendered)")
        else:
            console.print(layer.pfc.rstrip(), markup=False, highlight=False)


def doctor(
    runtime: Annotated[str, typer.Option(help="runc, or runsc (gVisor).")] = "runc",
) -> None:
    """Check the engine, the image, and that the profile's isolation and limits hold; then
    print the second seccomp layer the runner loads, as libseccomp's PFC text."""
    settings = Settings.from_env()
    console = Console()
    table = Table("check", "result", "seen", "what to do")
    chosen = _runtime(runtime)
    findings: list[ProbeFinding] = check_engine(settings.image, runtime=chosen)
    if all(f.ok for f in findings):
        profile = SandboxProfile(language_mode="full", runtime=chosen)

        async def probe() -> RunResult:
            async with DockerBackend(image=settings.image, profile=profile) as backend:
                return await backend.run(PROBE_PROGRAM)

        findings.extend(judge_probe(asyncio.run(probe()), profile))
    for finding in findings:
        table.add_row(
            finding.check,
            "[green]ok[/]" if finding.ok else "[red]FAIL[/]",
            finding.seen,
            "" if finding.ok else finding.fix,
        )
    console.print(table)
    _print_guest_filter(console)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)
