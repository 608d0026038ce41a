"""What admission decides about one call, and the trail it leaves in the audit log.

:meth:`Registry.admit <airlock.tools.Registry.admit>` runs steps 1–4 of the admission order
(look-up, validation, authorization, preconditions) and returns an :class:`Admission`; the
caller then runs it: :meth:`Registry.run` executes a read and shapes its result, the write
path prepares a write, or a read a person must approve, and stores its preview.
:func:`authorize` is the one check of resolved effects against the grant and the approval
rules, for reads before they run and for writes once ``prepare`` has computed their effects.

A :class:`CallTrail` follows the call through every step and records its one final audit
event: where it stopped, what decided, and how it ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from pydantic import BaseModel

from airlock.policies import ApprovalPolicy, Effect, Grant
from airlock.tools._arguments import raw_args_hash
from airlock.tools._audit import AdmissionDecision, CallOutcome, Stage, call_event
from airlock.tools._audit_log import AuditLog
from airlock.tools._context import CallContext
from airlock.tools._declared_cover import covers_declared
from airlock.tools._errors import (
    DeniedError,
    InvalidInputError,
    NeedsApprovalError,
    ToolError,
    UnknownToolError,
    UpstreamError,
)
from airlock.tools._preconditions import check_preconditions
from airlock.tools._spec import ToolSpec
from airlock.tools._step_text import (
    SecretForms,
    argument_secrets,
    error_detail,
    failure_detail,
    failure_trace,
    secret_forms,
)
from airlock.tools._write_grant import outside_grant

if TYPE_CHECKING:
    from airlock.tools._registration import CompiledTool

__all__ = [
    "Admission",
    "Authorization",
    "CallTrail",
    "authority_refusal",
    "authorize",
    "by_rules",
    "check_preconditions",
    "covers_declared",
    "look_up",
    "new_admission",
    "new_trail",
    "read_waits",
]

_log = logging.getLogger("airlock.tools")


class Authorization(NamedTuple):
    """The verdict on a call's resolved effects: ``allow``, ``ask`` (a person must approve)
    or ``deny`` with the refusal to raise. (A tuple: built on every call, it must be cheap.)"""

    decision: AdmissionDecision
    rule: str
    """What decided: ``grant``, ``spend``, an approval rule id, or ``default``."""
    refusal: DeniedError | None = None
    reason: str = ""
    """Why the approval rules decided so (operator detail)."""


_DEFAULT_READ: Final = ApprovalPolicy().decide("default", (), reversible=True)
"""What approval rules answer a call no rule matched and without side effects: one shared
decision (frozen), so its authorization is made once too."""
_DEFAULT_READ_ALLOWED: Final = Authorization(
    _DEFAULT_READ.verdict, _DEFAULT_READ.rule_id, None, _DEFAULT_READ.reason
)


def authorize(spec: ToolSpec, effects: tuple[Effect, ...], ctx: CallContext) -> Authorization:
    """Resolved ``effects`` of a call of ``spec`` against the run's grant, then its approval
    rules (scope is checked at admission, before anything is resolved). A write tool's call
    is never judged as read-only: when its effects hold no side effect, the rules also judge
    the side effects it declares."""
    return _authorize(spec, effects, ctx.grant, ctx.approvals)


def authority_refusal(
    spec: ToolSpec, effects: tuple[Effect, ...], grant: Grant, approvals: ApprovalPolicy
) -> DeniedError | None:
    """Why ``grant`` and ``approvals`` refuse ``effects`` of a call of ``spec`` as
    :func:`authorize` judges them (a paused write's, before a later session commits it)."""
    return _authorize(spec, effects, grant, approvals).refusal


def _authorize(
    spec: ToolSpec, effects: tuple[Effect, ...], grant: Grant, approvals: ApprovalPolicy
) -> Authorization:
    if spec.write is not None or not covers_declared(grant, spec):
        outside = grant.uncovered(effects)
        if outside is not None:
            rule = "spend" if outside.kind == "spend" else "grant"
            return Authorization(decision="deny", rule=rule, refusal=outside_grant(outside))
    return by_rules(spec, effects, approvals)


def by_rules(spec: ToolSpec, effects: tuple[Effect, ...], rules: ApprovalPolicy) -> Authorization:
    """What ``rules`` decide about ``effects`` of a call of ``spec`` (the grant aside)."""
    judged = effects
    if spec.write is not None and not any(e.is_side_effect for e in effects):
        # A write whose prepare resolved no side effect (write("crm:contact/{ids[]}") with
        # an empty list) is still a write: judged as read-only it would be allowed by the
        # default and committed unseen, and no rule on its kind (deny effect=write) would
        # apply. Its declared side effects stand for what it may change, so the rules judge
        # the kinds it declares, and without a rule the default for a write applies: ask.
        judged = (*effects, *(e for e in spec.effects if e.is_side_effect))
    verdict = rules.decide(spec.name, judged, reversible=spec.reversible)
    if verdict is _DEFAULT_READ:
        return _DEFAULT_READ_ALLOWED
    if verdict.verdict == "deny":
        action = "change" if spec.write is not None else "call"
        refusal = DeniedError(
            f"a policy rule forbids this {action}; do not retry it",
            reason="policy",
            detail=verdict.reason,
        )
        return Authorization("deny", verdict.rule_id, refusal, verdict.reason)
    return Authorization(verdict.verdict, verdict.rule_id, None, verdict.reason)


class CallTrail:
    """Where one call stands in the admission order; :meth:`record` writes its one final
    audit event (exactly once, whatever happens)."""

    __slots__ = (
        "_args",
        "_audit",
        "_ctx",
        "_forms",
        "_recorded",
        "args_hash",
        "decision",
        "effects",
        "rule",
        "secret_fields",
        "stage",
        "started",
        "tool",
    )

    def __init__(self, audit: AuditLog, name: object, args: object, ctx: CallContext) -> None:
        self.started = time.perf_counter()
        self.tool = name[:128] if isinstance(name, str) else repr(name)[:128]
        self.stage: Stage = "lookup"
        self.decision: AdmissionDecision = "deny"
        self.rule = "lookup"
        self.args_hash = ""
        self.secret_fields: frozenset[str] = frozenset()
        self.effects: tuple[Effect, ...] = ()
        self._audit = audit
        self._args = args
        self._ctx = ctx
        self._forms: SecretForms | None = None
        self._recorded = False

    def record(
        self, outcome: CallOutcome, *, code: str | None = None, detail: str | None = None
    ) -> None:
        """Write the final event; later calls do nothing."""
        if self._recorded:
            return
        self._recorded = True
        if not self.args_hash and self.stage == "validate":  # invalid input: hash it as sent
            self.args_hash = raw_args_hash(self._args, secret_fields=self.secret_fields)
        self._audit.record(
            call_event(  # (audit_event, by position: this runs on every call)
                self._ctx,
                self.tool,
                self.stage,
                self.decision,
                self.rule,
                outcome,
                code,
                self.args_hash,
                self.effects,
                detail,
                time.perf_counter() - self.started,
                True,
                time.time(),
            )
        )

    def recording(self) -> CallTrail:
        """Use as ``with trail.recording():`` around a step: how the block failed, if it
        did, is recorded (see :meth:`__exit__`)."""
        return self

    def __enter__(self) -> CallTrail:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.failed(exc)

    def secret_forms(self, also: tuple[str, ...] = ()) -> SecretForms:
        """The forms of the call's ``Secret()`` values as sent and of ``also`` (as validated,
        which a handler got), made once: the first to ask names ``also``."""
        if self._forms is None:
            sent = argument_secrets(self._args, self.secret_fields) if self.secret_fields else ()
            self._forms = secret_forms((*sent, *also))
        return self._forms

    def failed(self, exc: BaseException) -> None:
        """Record how the call failed: a tool error with its outcome and code; anything else
        (a bug, a cancellation) as ``unknown``, never as success."""
        forms, withheld = self.secret_forms(), self._withheld  # (as sent: see secret_forms)
        if isinstance(exc, ToolError):
            if exc.detail:  # kept on the error too: every later log of it says what this keeps
                exc.detail = error_detail(exc.detail, forms, cause=exc.__cause__, withheld=withheld)
            self.record(exc.outcome, code=exc.code, detail=exc.detail)
        else:
            self.record("unknown", detail=failure_detail(exc, forms, withheld=withheld))

    @property
    def _withheld(self) -> bool:
        """Whether an exception's text is left out: one raised while validating may quote a
        Secret() value as validation changed it (stripped, lower-cased), which no value
        sent spells, so no cleaning would find it."""
        return self.stage == "validate" and bool(self.secret_fields)

    def refused(self, exc: BaseException) -> None:
        """Record how admission failed, for the caller to raise ``exc`` again; but a bug of
        code it runs (a validator, an approval policy) raises ``invalid_input`` (validating)
        or ``upstream`` instead, its traceback logged without the call's Secret() values."""
        if isinstance(exc, ToolError) or not isinstance(exc, Exception):
            return self.failed(exc)
        forms = self.secret_forms()
        kind, withheld = type(exc).__name__, self._withheld
        trace = failure_trace(exc, forms, withheld=withheld)
        _log.warning("admission of %r raised %s:\n%s", self.tool, kind, trace)
        typed = InvalidInputError if self.stage == "validate" else UpstreamError
        said = f"checking this call failed ({kind}) before the tool ran; nothing was done"
        error = typed(said, detail=failure_detail(exc, forms, withheld=withheld))
        self.record(error.outcome, code=error.code, detail=error.detail)  # (cleaned: kept)
        raise error from None


_new_object = object.__new__


def new_trail(audit: AuditLog, name: object, args: object, ctx: CallContext) -> CallTrail:
    """``CallTrail(audit, name, args, ctx)``, made without calling a class (which costs more
    than setting its dozen slots; this runs on every call): the same trail."""
    trail: CallTrail = _new_object(CallTrail)
    trail.started = time.perf_counter()
    trail.tool = name[:128] if type(name) is str else _tool_text(name)
    trail.stage = "lookup"
    trail.decision = "deny"
    trail.rule = "lookup"
    trail.args_hash = ""
    trail.secret_fields = _NO_FIELDS
    trail.effects = ()
    trail._audit = audit
    trail._args = args
    trail._ctx = ctx
    trail._forms = None
    trail._recorded = False
    return trail


_NO_FIELDS: Final[frozenset[str]] = frozenset()


def _tool_text(name: object) -> str:
    return name[:128] if isinstance(name, str) else repr(name)[:128]


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """A call that passed look-up, validation, authorization and preconditions."""

    spec: ToolSpec
    input: BaseModel
    """The validated arguments."""
    values: Mapping[str, Any]
    """The validated arguments by field name, as the handler receives them."""
    effects: tuple[Effect, ...]
    """The call's resolved effects; empty for a write until ``prepare`` computed them."""
    trail: CallTrail
    """Where the call's final audit event is recorded once it has run."""
    needs_approval: bool = False
    """A read the approval rules ask about: only the write path may take it on, as a
    preview a person approves (``Registry.admit(..., approvable=True)``)."""


class _AdmissionBuilder:
    """Makes an :class:`Admission`: ``_AdmissionBuilder(...)`` *is* one, fields in order.
    The same slots, without the frozen dataclass's ``__setattr__`` (``object.__setattr__``
    per field, on every call); once they are set, the object becomes the :class:`Admission`
    it is (the layouts are the same, so its class may be assigned; a test holds the two in
    step)."""

    __slots__ = Admission.__slots__

    def __init__(
        self,
        spec: ToolSpec,
        input: BaseModel,
        values: Mapping[str, Any],
        effects: tuple[Effect, ...],
        trail: CallTrail,
        needs_approval: bool,
    ) -> None:
        self.spec = spec
        self.input = input
        self.values = values
        self.effects = effects
        self.trail = trail
        self.needs_approval = needs_approval
        self.__class__ = Admission  # type: ignore[assignment]


def new_admission(
    spec: ToolSpec,
    input: BaseModel,
    values: Mapping[str, Any],
    effects: tuple[Effect, ...],
    trail: CallTrail,
    needs_approval: bool = False,
) -> Admission:
    """The :class:`Admission` of a call, made as cheaply as admission runs (see
    :class:`_AdmissionBuilder`); the same object ``Admission(...)`` makes."""
    made: Admission = _AdmissionBuilder(  # type: ignore[assignment]  # (it is one)
        spec, input, values, effects, trail, needs_approval
    )
    return made


def read_waits(name: str, ctx: CallContext, rule: str, reason: str) -> ToolError:
    """The answer to a read the approval rules ask about, where no preview can be stored."""
    if ctx.caller == "code":
        return NeedsApprovalError(
            f"a person must approve this call of {name} first, and a program cannot wait for "
            "that; call it directly (not from code) to ask for the approval",
            rule=rule,
            detail=reason,
        )
    return DeniedError(
        f"a person must approve this call of {name}, and this deployment has no approval "
        "ledger; do not retry it",
        reason="policy",
        detail=f"{reason}; no write path attached (WritePath(registry, ledger))",
    )


def look_up(
    tools: Mapping[str, CompiledTool], name: str, ctx: CallContext, *, proposal: bool = False
) -> CompiledTool:
    """Step 1: the tool ``ctx``'s caller may call by ``name`` (a write tool proposable from
    code, for a ``proposal``).

    Raises:
        UnknownToolError: missing, hidden and wrong-caller tools alike; the detail (operator
            only) says which.
    """
    tool = tools.get(name) if isinstance(name, str) else None
    if tool is None:
        why = "no such tool"
    elif proposal:
        write = tool.spec.write
        if write is None or not write.proposable or ctx.caller != "code":
            why = "not proposable from code"
        elif not ctx.principal.has_scope(tool.spec.scope):
            why = f"hidden: principal lacks scope {tool.spec.scope!r}"
        else:
            return tool
    elif ctx.caller not in tool.spec.callers:
        why = f"not callable by {ctx.caller!r}"
    elif tool.spec.scope not in ctx.principal.scopes:  # (has_scope(), without a call)
        why = f"hidden: principal lacks scope {tool.spec.scope!r}"
    else:
        return tool
    raise UnknownToolError(name=str(name), detail=why)
