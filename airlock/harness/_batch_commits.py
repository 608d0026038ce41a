"""Committing the items of a batch a session holds: each approved item once, with its own
key, a few at a time; an item the session's authority no longer allows is denied instead
(:class:`~airlock.harness._commit_authority.CommitAuthority`), or, when an earlier send of
it got no definite answer, left to reconcile and not resent; and, with a deadline (the
session's settling, a model's ``write_status``), no send started after it (one in progress
is never cancelled). An item whose key the system of record answered for another change (a
receipt mismatch) is never sent again: it waits for an operator."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import anyio

from airlock.harness._commit_authority import CommitAuthority, Refusal
from airlock.tools import (
    Batch,
    BatchItem,
    ConflictError,
    Preview,
    ReceiptMismatchError,
    ToolError,
    WritePath,
    batch_items,
)

__all__ = ["COMMITS_AT_ONCE", "Committed", "commit_items"]

COMMITS_AT_ONCE: Final = 8
"""Items of one batch committed concurrently (each still sends once, with its own key)."""


@dataclass(frozen=True, slots=True)
class Committed:
    """Where a batch's items stand after its approved items were committed."""

    items: tuple[BatchItem, ...]
    refused: dict[str, Refusal]
    """The items denied because the session may no longer make them (nothing was sent for
    them), by preview id."""
    not_resent: dict[str, Refusal] = field(default_factory=dict)
    """The items the session may no longer make whose earlier send got no definite answer
    (``unknown``: it may have acted), by preview id: not resent; reconcile settles them."""
    unsent: int = 0
    """Items whose send (or resend) did not start: the deadline came first."""
    unjudged: dict[str, ConflictError] = field(default_factory=dict)
    """The items whose recorded effects do not read back, so nothing can judge them, by
    preview id: neither sent nor denied; they wait for the operator."""
    mismatched: dict[str, ReceiptMismatchError] = field(default_factory=dict)
    """The ``unknown`` items whose key the system of record answered for another change, by
    preview id: never sent again (the same key fetches the same answer); an operator looks."""


async def commit_items(
    writes: WritePath,
    batch: Batch,
    authority: CommitAuthority,
    *,
    resend: bool,
    until: float | None = None,
) -> Committed:
    """Commit every approved item of ``batch`` once (and resend each ``unknown`` one with
    its key, when ``resend``), at most :data:`COMMITS_AT_ONCE` at a time; where the items
    stand afterwards. No send starts after ``until`` (on the :func:`time.monotonic` clock):
    those not started stay as they were, for a later call, and ``unsent`` counts them. An
    item whose effects do not read back is left as it is (``unjudged``); the others are
    still committed.

    Raises:
        ToolError: the batch no longer matches what was proposed (``approval_mismatch``).
        LedgerError: the ledger cannot be used.
    """
    refused: dict[str, Refusal] = {}
    not_resent: dict[str, Refusal] = {}
    unjudged: dict[str, ConflictError] = {}
    sends: list[Preview] = []
    for preview in _previews(writes, batch):
        try:
            refusal = authority.refusal(writes, preview)
        except ConflictError as exc:
            # One item nothing can judge must not hold back the items a person approved
            # with it and this session may still make.
            unjudged[preview.id] = exc
            continue
        if refusal is not None:
            after = authority.refuse(writes, preview, refusal)
            if after.state == "denied":
                refused[preview.id] = refusal
            elif after.state == "unknown":  # a send may have acted: it cannot be denied
                not_resent[preview.id] = refusal
        elif preview.state == "approved" or (resend and preview.state == "unknown"):
            sends.append(preview)
    mismatched: dict[str, ReceiptMismatchError] = {}
    unsent = await _send(writes, sends, authority, until, mismatched)
    items = batch_items(writes.ledger, batch.id, now=writes.clock())
    return Committed(items, refused, not_resent, unsent, unjudged, mismatched)


def _previews(writes: WritePath, batch: Batch) -> list[Preview]:
    batch_items(writes.ledger, batch.id, now=writes.clock())  # checks the batch is intact
    found = (writes.ledger.preview(preview_id) for preview_id in batch.items)
    return [preview for preview in found if preview is not None]


async def _send(
    writes: WritePath,
    previews: Sequence[Preview],
    authority: CommitAuthority,
    until: float | None,
    mismatched: dict[str, ReceiptMismatchError],
) -> int:
    """Commit ``previews`` concurrently; how many sends did not start (``until`` came). The
    items answered for another change go to ``mismatched``."""
    gate = anyio.CapacityLimiter(COMMITS_AT_ONCE)
    late = 0
    failed: list[Exception] = []

    async def one(preview: Preview) -> None:
        nonlocal late
        async with gate:
            if until is not None and time.monotonic() >= until:
                late += 1
                return
            try:
                await writes.commit(preview.id, preview.fingerprint, authority.principal)
            except ReceiptMismatchError as exc:  # (at once, sending nothing, once marked)
                mismatched[preview.id] = exc
            except ToolError:
                pass  # the item's state says how it ended (unknown, expired, failed)
            except Exception as exc:  # the ledger, say: raised once every send has ended
                failed.append(exc)

    async with anyio.create_task_group() as group:
        for preview in previews:
            group.start_soon(one, preview)
    if failed:
        raise failed[0]
    return late
