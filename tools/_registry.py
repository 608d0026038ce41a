"""The registry: the one place that decides whether a tool call runs, and what comes back.

:meth:`Registry.admit` runs steps 1–4 of the admission order of the design, and
:meth:`Registry.call` is admit, run and shape; each failure stops the call:

1. look-up      missing, hidden and wrong-caller tools all raise ``unknown_tool``, identically
2. validation   canonical JSON, size cap, strict model, effect placeholders: ``invalid_input``
3. authorization scope and effects inside the grant, then approval rules: ``denied`` /
                ``needs_approval``; record-level checks happen in the handler (``not_found``)
4. preconditions evidence from earlier calls in the run: ``conflict``
5. execution    deadline = min(tool timeout, run budget): ``timeout``; an unexpected exception
                is ``upstream`` with outcome ``unknown``, never success; what the handler
                reaches that the tool does not declare is ``denied`` (:mod:`._execute`)
6. shaping      projection onto the output allow-list, byte cap: ``result_too_large``

Whatever happens, exactly one final :class:`AuditEvent` is recorded for the call. A write
tool's call runs steps 1–4 here (step 3 on its declared effects: :mod:`._write_grant`), then
the write path prepares its effect, authorizes it with the same
:func:`~airlock.tools._admission.authorize`, and stores its preview, audited as ``preview``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from airlock.policies import ApprovalPolicy, Effect, EffectArgumentError, Principal, UsageError
from airlock.tools._admission import (
    Admission,
    CallTrail,
    authorize,
    check_preconditions,
    covers_declared,
    look_up,
    new_admission,
    new_trail,
    read_waits,
)
from airlock.tools._arguments import admit_arguments, effect_input_error
from airlock.tools._audit_log import AuditLog
from airlock.tools._context import CallContext, Caller
from airlock.tools._errors import DeniedError, NeedsApprovalError
from airlock.tools._execute import execute
from airlock.tools._json import JSONObject
from airlock.tools._records import RecordsRead, record_effects
from airlock.tools._registration import CompiledTool, build_spec, compile_tool
from airlock.tools._schema import ToolDefinition
from airlock.tools._shaping import shape_plain, shape_with
from airlock.tools._spec import Precondition, ToolSpec
from airlock.tools._worker_threads import WorkerThread
from airlock.tools._write_contract import WriteRunner
from airlock.tools._write_grant import judge_write_first

__all__ = ["Registry"]

F = TypeVar("F", bound=Callable[..., Any])


class Registry:
    """A set of tools and the admission of every call to them.

    Args:
        audit: where call events go; when omitted, a provisional log in memory that a
            ``Harness`` gives its durable store (see ``AuditLog.provisional``).
        max_input_bytes: largest canonical JSON of one call's arguments.
    """

    def __init__(self, *, audit: AuditLog | None = None, max_input_bytes: int = 1 << 20) -> None:
        self.audit = audit if audit is not None else AuditLog()
        self._max_input_bytes = max_input_bytes
        self._tools: dict[str, CompiledTool] = {}
        self._evidence: set[str] = set()
        self._writes: WriteRunner | None = None

    # -- registration -------------------------------------------------------------------

    def register(self, spec: ToolSpec) -> ToolSpec:
        """Add ``spec`` after checking it against the tool contract.

        Raises:
            UsageError: the name is taken or the spec breaks a rule; the message says what to fix.
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
        tenant_credentials: Mapping[str, str] | None = None,
        records: RecordsRead | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as a tool; the function itself is unchanged.

        The signature defines the input: an optional first parameter annotated
        ``CallContext``, then one typed parameter per input field (``Annotated`` with
        ``Field(...)`` for patterns, caps and descriptions). The docstring is the description
        unless ``description`` is given. ``reversible`` defaults to true for tools with only
        read/network effects. ``destinations`` are the origins the tool's adapter reaches
        (``adapter.destinations``) and ``credentials`` the names of the credentials it sends
        (``adapter.credentials``), both listed by the effect inventory; when the tool picks
        a credential by the principal's tenant, ``tenant_credentials`` maps each tenant id to
        the name its calls send, so the inventory says which one each principal uses.
        While the tool runs, its code may reach only these destinations (and those of its
        ``network`` effects) and reveal only these credentials: anything else fails the call
        with ``denied`` (:mod:`airlock.tools._egress`).
        ``records`` says where the result names the records a listing returned
        (:class:`~airlock.tools.RecordsRead`), so its audit event holds one effect per record.

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
                    tenant_credentials=tenant_credentials,
                    records=records,
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

    def admit(
        self,
        name: str,
        args: Mapping[str, Any],
        ctx: CallContext,
        *,
        approvable: bool = False,
        proposal: bool = False,
    ) -> Admission:
        """Steps 1–4 of the admission order: look-up, validation, authorization (scope; a
        read's resolved effects against grant and approval rules, a write's declared ones
        against the grant), preconditions. The caller runs what was admitted and records how
        it ended on :attr:`Admission.trail`; a refusal is recorded here.

        ``ctx`` carries the principal and grant; nothing in ``args`` can change them. A read
        the approval rules ask about raises ``needs_approval``, unless ``approvable`` (the
        write path's direct calls): then it is admitted with
        :attr:`Admission.needs_approval` set, for the write path to store its preview.
        ``proposal`` admits a program's proposal of a write (``ctx.caller == "code"``): the
        look-up then finds only write tools whose contract makes them proposable, and
        answers ``unknown_tool`` for every other name, as for any call from code.

        Raises:
            ToolError: the stable code of the first step that refused.
        """
        tool, instance, values, trail, waits = self._admit(name, args, ctx, approvable, proposal)
        return new_admission(tool.spec, instance, dict(values), trail.effects, trail, waits)

    def _admit(
        self, name: str, args: Mapping[str, Any], ctx: CallContext, approvable: bool, proposal: bool
    ) -> tuple[CompiledTool, BaseModel, dict[str, Any], CallTrail, bool]:
        """:meth:`admit`'s steps; a tuple, so :meth:`call` runs a read without an Admission
        (and on the validated instance's own values: nothing changes them)."""
        trail = new_trail(self.audit, name, args, ctx)
        waits = False
        try:  # (not `with trail.recording()`: this path runs on every call, and is hot)
            # The look-up of a call that finds its tool, spelled out; look_up() says why not.
            tool = self._tools.get(name) if type(name) is str else None
            if (
                tool is None
                or proposal
                or ctx.caller not in tool.spec.callers
                or tool.spec.scope not in ctx.principal.scopes
            ):
                tool = look_up(self._tools, name, ctx, proposal=proposal)
            spec = tool.spec
            trail.stage, trail.rule = "validate", "input"
            trail.secret_fields = spec.secret_fields
            instance, trail.args_hash = admit_arguments(
                tool.input_validator,
                tool.input_serializer,
                tool.hash_leaves_out,
                tool.sent_fields,
                args,
                self._max_input_bytes,
                parameters=tool.parameters,
            )
            values: dict[str, Any] = instance.__dict__  # (copied for an Admission only)
            trail.stage, trail.rule = "authorize", "scope"
            grant = ctx.grant
            if spec.scope not in grant.scopes:  # (allows_scope(), without a call)
                raise DeniedError(
                    f"this run's grant lacks scope {spec.scope!r}; "
                    "do not call this tool in this run",
                    reason="scope",
                )
            if spec.write is None:  # a write's effects are known once prepare computed them
                try:
                    effects = trail.effects = tool.resolve(values)
                except EffectArgumentError as exc:
                    raise effect_input_error(exc) from None
                # Without approval rules, a read whose effects' kinds are fixed is judged by
                # its grant alone: once per grant (see CompiledTool.judged_once).
                approvals = ctx.approvals
                plain = type(approvals) is ApprovalPolicy and not approvals.rules
                judged = tool.judged[0]
                if plain and judged is not None and judged[0] is grant:
                    verdict = judged[1]
                else:
                    verdict = authorize(spec, effects, ctx)
                    if plain and tool.judged_once and covers_declared(grant, spec):
                        tool.judged[0] = (grant, verdict)
                trail.decision, trail.rule = verdict.decision, verdict.rule
                if verdict.refusal is not None:
                    raise verdict.refusal
                if verdict.decision == "ask":
                    if any(e.is_side_effect for e in spec.effects):
                        # A handler with side effects: no preview can stand for what it does.
                        raise NeedsApprovalError(rule=verdict.rule, detail=verdict.reason)
                    if not approvable:
                        raise read_waits(spec.name, ctx, verdict.rule, verdict.reason)
                    waits = True
            else:  # before prepare reads anything: what the grant cannot cover is refused
                judge_write_first(spec, grant, trail)
            if spec.preconditions:
                trail.stage, trail.rule = "precondition", "precondition"
                check_preconditions(spec.preconditions, values, ctx)
                if waits:
                    trail.rule = verdict.rule
            trail.stage = "execute"
        except BaseException as exc:
            trail.refused(exc)  # (or raises a typed error for it)
            raise
        return tool, instance, values, trail, waits

    async def call(self, name: str, args: Mapping[str, Any], ctx: CallContext) -> JSONObject:
        """Admit and run one call; the shaped, JSON-able result.

        A write tool's call, and a direct read the approval rules ask about, store a preview
        through the attached write path and answer ``needs_approval`` with its id (a harness
        uses ``WritePath.call`` to get the preview itself); an intent already committed in
        the run answers ``conflict``, saying so, and nothing is sent again.

        Raises:
            ToolError: the stable code of the first step that refused or failed.
        """
        approvable = self._writes is not None and ctx.caller == "direct"
        tool, instance, values, trail, waits = self._admit(name, args, ctx, approvable, False)
        if tool.spec.write is not None or waits:
            admission = new_admission(
                tool.spec, instance, dict(values), trail.effects, trail, waits
            )
            writes = self._write_runner(admission)
            raise writes.waiting(await writes.propose(admission, ctx))
        try:  # step 5 (:meth:`run`'s, spelled out)
            result = await self._execute(tool, values, ctx, trail=trail)
        except BaseException as exc:
            trail.failed(exc)
            raise
        return self._shaped(tool, values, trail, ctx, result)

    async def run(self, admission: Admission, ctx: CallContext) -> JSONObject:
        """Step 5 and 6 for an admitted read: run it with limits, shape its result, and
        record how it ended on its trail.

        Raises:
            ToolError: the run or the shaping failed; ``needs_approval`` when the admission
                waits for a person (only the write path runs such a read, once approved).
            UsageError: ``admission`` is a write's (the write path prepares it).
        """
        spec = admission.spec
        if spec.write is not None:
            raise UsageError(f"{spec.name} is a write tool; the write path prepares its calls")
        if admission.needs_approval:
            raise NeedsApprovalError(rule=admission.trail.rule)
        tool, trail = self._tools[spec.name], admission.trail
        try:
            result = await self._execute(tool, admission.values, ctx, trail=trail)
        except BaseException as exc:
            trail.failed(exc)
            raise
        return self._shaped(tool, admission.values, trail, ctx, result)

    def _shaped(
        self,
        tool: CompiledTool,
        values: Mapping[str, Any],
        trail: CallTrail,
        ctx: CallContext,
        result: Any,
    ) -> JSONObject:
        """Step 6 for a read of ``tool`` whose handler returned ``result``, and its event.
        (Not a coroutine, nor the run with it: each level of coroutine costs every call.)"""
        spec = tool.spec
        trail.stage = "shape"
        try:
            shaped = (shape_plain if tool.plain_output else shape_with)(
                spec.output_model,
                tool.output_validator,
                tool.output_serializer,
                result,
                spec.max_result_bytes,
            )
            if spec.records is not None:  # the records it returned, one effect each
                named = record_effects(spec.records, shaped, trail.effects)
                trail.effects = trail.effects if named is None else named
        except BaseException as exc:
            trail.failed(exc)
            raise
        trail.stage = "done"
        trail.record("ok")
        if spec.name in self._evidence and ctx.observations is not None:
            ctx.observations.record(spec.name, values)
        return shaped

    async def run_approved(
        self, name: str, values: Mapping[str, Any], ctx: CallContext, thread: WorkerThread
    ) -> Any:
        """Run the read tool ``name``'s handler on ``values`` (validated, a person approved
        them) with limits, a sync one on ``thread``; its raw result, for the write path only.

        Raises:
            ToolError: as the handler's run (step 5); NotSent when ``thread`` did not start.
            UsageError: ``name`` is no registered read tool.
        """
        tool = self._tools.get(name)
        if tool is None or tool.spec.write is not None:
            raise UsageError(f"{name!r} is not a read tool of this registry")
        return await self._execute(tool, values, ctx, claimed=thread)

    def _write_runner(self, admission: Admission) -> WriteRunner:
        if self._writes is None:
            with admission.trail.recording():
                raise DeniedError(
                    "writes are not enabled in this deployment; do not retry this call",
                    reason="policy",
                    detail="no write path attached to the registry (WritePath(registry, ledger))",
                )
        return self._writes

    _execute = staticmethod(execute)  # step 5, under the runtime checks: its own module
