"""A write's declared effects against the grant before its ``prepare`` reads anything, and what
answers a call whose prepare found no record.

A write tool's effects are resolved from what ``prepare`` computes, and the grant and the
approval rules judge them then (:func:`~airlock.tools._admission.authorize`): that judgement
decides, as prepare may name the record otherwise than the input does (``INV-1`` becomes
``inv_1``). But prepare reads the system of record, and answers ``not_found`` for a record
that does not exist where the judgement would refuse one that does: that difference would
tell the model which records exist. So:

- before prepare, admission refuses a call no prepared effect of which the grant can cover
  (:func:`~airlock.policies.coverage` of a declared effect is ``none``: no grant effect of
  its kind may share a target with it, or a spend has no limit in its currency, in any
  currency for ``currency="{field}"``), with the ``denied`` the judgement after prepare
  gives (:func:`outside_grant`); prepare never runs;
- when prepare raises ``not_found``, the effects the input names (:func:`input_named`) are
  judged as a found record's would be: a ``read`` or ``write`` whose placeholders all name
  input fields (``write("billing:refund/{invoice_id}")`` and an ``invoice_id`` input),
  resolved from the input, against the grant; then the ``deny`` rules that need no amount
  or currency (:func:`amountless_denials`). Their refusal answers instead, so a missing
  record reads as an existing one the grant or a rule refuses. A rule that needs prepare's
  amount cannot judge it: ``not_found`` stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airlock.policies import ApprovalPolicy, Effect, EffectArgumentError, Grant, coverage
from airlock.tools._errors import DeniedError
from airlock.tools._spec import ToolSpec

if TYPE_CHECKING:
    from airlock.tools._admission import CallTrail

__all__ = [
    "amountless_denials",
    "input_named",
    "judge_write_first",
    "outside_grant",
    "write_refusal",
]

_RECORDS = ("read", "write")
"""Kinds whose placeholders name records by id, judged against the grant from the input."""
_BEFORE = "judged on the declared effects, before prepare ran"


def outside_grant(effect: Effect, *, detail: str | None = None) -> DeniedError:
    """The refusal of a call one of whose effects, ``effect``, the grant does not cover."""
    return DeniedError(
        f"{effect} is outside this run's grant; do not retry it",
        reason="spend" if effect.kind == "spend" else "effect",
        detail=detail,
    )


def write_refusal(spec: ToolSpec, grant: Grant) -> DeniedError | None:
    """Why ``grant`` covers no call of the write tool ``spec``, judged from its declared
    effects (see the module docstring); ``None`` when some prepared effect may be covered."""
    for declared in spec.effects:
        if coverage(grant, declared) == "none":
            return outside_grant(declared, detail=_BEFORE)
    return None


def judge_write_first(spec: ToolSpec, grant: Grant, trail: CallTrail) -> None:
    """Admission's step 3 for a write: refuse what the grant cannot cover (the trail then
    says ``deny`` by the rule ``grant`` or ``spend``), else leave it to prepare.

    Raises:
        DeniedError: :func:`write_refusal`'s refusal.
    """
    refusal = write_refusal(spec, grant)
    if refusal is not None:
        trail.decision, trail.rule = "deny", "spend" if refusal.reason == "spend" else "grant"
        raise refusal
    trail.decision, trail.rule = "allow", "prepare"


def input_named(
    spec: ToolSpec, values: Mapping[str, Any]
) -> tuple[tuple[Effect, ...], tuple[Effect, ...]]:
    """What the validated input ``values`` of a call of the write tool ``spec`` names: the
    records (each declared ``read`` or ``write`` whose placeholders all name input fields,
    resolved from ``values``), for the grant to judge; and for the rules, every declared
    effect so resolved when it can be, the others as declared (a pattern, which a rule with
    targets names only wholly inside them). A value that cannot fill an effect leaves it as
    declared."""
    inputs = set(spec.input_model.model_fields)
    named: list[Effect] = []
    judged: list[Effect] = []
    for declared in spec.effects:
        if declared.placeholders and declared.placeholders <= inputs:
            try:
                resolved = declared.resolve_all(values)
            except EffectArgumentError:
                pass
            else:
                named += resolved if declared.kind in _RECORDS else ()
                judged += resolved
                continue
        judged.append(declared)
    return tuple(named), tuple(judged)


def amountless_denials(approvals: ApprovalPolicy) -> ApprovalPolicy:
    """The ``deny`` rules of ``approvals`` that judge a call without its amount: those with
    neither ``min_amount`` nor ``currency`` (a matching ``deny`` decides whatever else
    matches, so leaving the other rules out changes no denial by these)."""
    rules = approvals.rules
    return ApprovalPolicy(
        rules=tuple(
            r for r in rules if r.action == "deny" and r.min_amount is None and r.currency is None
        )
    )
