"""The registry: the one place that decides whether a tool call runs, and what comes back.

:meth:`Registry.call` runs the admission order of the design, and each failure stops it:

1. look-up      missing, hidden and wrong-caller tools all raise ``unknown_tool``, identically
2. validation   canonical JSON, size cap, strict model, effect placeholders: ``invalid_input``
3. authorization scope and effects inside the grant, then approval rules: ``denied`` /
                ``needs_approval``; record-level checks happen in the handler (``not_found``)
4. preconditions evidence from earlier calls in the run: ``conflict``
5. execution    deadline = min(tool timeout, run budget): ``timeout``; an unexpected exception
                is ``upstream`` with outcome ``unknown``, never success
6. shaping      projection onto the output allow-list, byte cap: ``result_too_large``

Whatever happens, exactly one final :class:`AuditEvent` is recorded for the call.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from pydantic import BaseModel

from airlock.policies import Effect, Principal, UsageError
from airlock.tools._arguments import (
    encode_arguments,
    raw_args_hash,
    resolve_effects,
    validate_arguments,
    validated_args_hash,
)
from airlock.tools._audit import AdmissionDecision, AuditEvent, AuditLog, MemoryAuditStore, Stage
from airlock.tools._context import CallContext, Caller
from airlock.tools._errors import (
    ConflictError,
    DeniedError,
    NeedsApprovalError,
    NotFoundError,
    Outcome,
    ToolError,
    ToolTimeoutError,
    UnknownToolError,
    UpstreamError,
)
from airlock.tools._json import JSONObject
from airlock.tools._registration import CompiledTool, build_spec, compile_tool
from airlock.tools._schema import ToolDefinition
from airlock.tools._shaping import shape_result
from airlock.tools._spec import Precondition, ToolSpec
from airlock.tools._write_contract import WriteRunner

__all__ = ["Registry"]

_log = logging.getLogger("airlock.tools")
F = TypeVar("F", bound=Callable[..., Any])


class Registry:
    """A set of tools and the admission of every call to them.

    Args:
        audit: where call events go; an in-memory log when omitted.
        max_input_bytes: largest canonical JSON of one call's arguments.
    """

    def __init__(self, *, audit: AuditLog | None = None, max_input_bytes: int = 1 << 20) -> None:
        self.audit = audit if audit is not None else AuditLog(MemoryAuditStore())
        self._max_input_bytes = max_input_bytes
        self._tools: dict[str, CompiledTool] = {}
        self._evidence: set[str] = set()
        self._writes: WriteRunner | None = None

    # -- registration -------------------------------------------------------------------

    def register(self, spec: ToolSpec) -> ToolSpec:
        """Add ``spec`` after checking it against the tool contract.

        Raises:
            UsageError: the name is taken or the spec breaks a rule; the message says what
                to change.
        """
        if spec.name in self._tools:
            raise UsageError(f"tool {spec.name!r} is already registered; choose another name")
        self._tools[spec.name] = compile_tool(spec)
        self._evidence.update(p.tool for p in spec.preconditions)
        return spec

    def tool(
        self,
        *,
        effects: Iterable[Effect],
        scope: str,
        callers: Collection[Caller] = frozenset({"direct"}),
        timeout: float = 10.0,
        output: type[BaseModel] | None = None,
        name: str | None = None,
        description: str | None = None,
        reversible: bool | None = None,
        requires: Iterable[Precondition] = (),
        max_result_bytes: int = 64_000,
        destinations: Iterable[str] = (),
        credentials: Iterable[str] = (),
    ) -> Callable[[F], F]:
        """Register the decorated function as a tool; the function itself is unchanged.

        The signature defines the input: an optional first parameter annotated
        ``CallContext``, then one typed parameter per input field (``Annotated`` with
        ``Field(...)`` for patterns, caps and descriptions). The docstring is the description
        unless ``description`` is given. ``reversible`` defaults to true for tools with only
        read/network effects. ``destinations`` are the origins the tool's adapter reaches
        (``adapter.destinations``) and ``credentials`` the names of the credentials it sends
        (``adapter.credentials``), both listed by the effect inventory.

        Raises:
            UsageError: as :meth:`register`.
        """

        def register(fn: F) -> F:
            self.register(
                build_spec(
                    fn,
                    effects=effects,
                    scope=scope,
                    callers=callers,
                    timeout=timeout,
                    output=output,
                    name=name,
                    description=description,
                    reversible=reversible,
                    preconditions=requires,
                    max_result_bytes=max_result_bytes,
                    destinations=destinations,
                    credentials=credentials,
                )
            )
            return fn

        return register

    def attach_writes(self, writes: WriteRunner) -> None:
        """Route direct calls of write tools to ``writes`` (a ``WritePath`` does this itself).

        Raises:
            UsageError: a write path is already attached.
        """
        if self._writes is not None and self._writes is not writes:
            raise UsageError("this registry already has a write path; attach only one")
        self._writes = writes

    # -- introspection ------------------------------------------------------------------

    def specs(self) -> tuple[ToolSpec, ...]:
        """Every registered tool, sorted by name."""
        return tuple(self._tools[name].spec for name in sorted(self._tools))

    def get(self, name: str) -> ToolSpec | None:
        """The spec registered under ``name``, if any (operator use; no visibility rules)."""
        tool = self._tools.get(name)
        return None if tool is None else tool.spec

    def visible(self, principal: Principal, caller: Caller) -> list[ToolDefinition]:
        """The tools ``principal`` may see from ``caller``, as model-facing definitions."""
        return [
            ToolDefinition(
                name=tool.spec.name,
                description=tool.spec.description,
                parameters=copy.deepcopy(tool.schema),
            )
            for _, tool in sorted(self._tools.items())
            if caller in tool.spec.callers and principal.has_scope(tool.spec.scope)
        ]

    # -- admission ----------------------------------------------------------------------

    async def call(self, name: str, args: Mapping[str, Any], ctx: CallContext) -> JSONObject:
        """Admit and run one call; the shaped, JSON-able result.

        ``ctx`` carries the principal and grant; nothing in ``args`` can change them.

        Raises:
            ToolError: the stable code of the first step that refused or failed.
        """
        started = time.perf_counter()
        stage: Stage = "lookup"
        decision: AdmissionDecision = "deny"
        rule = "lookup"
        outcome: Outcome = "unknown"
        code: str | None = None
        detail: str | None = None
        digest = ""
        secrets: frozenset[str] = frozenset()
        effects: tuple[Effect, ...] = ()
        try:
            tool = self._lookup(name, ctx)
            spec = tool.spec
            stage, rule = "validate", "input"
            secrets = spec.secret_fields
            instance = validate_arguments(
                spec.input_model, encode_arguments(args, max_bytes=self._max_input_bytes)
            )
            digest = validated_args_hash(instance, secret_fields=secrets)
            values: dict[str, Any] = dict(instance.__dict__)
            if spec.write is None:  # a write's effects are known once prepare computed them
                effects = resolve_effects(spec.effects, values)
            stage = "authorize"
            decision, rule, refusal = _authorize(spec, effects, ctx)
            if refusal is not None:
                raise refusal
            if spec.preconditions:
                stage, rule = "precondition", "precondition"
                _check_preconditions(spec.preconditions, values, ctx)
            stage = "execute"
            if spec.write is not None:
                proposal = await self._write_runner().propose(spec, instance, ctx)
                decision, rule, effects = proposal.decision, proposal.rule, proposal.effects
                raise proposal.answer
            result = await self._execute(tool, values, ctx)
            stage = "shape"
            shaped = shape_result(spec.output_model, result, max_bytes=spec.max_result_bytes)
            stage, outcome = "done", "ok"
            if spec.name in self._evidence and ctx.observations is not None:
                ctx.observations.record(spec.name, values)
            return shaped
        except ToolError as exc:
            outcome, code, detail = exc.outcome, exc.code, exc.detail
            raise
        except BaseException as exc:  # a bug, or cancellation from outside: never success
            detail = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            if not digest and stage == "validate":
                digest = raw_args_hash(args, secret_fields=secrets)
            self.audit.record(
                AuditEvent(
                    ts=time.time(),
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    caller=ctx.caller,
                    tool=name[:128] if isinstance(name, str) else repr(name)[:128],
                    user_id=ctx.principal.user_id,
                    tenant_id=ctx.principal.tenant_id,
                    args_hash=digest,
                    stage=stage,
                    decision=decision,
                    rule=rule,
                    outcome=outcome,
                    code=code,
                    duration_s=time.perf_counter() - started,
                    effects=tuple(str(e) for e in effects),
                    detail=detail,
                )
            )

    def _lookup(self, name: str, ctx: CallContext) -> CompiledTool:
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            why = "no such tool"
        elif ctx.caller not in tool.spec.callers:
            why = f"not callable by {ctx.caller!r}"
        elif not ctx.principal.has_scope(tool.spec.scope):
            why = f"hidden: principal lacks scope {tool.spec.scope!r}"
        else:
            return tool
        raise UnknownToolError(name=str(name), detail=why)

    def _write_runner(self) -> WriteRunner:
        if self._writes is None:
            raise DeniedError(
                "writes are not enabled in this deployment; do not retry this call",
                reason="policy",
                detail="no write path attached to the registry (WritePath(registry, ledger))",
            )
        return self._writes

    @staticmethod
    async def _execute(tool: CompiledTool, values: dict[str, Any], ctx: CallContext) -> Any:
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
        try:
            with anyio.move_on_after(budget) as scope:
                if tool.is_async:
                    result = await call()
                else:
                    result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except NotFoundError as exc:
            # One canonical answer, so another tenant's record reads exactly like a missing one.
            raise NotFoundError(detail=exc.detail or exc.message) from None
        except ToolError:
            raise
        except Exception as exc:
            _log.warning("tool %s raised %s", spec.name, type(exc).__name__, exc_info=exc)
            raise UpstreamError(
                "the tool failed and may have acted; do not assume it did or did not",
                outcome="unknown",
                detail=f"{type(exc).__name__}: {exc}"[:500],
            ) from exc
        if scope.cancelled_caught:
            raise ToolTimeoutError(seconds=budget)
        return result


def _authorize(
    spec: ToolSpec, effects: tuple[Effect, ...], ctx: CallContext
) -> tuple[AdmissionDecision, str, ToolError | None]:
    """Scope, then effects against the grant, then approval rules: (decision, rule, refusal)."""
    if not ctx.grant.allows_scope(spec.scope):
        return (
            "deny",
            "scope",
            DeniedError(
                f"this run's grant lacks scope {spec.scope!r}; do not call this tool in this run",
                reason="scope",
            ),
        )
    if spec.write is not None:  # effects, spend and approval rules are checked after prepare
        return "allow", "prepare", None
    outside = ctx.grant.uncovered(effects)
    if outside is not None:
        reason = "spend" if outside.kind == "spend" else "effect"
        message = f"{outside} is outside this run's grant; do not retry it"
        return "deny", "grant", DeniedError(message, reason=reason)
    verdict = ctx.approvals.decide(spec.name, effects, reversible=spec.reversible)
    if verdict.verdict == "deny":
        message = "a policy rule forbids this call; do not retry it"
        refusal = DeniedError(message, reason="policy", detail=verdict.reason)
        return "deny", verdict.rule_id, refusal
    if verdict.verdict == "ask":
        return (
            "ask",
            verdict.rule_id,
            NeedsApprovalError(rule=verdict.rule_id, detail=verdict.reason),
        )
    return "allow", verdict.rule_id, None


def _check_preconditions(
    conditions: tuple[Precondition, ...], values: Mapping[str, Any], ctx: CallContext
) -> None:
    for condition in conditions:
        match = {theirs: values[ours] for ours, theirs in condition.fields.items()}
        if ctx.observations is None or not ctx.observations.has(condition.tool, match):
            fields = ", ".join(sorted(condition.fields))
            raise ConflictError(
                f"call {condition.tool!r} with the same {fields} first; "
                "this tool needs that evidence",
                requires=condition.tool,
            )
