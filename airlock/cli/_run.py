"""`airlock run` and `airlock doctor`: a program in the sandbox, and a check of the sandbox."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from airlock.cli._settings import Settings
from airlock.policies import LanguageMode, SandboxProfile
from airlock.sandbox import (
    PROBE_PROGRAM,
    DockerBackend,
    ProbeFinding,
    RunResult,
    SandboxError,
    check_engine,
    judge_probe,
)

__all__ = ["doctor", "parse_size", "run"]

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
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Run a Python program in the sandbox and print its result.

    Exits non-zero when the program failed or hit a limit.
    """
    if mode not in ("restricted", "full"):
        raise typer.BadParameter(f"--mode must be restricted or full, not {mode!r}")
    language_mode: LanguageMode = "full" if mode == "full" else "restricted"
    profile = SandboxProfile(
        language_mode=language_mode, timeout_s=timeout, memory_bytes=parse_size(memory)
    )
    settings = Settings.from_env()
    console = Console(stderr=False)

    async def go() -> RunResult:
        async with DockerBackend(image=settings.image, profile=profile) as backend:
            return await backend.run(file.read_text())

    try:
        result = asyncio.run(go())
    except SandboxError as exc:
        Console(stderr=True).print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
        raise typer.Exit(3) from None
    if json_output:
        print(result.model_dump_json(indent=2))
    else:
        _print_result(console, result)
    raise typer.Exit(0 if result.ok else 1)


def doctor() -> None:
    """Check the engine, the image, and that the profile's isolation and limits hold."""
    settings = Settings.from_env()
    console = Console()
    table = Table("check", "result", "seen", "what to do")
    findings: list[ProbeFinding] = check_engine(settings.image)
    if all(f.ok for f in findings):
        profile = SandboxProfile(language_mode="full")

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
    if not all(f.ok for f in findings):
        raise typer.Exit(1)
