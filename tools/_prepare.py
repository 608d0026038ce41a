"""Running a write tool's ``prepare`` and telling the model what became of its call."""

from __future__ import annotations

import logging

import anyio
from pydantic import BaseModel, ValidationError

from airlock.policies import Principal
from airlock.tools._admission import Admission
from airlock.tools._arguments import secret_fields_of
from airlock.tools._egress import checked_invoke, reach_of
from airlock.tools._errors import NotFoundError, ToolError, ToolTimeoutError, UpstreamError
from airlock.tools._preview import Preview, canonical_json
from airlock.tools._step_effect import contract_of
from airlock.tools._step_text import (
    argument_secrets,
    failure_detail,
    failure_forms,
    failure_trace,
    kept_text,
)
from airlock.tools._worker_threads import WorkerThread, thread_timeout

__all__ = ["model_message", "run_prepare"]

_log = logging.getLogger("airlock.writes")


async def run_prepare(admission: Admission, principal: Principal, *, budget: float) -> BaseModel:
    """The effect the write tool's ``prepare`` computes for the admitted call's arguments,
    within ``budget`` seconds, under the runtime check of the tool's declarations (prepare
    may reach the tool's destinations, and write no file).

    Raises:
        ToolError: prepare's own error (``not_found`` always with the one standard
            message, ...); ``timeout`` (a sync prepare's thread runs on: the error says
            when it ends); ``upstream`` for anything unexpected (a TimeoutError of
            prepare's own too), an effect that does not fit the effect model, or a tool
            (or the process) with too many sync calls running past their timeouts;
            ``denied`` when it reached what the tool
            does not declare (the call's trail says what). The outcome is always ``error``:
            prepare changes nothing.
    """
    spec = admission.spec
    contract = contract_of(spec)
    if budget <= 0:
        raise ToolTimeoutError(
            "the run's time budget is used up; finish with what you have",
            seconds=0.0,
            outcome="error",
        )
    check = reach_of(spec).check(phase="prepare", tenant=principal.tenant_id)
    # A sync prepare in a worker thread counted against the tool once its deadline passes
    # (it runs on: a thread cannot be stopped), and refused when the tool (or the process)
    # has too many such.
    thread = WorkerThread(spec)
    try:
        # (move_on_after, not fail_after: a TimeoutError of prepare's own, a socket's, is
        # an error of prepare like any other, not its deadline passing)
        with anyio.move_on_after(budget) as scope:
            prepare = thread.calling(contract.prepare)
            effect = await checked_invoke(check, prepare, admission.input, principal)
    except ToolError as exc:
        denial = check.denial(admission.trail)
        if denial is not None:  # what it tried and was refused is why it failed
            raise denial from exc
        if isinstance(exc, NotFoundError):  # as a read handler's (tools/_execute.py):
            # one canonical answer, so another tenant's record reads exactly like a missing
            # one; what prepare said goes to the operator's detail.
            raise NotFoundError(detail=exc.detail or exc.message) from None
        raise
    except Exception as exc:
        denial = check.denial(admission.trail)
        if denial is not None:
            raise denial from exc
        # Its text may echo the call's Secret() arguments: logged and kept without them.
        forms = failure_forms(admission.values, spec.secret_fields, admission.trail)
        _log.warning(
            "prepare of %s raised %s:\n%s",
            spec.name,
            type(exc).__name__,
            failure_trace(exc, forms),
        )
        raise UpstreamError(
            "preparing the change failed; nothing was changed",
            detail=failure_detail(exc, forms),
        ) from exc
    if scope.cancelled_caught:
        # prepare changes nothing, so running out of time leaves nothing undecided; its
        # thread, if it runs on, is the error's to tell (and a denial's cause's)
        timeout = thread_timeout(thread, budget, outcome="error")
        denial = check.denial(admission.trail)
        if denial is not None:
            raise denial from timeout
        raise timeout
    denial = check.denial(admission.trail)
    if denial is not None:  # prepare caught the refusal itself: the call fails all the same
        raise denial
    model = contract.effect_model
    if not isinstance(effect, model):
        try:
            effect = model.model_validate(effect, from_attributes=True)
        except ValidationError as exc:  # (its text, so kept, names no value it was given)
            raise UpstreamError(
                "preparing the change failed; nothing was changed",
                detail=kept_text(
                    f"prepare returned something that is not a {model.__name__}: "
                    f"{failure_detail(exc, ())}",
                    (),
                ),
            ) from None
    _check_stored_form(model, effect)
    return effect


def _check_stored_form(model: type[BaseModel], effect: BaseModel) -> None:
    """A person approves the effect's JSON form, and commit rebuilds the effect from it: an
    effect that the form cannot hold (NaN) or that it rebuilds differently is refused here,
    before anything is stored.

    Raises:
        UpstreamError: the effect does not come back whole from its JSON form.
    """
    try:
        rebuilt = model.model_validate_json(canonical_json(effect.model_dump(mode="json")))
    except (TypeError, ValueError) as exc:  # ValidationError is a ValueError
        why = failure_detail(exc, argument_secrets(effect, secret_fields_of(model)))
    else:
        if rebuilt == effect:
            return
        why = "it rebuilds a different effect"
    raise UpstreamError(
        "preparing the change failed; nothing was changed",
        detail=kept_text(f"the {model.__name__} prepared cannot be stored as JSON: {why}", ()),
    )


def model_message(preview: Preview, now: float) -> str:
    """What the model sees: the effect in short, the preview id, and what happens next."""
    if preview.state == "committed":
        return f"already done: {preview.summary} (preview {preview.id})"
    if preview.state in ("approved", "sending", "unknown"):
        return (
            f"approved by policy rule {preview.rule!r}: {preview.summary} (preview "
            f"{preview.id}); it is being committed, do not call this tool again for it"
        )
    if preview.state in ("denied", "failed"):
        return f"{preview.summary} (preview {preview.id}) was {preview.state}; do not retry it"
    minutes = max(0, round((preview.expires - now) / 60))
    return (
        f"needs approval: {preview.summary} (preview {preview.id}, rule {preview.rule!r}, "
        f"expires in {minutes} min); wait for a person, do not call this tool again for it"
    )
