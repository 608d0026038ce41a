"""The ``execute_code`` meta-tool: its arguments, what the model is told about it, and how a
program's run becomes a model result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, assert_never

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from airlock.harness._model_tools import ModelResult, ModelTool
from airlock.harness._results import failure, success
from airlock.policies import SandboxProfile
from airlock.sandbox import MAX_PROGRAM_BYTES, LimitName, RunResult

__all__ = ["EXECUTE_CODE", "ExecuteCodeArgs", "describe_execute_code", "program_result"]

EXECUTE_CODE: Final = "execute_code"
_TRACEBACK_CHARS: Final = 2_000


class ExecuteCodeArgs(BaseModel):
    """What the model fills in to run a program."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    code: Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROGRAM_BYTES)] = Field(
        description="A complete Python 3.11 program. Its last expression (or `result(value)`) "
        "is the answer and must be JSON: dicts, lists, strings, numbers, booleans, None."
    )


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
) -> ModelTool:
    """The ``execute_code`` tool as offered to a model, with ``api`` (the typed Python API
    of the read tools its principal may call from code) in its description.
    ``kept_idle_s`` says that programs keep state (a kept sandbox with that idle timeout)."""
    state = (
        "keep state from one run to the next."
        if kept_idle_s is None
        else "outlive the conversation. Top-level variables and functions stay for the next "
        f"program of this conversation, until {kept_idle_s:g} s pass without one or a program "
        'hits a limit; a result with "state_reset": true started with nothing kept.'
    )
    imports = (
        "Imports allowed: " + ", ".join(sorted(profile.allowed_imports)) + "."
        if profile.language_mode == "restricted"
        else "The standard library may be imported."
    )
    paragraphs = [
        "Run a Python 3.11 program in an isolated sandbox; only its final value (and at most "
        f"{stdout_bytes} bytes of stdout) comes back to you.",
        "When to use it: tasks that need many tool calls or processing of their results "
        "(bulk reads, joins, filters, counts, finding duplicates). The program calls the read "
        "tools below as `tools.NAME(...)`, and only the answer enters your context. For a "
        "single lookup, call the tool directly. Changes are never made from code: call the "
        "write tool directly; it answers with a preview that a person or a policy approves.",
        f"Limits per program: {profile.timeout_s:g} s wall clock, "
        f"{profile.memory_bytes // 2**20} MiB memory, {calls} tool calls, a result of at most "
        f"{result_bytes} bytes (a larger one is refused as result_too_large: return a "
        f"summary), {profile.tmpfs_bytes // 2**20} MiB of scratch space in /tmp.",
        "A program cannot: reach the network or open sockets; run other programs "
        "(subprocess and exec are refused); write, change or delete anything (only the "
        "read tools below exist); read or write files outside /tmp; see credentials or "
        f"environment variables; {state} {imports}",
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
        read_only=True,
        destructive=False,
        idempotent=True,  # programs can only read
    )


_LIMIT_ADVICE: Final[dict[LimitName, str]] = {
    "timeout": "the program ran past its deadline; do less per program or split the work",
    "memory": "the program ran out of memory; process the data in smaller pieces",
    "pids": "the program started too many processes or threads; do not spawn any",
    "output": "the program printed more than its output limit; print less and return a "
    "summary value instead",
    "disk": "the program filled its scratch space in /tmp; keep less data in files",
    "calls": "the program made more tool calls than one program may; split the work across "
    "several programs",
    "in_flight": "the program had too many tool calls pending at once; await them in smaller "
    "groups",
    "bytes": "the program moved more bytes through tool calls than allowed; ask for fewer "
    "records or narrower fields",
}


def _cut(text: str, cap: int) -> tuple[str, bool]:
    data = text.encode()
    if len(data) <= cap:
        return text, False
    return data[:cap].decode(errors="ignore"), True


def program_result(
    run: RunResult, *, stdout_bytes: int, notes: Mapping[str, object] | None = None
) -> ModelResult:
    """The model's view of a run: the final value and capped stdout, or an error with a
    stable code and what to do next; ``notes`` are added as they are. The size cap is
    applied by the caller."""
    stdout, cut = _cut(run.stdout, stdout_bytes)
    extra: dict[str, object] = dict(notes or {})
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
            advice = (
                _LIMIT_ADVICE[run.limit]
                if run.limit is not None
                else "the program was stopped by a limit; do less per program"
            )
            return failure("limit_exceeded", advice, limit=run.limit or "unknown", extra=extra)
        case "protocol_error":
            return failure(
                "protocol_error",
                "the program broke the tool bridge protocol and was stopped; call tools only "
                "as tools.NAME(...)",
            )
        case unexpected:
            assert_never(unexpected)
