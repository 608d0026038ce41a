"""`airlock run` and `airlock doctor`: a program in the sandbox, and a check of the sandbox.

``airlock run`` gives a program inputs (``--input PATH``, mounted read-only at
``/data/NAME``), stores the files it leaves in ``/out`` under ``$AIRLOCK_HOME/artifacts/RUN``
and copies them to ``--out DIR``; ``--image data`` runs it in the data image.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from airlock.cli._copy_out import (
    CopyOutcome,
    copy_artifacts,
    copy_out,
    print_artifacts,
    print_refused,
)
from airlock.cli._inventory import usage_errors
from airlock.cli._literal import json_text, literal
from airlock.cli._settings import Settings
from airlock.harness import EXECUTE_CODE, database_url, open_audit_store
from airlock.policies import ContainerRuntime, Principal, SandboxProfile, UsageError
from airlock.sandbox import (
    DATA_PACKAGES,
    PACKAGES_LABEL,
    PROBE_PROGRAM,
    DockerBackend,
    InputRefused,
    ProbeFinding,
    RunResult,
    SandboxError,
    check_engine,
    describe_guest_filter,
    input_effect,
    judge_probe,
    packages_text,
    read_image_labels,
)
from airlock.tools import AuditLog, AuditStore, Caller, SQLiteAuditStore, audit_event

__all__ = [
    "RestrictedDataImage",
    "copy_artifacts",
    "doctor",
    "parse_size",
    "profile_options",
    "run",
]

_RUNTIMES: tuple[ContainerRuntime, ...] = get_args(ContainerRuntime)
_IMAGES: tuple[str, ...] = get_args(SandboxProfile.model_fields["image"].annotation)
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
        console.print(json_text(result.value), soft_wrap=True)
    style = "green" if result.ok else "red"
    # The reason quotes the program's own error message: printed literally.
    console.print(
        literal(result.reason(), style),
        f" in {result.duration_s * 1000:.1f} ms"
        + (f", cpu {result.cpu_time_s * 1000:.1f} ms" if result.cpu_time_s is not None else "")
        + (
            f", peak memory {result.peak_memory_bytes / 2**20:.1f} MiB"
            if result.peak_memory_bytes
            else ""
        ),
        sep="",
    )
    if result.error and result.error.traceback:
        console.print(literal(result.error.traceback, "dim", lines=True), highlight=False)


class RestrictedDataImage(UsageError):
    """The data image chosen with restricted programs: it runs full mode only."""

    def __init__(self) -> None:
        super().__init__(
            "the data image runs programs in full mode only: pass --mode full "
            '(language_mode = "full" in a policy)'
        )


def profile_options(
    base: SandboxProfile | None = None,
    *,
    image: str | None = None,
    timeout: float | None = None,
    memory: str | None = None,
    mode: str | None = None,
    runtime: str | None = None,
) -> SandboxProfile:
    """``base`` (the hardened defaults when None) with the options a command line gave; what
    it leaves out keeps its default (the data image's are full mode and 1 GiB).

    Raises:
        typer.BadParameter: an option's value is not one the profile takes.
        RestrictedDataImage: the data image with restricted programs (named either way).
    """
    values: dict[str, Any] = base.model_dump(exclude_unset=True) if base is not None else {}
    if image is not None:
        if image not in _IMAGES:
            raise typer.BadParameter(f"--image must be one of {', '.join(_IMAGES)}, not {image!r}")
        values["image"] = image
    if timeout is not None:
        values["timeout_s"] = timeout
    if memory is not None:
        values["memory_bytes"] = parse_size(memory)
    if mode is not None:
        if mode not in ("restricted", "full"):
            raise typer.BadParameter(f"--mode must be restricted or full, not {mode!r}")
        values["language_mode"] = mode
    if runtime is not None:
        values["runtime"] = _runtime(runtime)
    if values.get("image") == "data" and values.get("language_mode") == "restricted":
        raise RestrictedDataImage()  # said in one line, not as the profile's validation error
    try:
        return SandboxProfile.model_validate(values)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _named_inputs(paths: Sequence[Path]) -> dict[str, Path]:
    """``--input PATH`` options as inputs named by their file names."""
    named: dict[str, Path] = {}
    for path in paths:
        name = path.name
        if name in named:
            raise typer.BadParameter(
                f"two inputs are named {name!r} ({named[name]} and {path}); inputs are "
                "mounted by file name at /data/NAME: rename one"
            )
        named[name] = path
    return named


def run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Program to run.")],
    timeout: Annotated[float, typer.Option(help="Wall-clock deadline in seconds.")] = 10.0,
    memory: Annotated[
        str | None, typer.Option(help="Memory limit, e.g. 256m (default: 256m; data image 1g).")
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(help="restricted or full (default: restricted; the data image: full)."),
    ] = None,
    runtime: Annotated[str, typer.Option(help="runc, crun, or runsc (gVisor).")] = "runc",
    image: Annotated[
        str, typer.Option(help="base, or data (numpy, pandas, pyarrow, matplotlib).")
    ] = "base",
    inputs: Annotated[
        list[Path] | None,
        typer.Option(
            "--input",
            help="A file or directory the program reads at /data/NAME (read-only); repeat it.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Copy the files the program leaves in /out to this directory; a link in it "
            "is never followed, and a file already there is kept."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="With --out: replace a regular file that is already there.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Run a Python program in the sandbox and print its result, and the files it left in
    /out (stored under $AIRLOCK_HOME/artifacts/RUN; --out copies them).

    Exits 1 when the program failed or hit a limit, or a file was not copied to --out (each
    is named), 2 when an input is refused, 3 when the sandbox is unavailable.
    """
    with usage_errors():
        profile = profile_options(
            image=image, timeout=timeout, memory=memory, mode=mode, runtime=runtime
        )
    given = _named_inputs(inputs or [])
    settings = Settings.from_env()
    console = Console(stderr=False)
    program = file.read_text()
    run_id = "run_" + uuid.uuid4().hex

    async def go() -> RunResult:
        async with DockerBackend(
            image=settings.image, data_image=settings.data_image, profile=profile
        ) as backend:
            return await backend.run(program, inputs=given, artifacts=settings.artifacts / run_id)

    # Opened before the run: a program whose record cannot be kept does not run.
    url = database_url()  # AIRLOCK_DATABASE_URL: the audit log every harness process shares
    audit: AuditStore = (
        SQLiteAuditStore(settings.audit_db, busy_timeout=settings.busy_timeout)
        if url is None
        else open_audit_store(url, busy_timeout=settings.busy_timeout)
    )
    began = time.perf_counter()
    try:
        result = asyncio.run(go())
    except InputRefused as exc:
        audit.close()
        Console(stderr=True).print(f"[red]input refused ({exc.reason}):[/] {exc.message}")
        raise typer.Exit(2) from None
    except SandboxError as exc:
        audit.close()
        Console(stderr=True).print(f"[red]sandbox unavailable ({exc.code}):[/] {exc}")
        raise typer.Exit(3) from None
    except BaseException:
        audit.close()
        raise
    _audit_run(audit, program, result, time.perf_counter() - began, run_id, sorted(given))
    copied: CopyOutcome | None = None
    if out is not None and result.artifacts:
        try:
            copied = copy_out(result.artifacts, out, overwrite=overwrite)
        except (UsageError, OSError) as exc:
            Console(stderr=True).print(literal(f"could not copy the artifacts: {exc}", "red"))
            raise typer.Exit(1) from None
    if json_output:
        print(result.model_dump_json(indent=2))
    else:
        _print_result(console, result)
        print_artifacts(console, result.artifacts, copied)
        # The guest names what it skipped, and a program can forge its 'done' frame.
        for skipped in result.artifacts_skipped:
            line = literal(f"{skipped.name}: {skipped.reason}")
            console.print(Text("not copied from /out: ", "yellow") + line, soft_wrap=True)
        console.print(f"[dim]run {run_id}[/]", highlight=False)
    if copied is not None and copied.refused:
        print_refused(Console(stderr=True), copied)
        raise typer.Exit(1)
    raise typer.Exit(0 if result.ok else 1)


@dataclass(frozen=True, slots=True)
class _Operator:
    """Whose run ``airlock run`` records: the operating-system user, in tenant ``local``."""

    principal: Principal
    run_id: str
    call_id: str
    caller: Caller = "direct"


def _audit_run(
    store: AuditStore,
    program: str,
    result: RunResult,
    seconds: float,
    run_id: str,
    inputs: Sequence[str] = (),
) -> None:
    """Record the program (its text by hash), the inputs it read and how it ended in
    ``store`` (``audit.db`` in ``AIRLOCK_HOME``), as any program a session runs is; the store
    is closed afterwards."""
    who = _Operator(Principal(user_id=_os_user(), tenant_id="local"), run_id, run_id)
    with AuditLog(store) as log:
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
                effects=[input_effect(name) for name in inputs],
                detail=f"program {result.status} (airlock run)"
                + (f", {len(result.artifacts)} artifacts" if result.artifacts else ""),
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


def _image_packages(image: str) -> ProbeFinding:
    """Whether the data image holds the packages this airlock expects, at their versions."""
    found = read_image_labels(image).get(PACKAGES_LABEL, "")
    expected = packages_text(DATA_PACKAGES)
    return ProbeFinding(
        "data image packages",
        found == expected,
        found or "no package list on the image",
        "rebuild the data image with `make image-data`",
    )


def doctor(
    runtime: Annotated[str, typer.Option(help="runc, crun, or runsc (gVisor).")] = "runc",
    image: Annotated[
        str, typer.Option(help="base, or data (numpy, pandas, pyarrow, matplotlib).")
    ] = "base",
) -> None:
    """Check the engine, the image, and that the profile's isolation and limits hold; then
    print the second seccomp layer the runner loads, as libseccomp's PFC text (and, for the
    data image, its packages and their versions)."""
    settings = Settings.from_env()
    console = Console()
    table = Table("check", "result", "seen", "what to do")
    chosen = _runtime(runtime)
    profile = profile_options(image=image, mode="full", runtime=chosen)
    data = profile.image == "data"
    name = settings.data_image if data else settings.image
    findings: list[ProbeFinding] = check_engine(
        name, runtime=chosen, build="make image-data" if data else "make image"
    )
    if all(f.ok for f in findings):
        if data:
            findings.append(_image_packages(name))

        async def probe() -> RunResult:
            async with DockerBackend(
                image=settings.image, data_image=settings.data_image, profile=profile
            ) as backend:
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
    if data:
        console.print("\n[bold]data image packages[/] (airlock.sandbox.DATA_PACKAGES)")
        for package, version in sorted(DATA_PACKAGES.items()):
            console.print(f"  {package} {version}", markup=False)
    _print_guest_filter(console)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)
