"""A session's authority, judged again before it commits a paused write.

A write paused under one grant may be finished by a session with less: another process's
:meth:`Harness.resume_session` for a principal whose write scope was taken away, a narrower
grant, or a policy whose rules now deny it. The commit itself checks only who the principal
is (user and tenant), so before a session commits a paused write (or runs an approved read)
it judges the tool and the effects prepare resolved the way admission and prepare judged
them: the principal's scope, the grant's scope, the grant's effects and spend limits
(:meth:`Grant.uncovered`), and the approval rules' ``deny``. A write they no longer allow is
denied through the write path's deny path (its step says ``denied`` and why) and nothing is
sent; one whose earlier send got no definite answer (``unknown``) cannot be denied and is
not resent either: reconcile settles it. Effects are read back as prepare resolved them
(:meth:`Effect.parse` with ``resolved``); ones that do not read back (another version wrote
them) are not judged, so the write is neither committed nor denied: it waits, the model is
told it cannot be committed now, and the operator's log says which.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from airlock.harness._model_tools import ModelResult
from airlock.harness._results import failure
from airlock.policies import ApprovalPolicy, Effect, Grant, Principal
from airlock.tools import (
    ConflictError,
    Preview,
    StepState,
    ToolError,
    ToolSpec,
    WritePath,
    authority_refusal,
)

__all__ = ["REFUSER", "CommitAuthority", "Refusal", "refused_answer"]

_log = logging.getLogger("airlock.harness")
REFUSER: Final = "airlock:grant"
"""Who the ledger says denied a write the session's authority no longer allows (the deny
path takes an approver id; this one is no person's)."""
_JUDGED: Final[frozenset[StepState]] = frozenset({"prepared", "approved", "unknown"})
"""States of a step that a commit would still claim or wait for: judged before it."""


class Refusal(NamedTuple):
    """Why the session may no longer commit a write."""

    reason: Literal["scope", "effect", "spend", "policy"]
    """As :class:`~airlock.tools.DeniedError` names it."""
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitAuthority:
    """The principal, grant and approval rules a session commits its paused writes under."""

    principal: Principal
    grant: Grant
    approvals: ApprovalPolicy
    _logged: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    """Steps whose effects did not read back that the operator's log named already."""

    def refusal(self, writes: WritePath, preview: Preview) -> Refusal | None:
        """Why this session may not commit ``preview`` now; ``None`` when it may, or when
        the step is past judging (committed, in flight, settled) or its tool is not
        registered here (the commit answers for those).

        Raises:
            ConflictError: its effects do not read back, so nothing can judge them: the
                step stays as it is, neither committed nor denied.
        """
        spec = writes.registry.get(preview.tool)
        if spec is None or preview.state not in _JUDGED:
            return None
        return self._judge(spec, preview)

    def _judge(self, spec: ToolSpec, preview: Preview) -> Refusal | None:
        # Admission's look-up hides a tool whose scope the principal lacks; then the grant's
        # scope, then what authorize() judges: the grant's effects and spends, the rules.
        if not self.principal.has_scope(spec.scope):
            return Refusal("scope", f"the principal no longer has scope {spec.scope!r}")
        if not self.grant.allows_scope(spec.scope):
            return Refusal("scope", f"the grant no longer has scope {spec.scope!r}")
        try:
            effects = tuple(Effect.parse(text, resolved=True) for text in preview.effects)
        except ValueError as exc:
            # Not as this version writes them: judging them would be a guess, and so would
            # denying a write a person approved. It waits for the operator.
            raise self._unjudged(preview, exc) from None
        refused = authority_refusal(spec, effects, self.grant, self.approvals)
        if refused is None:
            return None
        # "<effect> is outside this run's grant; do not retry it": refused_answer says the rest.
        outside = refused.message.split(";", 1)[0]
        if refused.reason == "spend":
            return Refusal("spend", outside)
        if refused.reason == "effect":
            return Refusal("effect", outside)
        return Refusal("policy", "an approval rule now denies it")

    def _unjudged(self, preview: Preview, why: ValueError) -> ConflictError:
        if preview.id not in self._logged:
            self._logged.add(preview.id)
            _log.warning(
                "run %s: %s (%s, %s) is left as it is, neither committed nor denied: its "
                "effects do not read back (%s); deny it (airlock approvals deny) or finish "
                "it with the version that wrote it",
                preview.run_id,
                preview.id,
                preview.tool,
                preview.state,
                str(why)[:300],
            )
        return ConflictError(
            "this change cannot be committed now: its recorded effects cannot be checked "
            "again by this version. It was neither committed nor denied and waits for the "
            "operator. Do not retry it or call the tool again for it; tell the user",
            outcome="unknown" if preview.state == "unknown" else "error",
            detail=f"preview {preview.id}: effects do not read back: {why}",
        )

    def refuse(self, writes: WritePath, preview: Preview, refusal: Refusal) -> Preview:
        """Deny ``preview`` (a step not sent yet) through the write path's deny path, so its
        step says why; the step as the ledger has it afterwards (``unknown`` stays as it is:
        a send may have acted; committed or in flight when another process got there
        first)."""
        if preview.state in ("prepared", "approved"):
            reason = f"this session may no longer make it: {refusal.text}"
            with contextlib.suppress(ToolError):  # moved meanwhile: the ledger says how
                return writes.deny(preview.id, approver=REFUSER, reason=reason)
        return writes.ledger.preview(preview.id) or preview


def refused_answer(preview: Preview, refusal: Refusal) -> ModelResult:
    """What the model is told about a paused write the session may no longer make."""
    sent = preview.state == "unknown"
    return failure(
        "denied",
        f"this session may no longer make this change ({refusal.text}); it was not "
        + (
            "sent again, and an earlier send may have acted: the operator's reconcile "
            "settles it. Do not retry it"
            if sent
            else "committed. Do not retry it"
        ),
        preview_id=preview.id,
        tool=preview.tool,
        reason=refusal.reason,
        # Only "unknown" tells the model something it must know (as from_tool_error says it).
        extra={"outcome": "unknown"} if sent else None,
    )


def denied_answer(preview: Preview, *, withdrawn: bool) -> ModelResult:
    """What the model is told about a paused write denied meanwhile: by a person, or
    ``withdrawn`` by the program that stored its preview first (the model's call of the same
    intent shared it), which is no judgement of the change: asking again proposes it anew."""
    if withdrawn:
        return failure(
            "denied",
            "the program that proposed this change first withdrew it, or its proposal "
            "failed, so it was not made; call the tool again if the change is still wanted",
            retryable=True,
            preview_id=preview.id,
        )
    reason = (preview.error or "no reason given").removeprefix("denied: ")
    told = f"a person denied this change ({reason[:200]}); do not retry it"
    return failure("denied", told, preview_id=preview.id)
