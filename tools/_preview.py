"""The records of the write path: a preview of an exact effect, its approval, its receipt.

A write moves through explicit states, each stored in the ledger::

    prepared ──approve──► approved ──claim──► sending ──receipt──► committed
        │                                        │  └──refused───► failed
        └──deny──► denied                        └──timeout/crash─► unknown ──resend/query──┘

``denied`` is a person's refusal (of a policy approval no commit used, too) or a proposal its
program withdrew (cancelled while it was prepared; only a preview that proposal stored itself,
and never one a person approved): never approved again, never committed.

``committed`` holds exactly when a receipt is stored under the preview's idempotency key.
``unknown`` (and a ``sending`` step whose sender died) means the system of record may have
acted; only a resend with the same key or a query of the system resolves it.

The idempotency key and the fingerprint are SHA-256 over a canonical JSON encoding (sorted
keys, no spaces, UTF-8, no NaN), so equal inputs hash equally in every process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

from airlock.policies import Principal
from airlock.tools._json import JSONObject

__all__ = [
    "LIVE_STATES",
    "STEP_STATES",
    "Approval",
    "ApproverKind",
    "Preview",
    "Receipt",
    "ResolvedBy",
    "StepEvent",
    "StepState",
    "canonical_json",
    "fingerprint",
    "idempotency_key",
]

StepState = Literal["prepared", "approved", "denied", "sending", "committed", "failed", "unknown"]
"""Where a write stands; see the module docstring for the transitions."""
STEP_STATES: Final[tuple[StepState, ...]] = get_args(StepState)
LIVE_STATES: Final[frozenset[StepState]] = frozenset(
    {"prepared", "approved", "sending", "committed", "unknown"}
)
"""States that hold the idempotency key: one live preview per key. ``denied`` and ``failed``
ended without an effect, so the same intent may be prepared again."""
ApproverKind = Literal["policy", "person"]
ResolvedBy = Literal["send", "resend", "query"]
"""How a receipt was obtained: the first send, a resend with the same key, or a query."""


def canonical_json(value: object) -> bytes:
    """``value`` as canonical JSON bytes: sorted keys, no whitespace, UTF-8, NaN refused.

    Raises:
        ValueError: ``value`` holds NaN or infinity.
        TypeError: ``value`` holds something that is not a JSON value.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def idempotency_key(run_id: str, tool: str, intent: Mapping[str, object]) -> str:
    """The key of one intent: a hash of the run, the tool and the intent fields' values.

    Computed by the write path from validated input, never chosen by the model, so a retried
    call of the same intent in the same run reuses the key and cannot act twice.
    """
    body = canonical_json({"intent": dict(intent), "run_id": run_id, "tool": tool})
    return "ik_" + hashlib.sha256(body).hexdigest()[:48]


def fingerprint(tool: str, effect: JSONObject, principal: Principal, key: str) -> str:
    """What an approval binds to: a hash of the tool, the exact effect, who, and the key.

    Only the principal's identity (user and tenant) counts, not the session's scopes.
    """
    body = canonical_json(
        {
            "effect": effect,
            "key": key,
            "principal": {"tenant_id": principal.tenant_id, "user_id": principal.user_id},
            "tool": tool,
        }
    )
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Preview:
    """The exact effect a write would have, as code computed it, waiting to be committed."""

    id: str
    """``pv_...``: what the model sees and what an approver names."""
    run_id: str
    tool: str
    principal: Principal
    """Who the run acts for; only the same principal's session may commit."""
    effect: JSONObject
    """The effect as the tool's ``prepare`` computed it (never model-written text)."""
    effects: tuple[str, ...]
    """The resolved declared effects, e.g. ``spend(1200 USD)``, as approval rules saw them."""
    summary: str
    """A short line for the model and the approver."""
    key: str
    """Idempotency key: hash of run id, tool and intent fields."""
    fingerprint: str
    """Hash of tool, effect, principal and key; an approval binds to it."""
    rule: str
    """The approval rule that decided (``default`` when none matched)."""
    created: float
    expires: float
    state: StepState
    updated: float
    attempts: int = 0
    """How many times a send was claimed (the first send and every resend)."""
    owner: str | None = None
    """``host:pid`` of the process that claimed the last send."""
    lease_until: float | None = None
    """Until when that process may still be sending; past it a ``sending`` step is stale."""
    error: str | None = None
    """Code (and short reason) of the failure that ended a ``failed`` or ``unknown`` step."""

    def expired(self, now: float) -> bool:
        """Whether the preview is past its expiry at ``now``."""
        return now >= self.expires

    def computed_fingerprint(self) -> str:
        """The fingerprint recomputed from the stored fields (differs after tampering)."""
        return fingerprint(self.tool, self.effect, self.principal, self.key)


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval:
    """Who approved which fingerprint of a preview, when, and by which rule or person."""

    preview_id: str
    fingerprint: str
    """The fingerprint the approver saw; a commit must present the same one."""
    kind: ApproverKind
    """``policy`` (an ``allow`` rule) or ``person``."""
    approver: str
    """The rule id for a policy approval; the person's id otherwise. Never from the run."""
    rule: str
    """The rule that allowed or asked."""
    at: float
    reason: str = ""
    consumed_at: float | None = None
    """When a commit used the approval; an approval is consumed once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    """Proof from the system of record that an effect happened, stored under its key."""

    key: str
    preview_id: str
    tool: str
    data: JSONObject
    """The system of record's answer, projected onto the tool's receipt model."""
    stored_at: float
    resolved_by: ResolvedBy
    replayed: bool = False
    """Set on a receipt returned from the ledger instead of from a send."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEvent:
    """One transition in a preview's history: from which state to which, by whom, how."""

    preview_id: str
    at: float
    from_state: StepState | None
    to_state: StepState
    actor: str
    """``host:pid``, a person, or ``policy:RULE``."""
    how: str
    """Why or how: ``approved by policy``, ``resent with the same key``, an error code."""
