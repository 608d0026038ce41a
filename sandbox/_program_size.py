"""The one check of a program before anything starts for it: its size."""

from __future__ import annotations

from airlock.sandbox._result import ProgramError, RunResult

__all__ = ["refuse_oversized"]


def refuse_oversized(program: str, *, limit: int, duration_s: float = 0.0) -> RunResult | None:
    """The ``invalid_program`` result of a ``program`` over ``limit`` bytes of UTF-8, or
    ``None`` when it fits."""
    size = len(program.encode("utf-8", errors="replace"))
    if size <= limit:
        return None
    return RunResult(
        status="invalid_program",
        exit_status=2,
        has_value=False,
        error=ProgramError(
            type="InvalidProgram",
            message=f"the program is {size} bytes; the limit is {limit}",
        ),
        duration_s=duration_s,
    )
