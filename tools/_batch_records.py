"""The records of a batch: the previews one program proposed, and where each item stands.

See :mod:`airlock.tools._batches` for how batches are made, approved and committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from airlock.policies import Principal
from airlock.tools._json import JSONObject

__all__ = ["Batch", "BatchItem", "BatchItemState"]

BatchItemState = Literal[
    "waiting", "approved", "sending", "committed", "denied", "expired", "failed", "unknown"
]
"""Where one item of a batch stands: ``waiting`` for approval, ``approved`` and not yet
committed, ``committed`` (its receipt is stored), ``denied`` by a person, ``expired`` before
it was committed, ``failed`` (the system refused it), or ``sending``/``unknown`` while a send
is in flight or undecided."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """The previews one program proposed, in the order it proposed them."""

    id: str
    """``pb_...``: what the model sees and what an approver names."""
    run_id: str
    principal: Principal
    """Who the run acts for; only the same principal's session may commit its items."""
    items: tuple[str, ...]
    """The preview ids, in the order the program proposed them."""
    fingerprint: str
    """Hash over the items' fingerprints in order (:func:`batch_fingerprint`)."""
    created: float


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchItem:
    """One item of a batch and where it stands."""

    preview_id: str
    tool: str
    summary: str
    state: BatchItemState
    code: str | None = None
    """The error code of an item that did not go through (``preview_expired``...)."""
    receipt: JSONObject | None = None
    """The system of record's receipt, for a committed item."""
    approved_now: bool = False
    """Whether the call that returned this item approved it (:func:`approve_batch`): not an
    item someone else approved meanwhile, nor one approved before."""
