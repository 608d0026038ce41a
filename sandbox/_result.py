"""What a run returns: one result type from every backend."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from airlock.sandbox._artifacts import ArtifactRef
from airlock.tools import ErrorCode

__all__ = ["LimitName", "ProgramError", "RunResult", "RunStatus", "SkippedArtifact"]

RunStatus = Literal["ok", "error", "invalid_program", "limit_exceeded", "protocol_error"]
"""``ok``: the program finished; ``error``: it raised or exited non-zero; ``invalid_program``:
it was refused before running; ``limit_exceeded``: a limit stopped it; ``protocol_error``:
the guest broke the wire protocol and the run was ended."""

LimitName = Literal[
    "timeout", "memory", "pids", "output", "disk", "artifacts", "calls", "in_flight", "bytes"
]
"""The limit that stopped a run: container limits (``disk``: /tmp; ``artifacts``: the files
left in /out, by count or bytes), then the bridge's per-run limits."""


class ProgramError(BaseModel):
    """Why a program failed, in terms the program's author can act on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str = Field(description="Exception class name, or InvalidProgram / ProtocolError.")
    message: str = Field(description="The exception's message or the refusal's reason.")
    line: int | None = Field(default=None, description="Program line, when known.")
    traceback: str | None = Field(
        default=None, description="Traceback limited to the program's own frames."
    )
    code: ErrorCode | None = Field(
        default=None,
        description="The stable code (`unknown_tool`, `not_found`, ...) when the program did "
        "not catch a tool error, or `result_too_large` for a final value over the limit.",
    )
    size_bytes: int | None = Field(
        default=None,
        description="For a final value over the limit (`ResultTooLarge`): its size, in bytes "
        "of compact JSON.",
    )
    limit_bytes: int | None = Field(
        default=None, description="For a final value over the limit: the limit, in bytes."
    )


class SkippedArtifact(BaseModel):
    """Something in ``/out`` that is not an artifact (a link, a device file, a fifo...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Its path under /out, as artifact names are written.")
    reason: str = Field(description="Why it was skipped, e.g. 'a symbolic link'.")


class RunResult(BaseModel):
    """The outcome of one program run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: RunStatus = Field(description="How the run ended.")
    exit_status: int = Field(description="0 on success; 137 when a limit killed the program.")
    has_value: bool = Field(description="Whether the program set a final value.")
    value: JsonValue = Field(default=None, description="The program's final value (JSON).")
    stdout: str = Field(default="", description="Captured standard output, capped.")
    stderr: str = Field(default="", description="Captured standard error, capped.")
    truncated: bool = Field(default=False, description="Whether stdout or stderr was cut.")
    limit: LimitName | None = Field(default=None, description="The limit that stopped it.")
    error: ProgramError | None = Field(default=None, description="Why it failed.")
    duration_s: float = Field(description="Host wall time from request to result.")
    program_duration_s: float | None = Field(
        default=None, description="Guest wall time of the program itself."
    )
    cpu_time_s: float | None = Field(default=None, description="CPU time the program used.")
    peak_memory_bytes: int | None = Field(
        default=None,
        description="Peak memory of the container's processes during this run. In a kept or "
        "reused container under cgroup v2, where the high-water mark cannot restart, None "
        "unless this run raised it.",
    )
    started_at: float | None = Field(
        default=None, description="Wall-clock time (epoch seconds) of the first instruction."
    )
    pooled: bool = Field(default=False, description="Whether a warm pooled container ran it.")
    tool_calls: int = Field(
        default=0,
        description="Tool calls the bridge took from the program (a batch's items each; "
        "calls it cancelled before they started too, which never ran; not names it was "
        "refused inside the sandbox).",
    )
    artifacts: tuple[ArtifactRef, ...] = Field(
        default=(),
        description="The files the program left in /out, stored on the host (references).",
    )
    artifacts_skipped: tuple[SkippedArtifact, ...] = Field(
        default=(),
        description="What in /out was not a regular file (or changed before it was sent), "
        "and was not copied: the first 20, by name.",
    )
    artifacts_skipped_count: int = Field(
        default=0,
        ge=0,
        description="How many entries of /out were skipped in all, named in "
        "`artifacts_skipped` or not; never fewer than it names.",
    )

    @model_validator(mode="before")
    @classmethod
    def _count_the_named(cls, data: Any) -> Any:
        # A backend that names what it skipped without counting (a fake) still adds up.
        if isinstance(data, dict) and isinstance(data.get("artifacts_skipped"), list | tuple):
            named = len(data["artifacts_skipped"])
            count = data.get("artifacts_skipped_count", 0)
            if type(count) is int and count < named:
                data = {**data, "artifacts_skipped_count": named}
        return data

    @property
    def ok(self) -> bool:
        """True when the program finished without error."""
        return self.status == "ok"

    def reason(self) -> str:
        """One sentence, in plain words, on how the run ended."""
        match self.status:
            case "ok":
                return "the program finished"
            case "limit_exceeded":
                detail = f": {self.error.message}" if self.error and self.error.message else ""
                return f"the program was stopped by its {self.limit} limit{detail}"
            case "invalid_program":
                detail = self.error.message if self.error else "it was refused"
                return f"the program was refused before running: {detail}"
            case "protocol_error":
                return "the guest broke the bridge protocol and the run was ended"
            case "error":
                if self.error is None:
                    return f"the program exited with status {self.exit_status}"
                code = f" ({self.error.code})" if self.error.code else ""
                return f"the program raised {self.error.type}{code}: {self.error.message}"
