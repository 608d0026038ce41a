"""Step 5 of the admission order: run a tool's handler with limits, under the runtime check
of what the tool declares (:mod:`airlock.tools._egress`).

The deadline is min(tool timeout, time left in the run). The handler runs as the current
call of its context: an async one in the calling task, a sync one in a worker thread that
anyio gives a copy of that context. What the handler reached that the tool does not declare
decides the answer (``denied``), whatever the handler then did with the refusal.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from airlock.tools._context import CallContext
from airlock.tools._egress import CallCheck
from airlock.tools._egress import enter as enter_call
from airlock.tools._egress import leave as leave_call
from airlock.tools._errors import NotFoundError, ToolError, ToolTimeoutError, UpstreamError
from airlock.tools._registration import CompiledTool

if TYPE_CHECKING:
    from airlock.tools._admission import CallTrail

__all__ = ["execute"]

_log = logging.getLogger("airlock.tools")


async def execute(
    tool: CompiledTool,
    values: Mapping[str, Any],
    ctx: CallContext,
    *,
    trail: CallTrail | None = None,
) -> Any:
    """Step 5: run the handler with limits, under the runtime check of what the tool
    declares (:mod:`airlock.tools._egress`); ``trail``, if given, is marked with what the
    check refused.

    Raises:
        ToolError: ``timeout``; ``denied`` when the handler reached what the tool does not
            declare (even if it caught the refusal); the handler's own error;
            ``upstream`` with outcome ``unknown`` for anything else.
    """
    spec = tool.spec
    budget = min(spec.timeout, ctx.remaining())
    if budget <= 0:
        raise ToolTimeoutError(
            "the run's time budget is used up; finish with what you have",
            seconds=0.0,
            outcome="error",
        )
    call = (
        functools.partial(spec.handler, ctx, **values)
        if spec.takes_context
        else functools.partial(spec.handler, **values)
    )
    check = tool.reach.check(phase="handler", tenant=ctx.principal.tenant_id, values=values)
    token = enter_call(check)  # a sync handler's worker thread runs in a copy of it
    try:
        with anyio.move_on_after(budget) as scope:
            # Whether the handler is async was decided at registration (see invoke()).
            if tool.is_async:
                result = await call()
            else:
                result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    except NotFoundError as exc:
        _refuse_undeclared(check, trail, exc)
        # One canonical answer, so another tenant's record reads exactly like a missing one.
        raise NotFoundError(detail=exc.detail or exc.message) from None
    except ToolError as exc:
        _refuse_undeclared(check, trail, exc)
        raise
    except Exception as exc:
        _refuse_undeclared(check, trail, exc)
        _log.warning("tool %s raised %s", spec.name, type(exc).__name__, exc_info=exc)
        raise UpstreamError(
            "the tool failed and may have acted; do not assume it did or did not",
            outcome="unknown",
            detail=f"{type(exc).__name__}: {exc}"[:500],
        ) from exc
    finally:
        leave_call(token, check)
    _refuse_undeclared(check, trail, None)  # caught by the handler: it fails all the same
    if scope.cancelled_caught:
        raise ToolTimeoutError(seconds=budget)
    return result


def _refuse_undeclared(
    check: CallCheck, trail: CallTrail | None, cause: BaseException | None
) -> None:
    """Raise the call's ``denied`` answer if its handler reached what the tool does not
    declare: that, not how the handler then ended, is what the call answers."""
    denial = check.denial(trail)
    if denial is not None:
        raise denial from cause
