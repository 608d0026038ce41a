"""A session: one model conversation's tools and the answers to its tool calls.

The application creates a session for a principal it authenticated (never one the model
names); the model sees :meth:`Session.tools` and every call it makes goes through
:meth:`Session.call`, which never raises for anything the model did::

    call(name, arguments)
    ├── execute_code ─► sandbox run with a ToolSession (reads only, caller "code")
    │                   ─► final value + capped stdout, or program_error / limit_exceeded
    ├── direct read  ─► Registry.call(caller "direct") ─► shaped result
    ├── direct write ─► WritePath.preview_call ─► needs_approval (the pause; recorded)
    │                   └─ approved by a policy rule ─► commit at once ─► receipt
    └── anything else ─► unknown_tool

A paused write goes on with :meth:`Session.resume` once a person (``airlock approvals
approve``, :func:`airlock.tools.approve_preview`) or a policy approved it: the session commits once
and returns the receipt; a denial returns ``denied``; still waiting returns
``needs_approval`` again. Pending writes live in the ledger under the session's run id, so
another process can rebuild the session (:meth:`Harness.resume_session`) and resume them.

``needs_approval`` is answered with ``is_error=False``: the call did what it should (a
preview now waits for a person), and an error flag invites a model to retry with other
arguments, which is exactly what must not happen.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from airlock.bridge import BridgeLimits, ToolSession, render_api
from airlock.harness._budget import Budget, BudgetMeter
from airlock.harness._execute_code import (
    EXECUTE_CODE,
    ExecuteCodeArgs,
    describe_execute_code,
    program_result,
)
from airlock.harness._model_tools import ModelResult, ModelTool
from airlock.harness._paused import PausedWrites, PendingWrite
from airlock.harness._results import failure, from_tool_error, sized, success
from airlock.harness._session_audit import SessionAudit
from airlock.harness._usable import usable
from airlock.policies import ApprovalPolicy, Grant, Principal, SandboxProfile
from airlock.sandbox import KeptSandbox, SandboxBackend, SandboxError
from airlock.tools import (
    CallContext,
    Caller,
    FieldIssue,
    InvalidInputError,
    LimitExceededError,
    Observations,
    Registry,
    RunAuthority,
    ToolError,
    UnknownToolError,
    WritePath,
)

if TYPE_CHECKING:
    from airlock.harness._harness import Harness

__all__ = ["Session"]

_log = logging.getLogger("airlock.harness")


class Session:
    """One conversation: principal, grant, budget, run id, and the tools the model may call.

    Build it with :meth:`Harness.session`; it implements
    :class:`~airlock.ModelToolSurface`. :meth:`call` is safe to run concurrently for
    several calls of one model turn.
    """

    def __init__(
        self,
        *,
        registry: Registry,
        sandbox: SandboxBackend,
        writes: WritePath | None,
        profile: SandboxProfile,
        principal: Principal,
        grant: Grant,
        approvals: ApprovalPolicy,
        budget: Budget,
        run_id: str | None = None,
        keep_state: bool = False,
        idle_timeout: float = 300.0,
    ) -> None:
        self.principal = principal
        self.grant = grant
        self.approvals = approvals
        self.budget = budget
        self.run_id = run_id or "run_" + uuid.uuid4().hex
        self._registry = registry
        self._sandbox = sandbox
        self._writes = writes
        self._profile = profile
        self._meter = BudgetMeter(budget)
        self._nonce = uuid.uuid4().hex[:6]
        self._refused = 0  # calls refused because the budget was used up
        self._observations = Observations()
        self._authority = RunAuthority(
            principal=principal,
            grant=grant,
            run_id=self.run_id,
            approvals=approvals,
            observations=self._observations,
        )
        self._paused = PausedWrites(writes, principal, self.run_id)
        self._audit = SessionAudit(registry.audit)
        self._keep_state = keep_state
        self._idle_timeout = idle_timeout
        self._kept: KeptSandbox | None = None
        self._direct = self._usable_names("direct")
        self._code = self._usable_names("code")
        self._tools = self._build_tools()

    # -- the tool list -------------------------------------------------------------------

    def _usable_names(self, caller: Caller) -> frozenset[str]:
        names = set()
        for definition in self._registry.visible(self.principal, caller):
            spec = self._registry.get(definition.name)
            if spec is None or not usable(spec, self.grant, self.approvals):
                continue
            if spec.write is not None and self._writes is None:
                continue  # no ledger, no write path: the call could only be refused
            names.add(definition.name)
        return frozenset(names)

    def _build_tools(self) -> list[ModelTool]:
        api = render_api(self._registry, self.principal, names=self._code)
        listed = [
            describe_execute_code(
                api,
                self._profile,
                result_bytes=self.budget.result_bytes,
                stdout_bytes=self.budget.stdout_bytes,
                calls=self.budget.program_calls,
                kept_idle_s=self._idle_timeout if self._keep_state else None,
            )
        ]
        for definition in self._registry.visible(self.principal, "direct"):
            spec = self._registry.get(definition.name)
            if spec is None or definition.name not in self._direct:
                continue
            changes = any(e.is_side_effect for e in spec.effects)
            listed.append(
                ModelTool(
                    name=definition.name,
                    description=definition.description,
                    input_schema=dict(definition.parameters),
                    read_only=not changes,
                    destructive=changes and not spec.reversible,
                    # A write's idempotency key (run, tool, intent) makes a repeated call of
                    # the same intent in this session answer with the same preview.
                    idempotent=not changes or spec.write is not None,
                )
            )
        return listed

    def tools(self) -> list[ModelTool]:
        """The tools this session's principal may use, ``execute_code`` first."""
        return list(self._tools)

    # -- calls ---------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        """Run one model tool call to its model-facing result; never raises for tool errors.

        Every result, error or not, is at most the budget's ``result_bytes`` (or what is
        left of its ``bytes``): a larger one is ``result_too_large`` with its size.
        """
        used_up = self._meter.exhausted()
        if used_up is not None:
            self._refused += 1
            ctx = self._context(f"{self.run_id}:r{self._refused}-{self._nonce}")
            self._audit.over_budget(ctx, str(name), used_up)
            await self._audit.durable()
            return from_tool_error(LimitExceededError(limit=used_up))
        self._meter.calls += 1
        # The nonce keeps call ids unique when another process resumes the same run.
        call_id = f"{self.run_id}:m{self._meter.calls}-{self._nonce}"
        try:
            if not isinstance(arguments, Mapping):
                raise InvalidInputError("the arguments must be a JSON object")
            if name == EXECUTE_CODE:
                result = await self._execute_code(arguments, call_id)
            elif isinstance(name, str) and name in self._direct:
                result = await self._call_direct(name, arguments, call_id)
            else:
                self._audit.unknown_tool(self._context(call_id), str(name))
                raise UnknownToolError(name=str(name), detail="not in this session's tool list")
        except ToolError as exc:
            if exc.detail:
                _log.info("run %s call %s: %s (%s)", self.run_id, call_id, exc.code, exc.detail)
            result = from_tool_error(exc)
        except SandboxError as exc:
            _log.warning("run %s: the sandbox could not run a program: %s", self.run_id, exc)
            result = failure(
                "sandbox_unavailable",
                "the sandbox could not run the program; try again shortly",
                retryable=bool(getattr(exc, "retryable", False)),
            )
        # The call's events are stored before its answer is given (group commit, off the
        # event loop): a crash after this loses nothing of it.
        await self._audit.durable()
        return self._account(result)

    def _account(self, result: ModelResult) -> ModelResult:
        result = sized(result, self._meter.result_cap())
        self._meter.bytes += len(result.content.encode())
        return result

    async def _execute_code(self, arguments: Mapping[str, Any], call_id: str) -> ModelResult:
        try:
            args = ExecuteCodeArgs.model_validate(dict(arguments))
        except ValidationError as exc:
            raise InvalidInputError(issues=_issues(exc)) from None
        remaining = self._meter.remaining()
        profile = self._profile
        if remaining < profile.timeout_s:
            # The program may not outlive the session; the pool ignores the deadline.
            profile = profile.model_copy(update={"timeout_s": max(remaining, 0.5)})
        tools = ToolSession(
            registry=self._registry,
            principal=self.principal,
            grant=self.grant,
            run_id=self.run_id,
            approvals=self.approvals,
            limits=BridgeLimits(max_calls=self.budget.program_calls),
            observations=self._observations,
            tool_names=self._code,
            call_prefix=call_id,  # the program's calls: RUN:mN:1, RUN:mN:2, ...
        )
        digest = self._audit.program_text(args.code)
        began = time.perf_counter()
        notes: dict[str, object] = {}
        if self._keep_state:
            kept = self._kept_sandbox()
            starts = kept.starts
            run = await kept.run(args.code, profile=profile, tools=tools)
            if starts and kept.starts > starts:
                notes["state_reset"] = True  # earlier programs' names are gone
        else:
            run = await self._sandbox.run(args.code, profile=profile, tools=tools)
        _log.info(
            "run %s: program %s in %.1f ms, %d tool calls%s",
            self.run_id,
            run.status,
            (time.perf_counter() - began) * 1000,
            run.tool_calls,
            f", stderr: {run.stderr[-500:]!r}" if run.stderr else "",
        )
        result = program_result(run, stdout_bytes=self.budget.stdout_bytes, notes=notes)
        self._audit.program(
            self._context(call_id),
            digest,
            code=result.code,
            detail=f"program {run.status}, {run.tool_calls} tool calls"
            + (f", limit {run.limit}" if run.limit else ""),
            duration_s=time.perf_counter() - began,
        )
        return result

    def _kept_sandbox(self) -> KeptSandbox:
        if self._kept is None:
            # Raises UsageError when the backend cannot keep (Harness.session checks first).
            self._kept = self._sandbox.keep(
                self.principal, idle_timeout=self._idle_timeout, profile=self._profile
            )
        return self._kept

    async def close(self) -> None:
        """Release what the session holds (its kept container, in session mode)."""
        if self._kept is not None:
            await self._kept.close()
            self._kept = None

    def _context(self, call_id: str) -> CallContext:
        return self._authority.context("direct", call_id, deadline=self._meter.deadline)

    async def _call_direct(
        self, name: str, arguments: Mapping[str, Any], call_id: str
    ) -> ModelResult:
        spec = self._registry.get(name)
        ctx = self._context(call_id)
        if spec is None or spec.write is None or self._writes is None:
            return success(await self._registry.call(name, arguments, ctx))
        preview = await self._writes.preview_call(name, arguments, ctx)
        self._paused.hold(preview)
        if preview.state == "prepared":
            return self._paused.paused(preview)
        # Approved by a policy rule (or the same intent was prepared before): finish it now.
        return await self._paused.finish(preview.id)

    # -- the approval pause --------------------------------------------------------------

    def pending(self) -> list[PendingWrite]:
        """Writes of this session waiting for approval or commit, oldest first."""
        return self._paused.waiting()

    async def resume(self, preview_id: str | None = None) -> ModelResult:
        """Go on with a paused write (the oldest one when ``preview_id`` is None).

        Approved: commit once and return the receipt (again on every later resume, the
        same receipt; nothing is sent twice). Denied: ``denied`` with the reason. Still
        waiting: ``needs_approval`` again. Never raises for tool errors.
        """
        if preview_id is None:
            waiting = self._paused.waiting()
            if not waiting:
                return self._account(
                    failure(
                        "not_found", "no write of this session waits; there is nothing to resume"
                    )
                )
            preview_id = waiting[0].preview_id
        try:
            result = await self._paused.finish(preview_id)
        except ToolError as exc:
            result = from_tool_error(exc)
        await self._audit.durable()
        return self._account(result)

    async def resume_all(self) -> dict[str, ModelResult]:
        """:meth:`resume` every pending write, by preview id."""
        return {p.preview_id: await self.resume(p.preview_id) for p in self.pending()}

    def restore_pending(self) -> list[PendingWrite]:
        """Load this run's unfinished writes from the ledger (another process may have
        paused them); returns the pending writes, oldest first."""
        return self._paused.restore()

    @classmethod
    def restore(
        cls,
        harness: Harness,
        principal: Principal,
        run_id: str,
        *,
        grant: Grant | None = None,
        budget: Budget | None = None,
    ) -> Session:
        """A session of ``run_id`` rebuilt from the ledger (see
        :meth:`Harness.resume_session`)."""
        return harness.resume_session(principal, run_id, grant=grant, budget=budget)


def _issues(exc: ValidationError) -> tuple[FieldIssue, ...]:
    return tuple(
        FieldIssue(".".join(str(p) for p in error["loc"]) or "(arguments)", error["msg"][:200])
        for error in exc.errors()[:10]
    )
