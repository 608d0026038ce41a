"""A write's declared effects against the grant, judged before its ``prepare`` reads anything.

A write tool's effects are resolved from what ``prepare`` computes, and the grant judges them
then (:func:`~airlock.tools._admission.authorize`). But prepare reads the system of record:
run first under a grant that can never allow the write, it would answer ``not_found`` for a
missing record and leave ``denied`` to one that exists, telling the model which records
exist, and it would read records the grant does not cover. So admission refuses such a call
first, with the ``denied`` the judgement after prepare gives (:func:`outside_grant`):

- a ``read`` or ``write`` whose placeholders all name input fields
  (``write("billing:refund/{invoice_id}")`` and an ``invoice_id`` input) is resolved from
  the validated input and judged exactly: prepare names the record by that field. An input
  value that cannot fill it leaves its pattern to judge;
- every other effect by its pattern (:func:`~airlock.policies.coverage`): a grant with no
  effect of its kind that may share a target with it, or a spend without a limit in its
  currency (in any currency, for ``currency="{field}"``), covers no call of the tool.

The judgement after prepare stands as it is: it judges what prepare computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airlock.policies import Effect, EffectArgumentError, Grant, coverage
from airlock.tools._errors import DeniedError
from airlock.tools._spec import ToolSpec

if TYPE_CHECKING:
    from airlock.tools._admission import CallTrail

__all__ = ["judge_write_first", "outside_grant", "write_refusal"]

_RECORDS = ("read", "write")
"""Kinds whose placeholders name records by id, judged exactly when the input fills them."""
_BEFORE = "judged on the declared effects and the input, before prepare ran"


def outside_grant(effect: Effect, *, detail: str | None = None) -> DeniedError:
    """The refusal of a call one of whose effects, ``effect``, the grant does not cover."""
    return DeniedError(
        f"{effect} is outside this run's grant; do not retry it",
        reason="spend" if effect.kind == "spend" else "effect",
        detail=detail,
    )


def write_refusal(spec: ToolSpec, values: Mapping[str, Any], grant: Grant) -> DeniedError | None:
    """Why ``grant`` covers no call of the write tool ``spec`` with the validated input
    ``values``, judged from its declared effects (see the module docstring); ``None`` when
    some prepared effect may be covered."""
    inputs = set(spec.input_model.model_fields)
    for declared in spec.effects:
        if declared.kind in _RECORDS and declared.placeholders and declared.placeholders <= inputs:
            try:
                outside = grant.uncovered(declared.resolve_all(values))
            except EffectArgumentError:
                pass  # not an id this input can name: the pattern judges
            else:
                if outside is None:
                    continue
                return outside_grant(outside, detail=_BEFORE)
        if coverage(grant, declared) == "none":
            return outside_grant(declared, detail=_BEFORE)
    return None


def judge_write_first(
    spec: ToolSpec, values: Mapping[str, Any], grant: Grant, trail: CallTrail
) -> None:
    """Admission's step 3 for a write: refuse what the grant cannot cover (the trail then
    says ``deny`` by the rule ``grant`` or ``spend``), else leave it to prepare.

    Raises:
        DeniedError: :func:`write_refusal`'s refusal.
    """
    refusal = write_refusal(spec, values, grant)
    if refusal is not None:
        trail.decision, trail.rule = "deny", "spend" if refusal.reason == "spend" else "grant"
        raise refusal
    trail.decision, trail.rule = "allow", "prepare"
