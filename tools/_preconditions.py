"""Step 4 of the admission order: a tool's preconditions, the evidence it needs from calls
made earlier in the run (see :class:`~airlock.tools.Precondition`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airlock.tools._context import CallContext
from airlock.tools._errors import ConflictError
from airlock.tools._spec import Precondition

__all__ = ["check_preconditions"]


def check_preconditions(
    conditions: tuple[Precondition, ...], values: Mapping[str, Any], ctx: CallContext
) -> None:
    """Step 4: the evidence each precondition asks for, from earlier calls in the run.

    Raises:
        ConflictError: the first precondition without its evidence.
    """
    for condition in conditions:
        match = {theirs: values[ours] for ours, theirs in condition.fields.items()}
        if ctx.observations is None or not ctx.observations.has(condition.tool, match):
            fields = ", ".join(sorted(condition.fields))
            raise ConflictError(
                f"call {condition.tool!r} with the same {fields} first; "
                "this tool needs that evidence",
                requires=condition.tool,
            )
