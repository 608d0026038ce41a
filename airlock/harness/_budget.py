"""A run's budget: how long a session may run, how many calls it may make, and how many
bytes of results may enter the model's context."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Budget", "BudgetMeter"]

ClockStart = Literal["session", "first_call"]
"""When a session's time budget starts: when the session is built, or at its first call."""


class Budget(BaseModel):
    """The limits of one session (one model conversation), set by the application."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seconds: float = Field(
        default=600.0, gt=0, le=86_400, description="Wall-clock time the session may run."
    )
    calls: int = Field(
        default=200, ge=1, le=100_000, description="Model tool calls the session may make."
    )
    bytes: int = Field(
        default=2_000_000,
        ge=1024,
        description="Bytes of results the session may return into the model's context.",
    )
    result_bytes: int = Field(
        default=32_000,
        ge=256,
        description="Largest single result; a larger one is refused as result_too_large.",
    )
    stdout_bytes: int = Field(
        default=4_000,
        ge=0,
        description="Most of a program's stdout returned to the model; the rest is cut "
        "and the result says so.",
    )
    program_calls: int = Field(
        default=10_000, ge=1, description="Tool calls one program may make through the bridge."
    )
    starts: ClockStart = Field(
        default="session",
        description="When the time budget starts: when the session is built (an application "
        "builds it as its conversation begins), or at its first call (a server that builds "
        "it before its client speaks, and may then wait long for it: ``airlock serve``).",
    )
    programs_at_once: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Programs (containers) of the session that run at the same time, "
        "however many execute_code calls the model makes in one turn: each may use the "
        "profile's whole memory and CPU. A further call waits for a turn (its program's own "
        "deadline starts when it starts), at most until the session's time is up; one that "
        "gets no turn by then does not run and answers limit_exceeded (limit "
        "'programs_at_once').",
    )


@dataclass
class BudgetMeter:
    """What a session has used of its budget. Single event loop: no awaits between a check
    and its update (:meth:`reserve` is both), so concurrent calls cannot both take the last
    unit."""

    budget: Budget
    started: float | None = None
    """When the time budget started, on the :func:`time.monotonic` clock (None: not yet)."""
    calls: int = 0
    bytes: int = 0

    def __post_init__(self) -> None:
        if self.budget.starts == "session":
            self.start()

    def start(self) -> None:
        """Start the time budget now, unless it has started already."""
        if self.started is None:
            self.started = time.monotonic()

    @property
    def deadline(self) -> float:
        """When the time is up, on the :func:`time.monotonic` clock; before the meter has
        started, the deadline of a call made now (the whole budget ahead of it)."""
        started = time.monotonic() if self.started is None else self.started
        return started + self.budget.seconds

    def remaining(self) -> float:
        """Seconds left (negative when the time is up)."""
        return self.deadline - time.monotonic()

    def exhausted(self) -> str | None:
        """The name of a limit already used up (``time``, ``calls``, ``bytes``), or None."""
        if self.remaining() <= 0:
            return "time"
        if self.calls >= self.budget.calls:
            return "calls"
        if self.bytes >= self.budget.bytes:
            return "bytes"
        return None

    def reserve(self) -> str | None:
        """Count one call, or name the limit already used up (see :meth:`exhausted`) and
        count nothing. The check and the count are one step: a caller that awaits anything
        between them lets concurrent calls all pass the check. The first call starts a time
        budget that starts at the first call."""
        self.start()
        used_up = self.exhausted()
        if used_up is None:
            self.calls += 1
        return used_up

    def used_up_message(self, limit: str) -> str:
        """What :meth:`exhausted` found used up, with the budget and the amount used."""
        budget = self.budget
        if limit == "time":
            spent = budget.seconds - self.remaining()
            used = f"time budget of {budget.seconds:g} s is used up ({spent:.1f} s have passed)"
        elif limit == "calls":
            used = f"budget of {budget.calls} tool calls is used up ({self.calls} made)"
        else:
            used = (
                f"budget of {budget.bytes} bytes of results is used up ({self.bytes} bytes "
                "returned)"
            )
        return f"the session's {used}; finish with what you have"

    def too_little_left_message(self, size: int) -> str:
        """Why a result of ``size`` bytes is refused when what is left of the byte budget,
        not the per-result cap, cannot hold it."""
        left = max(0, self.budget.bytes - self.bytes)
        return (
            f"the session's budget of {self.budget.bytes} bytes of results has {left} bytes "
            f"left, too few for this result of {size} bytes; finish with what you have, or "
            "ask for much less"
        )

    def result_cap(self) -> int:
        """Largest result that may be returned now: the per-result cap or what is left."""
        return max(0, min(self.budget.result_bytes, self.budget.bytes - self.bytes))
