"""The ``execute_code`` meta-tool: its arguments, what the model is told about it, and how a
program's run becomes a model result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, assert_never

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from airlock.harness._model_tools import ModelResult, ModelTool
from airlock.harness._results import failure, success
from airlock.policies import SandboxProfile
from airlock.sandbox import MAX_PROGRAM_BYTES, LimitName, RunInput, RunResult
from airlock.tools import PROGRAM_TOOL, FieldIssue, InvalidInputError

__all__ = [
    "EXECUTE_CODE",
    "ExecuteCodeArgs",
    "artifact_notes",
    "describe_execute_code",
    "execute_code_args",
    "kept_notes",
    "program_result",
]

EXECUTE_CODE: Final = PROGRAM_TOOL
_TRACEBACK_CHARS: Final = 2_000


class ExecuteCodeArgs(BaseModel):
    """What the model fills in to run a program."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    code: Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROGRAM_BYTES)] = Field(
        description="A complete Python 3.11 program. Its last expression (or `result(value)`) "
        "is the answer and must be JSON: dicts, lists, strings, numbers, booleans, None."
    )


def execute_code_args(arguments: Mapping[str, Any]) -> ExecuteCodeArgs:
    """``execute_code``'s arguments, checked.

    Raises:
        InvalidInputError: they are not ``{code}`` (naming the fields at fault).
    """
    try:
        return ExecuteCodeArgs.model_validate(dict(arguments))
    except ValidationError as exc:
        issues = tuple(
            FieldIssue(".".join(str(p) for p in error["loc"]) or "(arguments)", error["msg"][:200])
            for error in exc.errors()[:10]
        )
        raise InvalidInputError(issues=issues) from None


def _schema() -> dict[str, Any]:
    schema = ExecuteCodeArgs.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema["additionalProperties"] = False
    schema["required"] = sorted(schema.get("properties", {}))
    return schema


def describe_execute_code(
    api: str,
    profile: SandboxProfile,
    *,
    result_bytes: int,
    stdout_bytes: int,
    calls: int,
    kept_idle_s: float | None = None,
    reaches_network: bool = False,
    inputs: Sequence[RunInput] = (),
    proposes: bool = False,
) -> ModelTool:
    """The ``execute_code`` tool as offered to a model, with ``api`` (the typed Python API
    of the read tools its principal may call from code) in its description.
    ``kept_idle_s`` says that programs keep state (a kept sandbox with that idle timeout);
    ``reaches_network`` that a tool its programs may call reaches the network
    (:attr:`~airlock.tools.ToolSpec.reaches_network`);
    ``inputs`` are the files every program of the session finds under ``/data``;
    ``proposes`` that programs may propose writes (``tools.propose``). Files (``/data``,
    ``/out``, ``/tmp``) are offered in ``full`` language mode only: a restricted program
    cannot open any."""
    # A restricted program has no open() and no file modules: files are offered (inputs in
    # /data, artifacts in /out, scratch and kept state in /tmp) only where it can use them.
    opens_files = profile.language_mode == "full"
    state = (
        "keep state from one run to the next."
        if kept_idle_s is None
        else "outlive the conversation. Top-level variables and functions stay for the next "
        f"program of this conversation, until {kept_idle_s:g} s pass without one or a program "
        'hits a limit; a result with "state_reset": true started with nothing kept. Kept are '
        "plain data (numbers, strings, lists, dicts, sets, dates...), functions defined with a "
        + (
            "plain def, imports, and files in /tmp; other objects (a DataFrame, an instance of "
            "your class) are not: write them to files in /tmp."
            if opens_files
            else "plain def, and imports; other objects (an instance of your class) are not."
        )
        + " Each program runs in a fresh process."
    )
    if profile.language_mode == "restricted":
        imports = "Imports allowed: " + ", ".join(sorted(profile.allowed_imports)) + "."
    elif profile.image == "data":
        imports = (
            "The standard library, numpy, pandas, pyarrow and matplotlib (Agg backend: save "
            "figures to files) may be imported; they are loaded already, so importing is free."
        )
    else:
        imports = "The standard library may be imported."
    listed = [
        f"/data/{i.name} ({_size(i.size_bytes)}{', a directory' if i.directory else ''})"
        for i in inputs
    ]
    files = (
        f"Files given to you, read-only: {', '.join(listed)}."
        if listed
        else "No input files are given (/data is empty)."
    )
    files_paragraph = (
        f"{files} Files a program writes under /out (at most {profile.artifact_limit_files} "
        f"files, {profile.artifact_limit_bytes // 2**20} MiB in all) are kept for the user "
        "after it ends and come back to you as references (name, size, media type, sha256, "
        "where they are), never their content: write charts, tables and reports there, and "
        "return only what the answer needs. `await` works at the top level of a program."
        if opens_files
        else "A program works on what the tools return: it cannot open files (no open(), no "
        "pathlib, no os), so it has no input files and leaves none for the user; return what "
        "the answer needs. `await` works at the top level of a program."
    )
    cannot_files = (
        "read files outside /tmp, /out and /data, or write outside /tmp and /out"
        if opens_files
        else "open any file, not even in /tmp"
    )
    scratch = (
        f", {profile.tmpfs_bytes // 2**20} MiB of scratch space in /tmp" if opens_files else ""
    )
    paragraphs = [
        "Run a Python 3.11 program in an isolated sandbox; only its final value (and at most "
        f"{stdout_bytes} bytes of stdout) comes back to you.",
        "When to use it: tasks that need many tool calls or processing of their results "
        "(bulk reads, joins, filters, counts, finding duplicates). The program calls the read "
        "tools below as `tools.NAME(...)`, and only the answer enters your context. For a "
        "single lookup, call the tool directly. "
        + (
            "Changes are never made from code, but a program may propose the ones listed "
            "under `propose` below (`tools.propose.NAME(...)`): each becomes a preview, and "
            "when the program ends they wait as one batch for a person to approve; the "
            "result says how many (`proposals`). Other changes: call the write tool directly."
            if proposes
            else "Changes are never made from code: call the write tool directly; it answers "
            "with a preview that a person or a policy approves."
        ),
        f"Limits per program: {profile.timeout_s:g} s wall clock, "
        f"{profile.memory_bytes // 2**20} MiB memory, {calls} tool calls, a result of at most "
        f"{result_bytes} bytes (a larger one is refused as result_too_large: return a "
        f"summary){scratch}.",
        files_paragraph,
        "A program cannot: reach the network or open sockets; run other programs "
        "(subprocess and exec are refused); write, change or delete anything (only the "
        f"read tools below exist); {cannot_files}; see credentials or environment "
        f"variables; {state} {imports}",
        "Errors: a refused or failed tool call raises tools.ToolError (with .code) inside the "
        "program; a program that raises or hits a limit returns an error with a code and "
        "what to do next.",
        "The tools a program can call:\n",
    ]
    description = "\n\n".join(paragraphs)
    description += "```python\n" + api.rstrip() + "\n```"
    return ModelTool(
        name=EXECUTE_CODE,
        description=description,
        input_schema=_schema(),
        # Programs only read, but a read tool with a network effect reaches the network.
        read_only=not reaches_network,
        destructive=False,
        idempotent=True,  # programs can only read
        open_world=reaches_network,
    )


_LIMIT_ADVICE: Final[dict[LimitName, str]] = {
    "timeout": "do less per program or split the work",
    "memory": "process the data in smaller pieces (read fewer columns, use chunksize)",
    "pids": "do not start processes or threads",
    "output": "print less and return a summary value instead",
    "disk": "keep less data in files in /tmp",
    "artifacts": "write fewer, smaller files to /out",
    # A batch longer than a frame takes, or a gather of more calls than may wait at once,
    # does not end a run (the sandbox splits and queues them): these are the run's totals.
    "calls": "make fewer tool calls (each batch item is one), or split the work across programs",
    "in_flight": "make fewer calls at once from threads (awaitable calls queue by themselves)",
    "bytes": "ask for fewer records or narrower fields",
}


def _size(size: int) -> str:
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB"
    if size >= 1 << 10:
        return f"{size / (1 << 10):.1f} KiB"
    return f"{size} bytes"


def artifact_notes(run: RunResult) -> dict[str, object]:
    """The references of the files a run left in /out (never their content), and what in
    /out was skipped, for a model result."""
    notes: dict[str, object] = {}
    if run.artifacts:
        notes["artifacts"] = [
            ref.model_dump(include={"name", "size_bytes", "media_type", "sha256", "uri", "path"})
            for ref in run.artifacts
        ]
    if run.artifacts_skipped:
        notes["artifacts_skipped"] = [f"{s.name}: {s.reason}" for s in run.artifacts_skipped]
        # The list names the first few; the count is all of them.
        notes["artifacts_skipped_count"] = run.artifacts_skipped_count
    return notes


def kept_notes(notes: Mapping[str, object], run: RunResult | None) -> tuple[dict[str, object], ...]:
    """What an answer too large for the model keeps of a program's result: the batch its
    proposals wait in and the files it left exist whatever its value was, and a model that
    is not told of them proposes them again, or never finds the files. Most complete
    first (for :func:`~airlock.harness._results.sized`): the proposals note and the
    artifact references as the result has them; the proposals without their preview ids
    and each file by name and URI; counts and where the files are. The profile allows up to
    10,000 files (names up to 1,031 characters) and 10,000 proposals, so only the last is
    bounded: its size does not grow with either. Empty when the program left neither.
    ``run`` is ``None`` when the host failed around the program (no files came back)."""
    artifacts = run.artifacts if run is not None else ()
    note = notes.get("proposals")
    if not isinstance(note, dict) and not artifacts:
        return ()
    full: dict[str, object] = {"proposals": note} if isinstance(note, dict) else {}
    if run is not None:
        full.update(artifact_notes(run))
    short: dict[str, object] = {}
    if isinstance(note, dict):
        short["proposals"] = {k: v for k, v in note.items() if k != "preview_ids"}
    summary = dict(short)
    if artifacts:
        short["artifacts"] = [{"name": ref.name, "uri": ref.uri} for ref in artifacts]
        first = artifacts[0]
        summary["artifacts_count"] = len(artifacts)
        summary["artifacts_uri"] = first.uri.removesuffix(first.name)
    if run is not None and run.artifacts_skipped:
        short["artifacts_skipped_count"] = summary["artifacts_skipped_count"] = (
            run.artifacts_skipped_count
        )
    return full, short, summary


def _cut(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode()
    if len(data) <= cap:
        return text, False
    return data[:cap].decode(errors="ignore"), True


def program_result(
    run: RunResult,
    *,
    stdout_bytes: int,
    notes: Mapping[str, object] | None = None,
    session_seconds: float | None = None,
) -> ModelResult:
    """The model's view of a run: the final value and capped stdout, or an error with a
    stable code and what to do next; ``notes`` are added as they are. The size cap is
    applied by the caller. ``session_seconds`` is the session's time budget when what was
    left of it, not the profile, set the program's deadline: a run stopped by that deadline
    answers the session's limit (``time``), not its own ``timeout``."""
    stdout, cut = _cut(run.stdout, stdout_bytes)
    extra: dict[str, object] = dict(notes or {})
    extra.update(artifact_notes(run))
    if stdout:
        extra["stdout"] = stdout
    if cut or run.truncated:
        # Said out loud, so a cut stdout is never mistaken for the whole output.
        extra["stdout_truncated"] = True
        extra["stdout_bytes"] = len(run.stdout.encode())
    match run.status:
        case "ok":
            return success({"value": run.value if run.has_value else None, **extra})
        case "error":
            error = run.error
            if error is None:
                return failure(
                    "program_error",
                    f"the program exited with status {run.exit_status}; fix it and run it again",
                    extra=extra,
                )
            if error.code == "result_too_large" and error.size_bytes is not None:
                # The final value itself was over the sandbox's limit (a tool's result over
                # its cap, uncaught, carries no size here): the same answer as a result over
                # the model's cap.
                sizes = {"size_bytes": error.size_bytes, "limit_bytes": error.limit_bytes}
                fields = {k: v for k, v in sizes.items() if v is not None}
                return failure("result_too_large", error.message, extra=fields | extra)
            detail: dict[str, object] = {"type": error.type}
            if error.code is not None:
                detail["tool_error"] = error.code  # e.g. unknown_tool: a tool it was not given
            if error.line is not None:
                detail["line"] = error.line
            if error.traceback:
                detail["traceback"] = error.traceback[-_TRACEBACK_CHARS:]
            return failure(
                "program_error",
                f"the program raised {error.type}: {error.message[:300]}; fix it and run it again",
                extra=detail | extra,
            )
        case "invalid_program":
            reason = run.error.message[:300] if run.error else "it was refused"
            return failure(
                "invalid_program",
                f"the program was refused before running ({reason}); change it and run it again",
                extra=extra,
            )
        case "limit_exceeded":
            said = run.error.message if run.error and run.error.message else None
            limit: str = run.limit or "unknown"
            if run.limit == "timeout" and session_seconds is not None:
                # "Do less per program" would be wrong advice: no program has time left.
                limit = "time"
                message = (
                    f"the session's time budget of {session_seconds:g} s ran out while the "
                    "program ran, and it was stopped; finish with what you have"
                )
            elif run.limit is None:
                message = (said or "the program was stopped by a limit") + "; do less per program"
            else:
                said = said or f"the program hit its {run.limit} limit"
                message = f"{said}; {_LIMIT_ADVICE[run.limit]}"
            amounts: dict[str, object] = {}
            if run.error is not None and run.error.size_bytes is not None:
                amounts = {"size_bytes": run.error.size_bytes, "limit_bytes": run.error.limit_bytes}
            return failure("limit_exceeded", message, limit=limit, extra=amounts | extra)
        case "protocol_error":
            return failure(
                "protocol_error",
                "the program broke the tool bridge protocol and was stopped; call tools only "
                "as tools.NAME(...)",
                extra=extra,
            )
        case unexpected:
            assert_never(unexpected)
