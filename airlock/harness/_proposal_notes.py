"""The one short note a program's result carries about what it proposed (under
``proposals``): the batch its new proposals wait in, the changes it proposed that were
already committed in the run or already wait in the session (told as such, in no new batch
and no total: each is committed once and told once, where it waits), the ones that ended
(denied, expired, failed) while the program ran, or where its
proposals wait when the ledger could not hold them as one batch. Never every preview: a
batch note has ids, count and totals, and an answer too large for the model keeps the note
without its ``preview_ids`` (:func:`~airlock.harness._execute_code.kept_notes`), so each list
here that is not ``preview_ids`` has a bounded length."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from airlock.tools import Batch, LedgerError, LedgerStore, Preview, spend_totals

__all__ = [
    "NOTHING_EARLIER",
    "Proposed",
    "as_now",
    "batch_item_note",
    "batch_item_unknown",
    "batch_note",
    "nothing_new_note",
    "split_proposed",
    "unheld_note",
]

EARLIER_IDS: Final = 10
"""Preview ids of changes proposed earlier that a note names (it counts them all)."""


@dataclass(frozen=True, slots=True)
class Proposed:
    """What one program proposed, by where each change stands. Proposing an intent again
    answers its live preview, so a change may be one the run committed, or one that waits
    already (a paused write or an item of an earlier batch of the session); and one that
    waited when proposed may have been committed or ended meanwhile."""

    fresh: Sequence[Preview] = ()
    """New, in order: what a new batch holds."""
    committed: Sequence[Preview] = ()
    waiting: Sequence[Preview] = ()
    ended: Sequence[Preview] = ()
    """Denied, expired or failed: a person or the session judged them while the program ran
    (proposing one again makes a new preview, for a person to judge again)."""


NOTHING_EARLIER: Final = Proposed()
"""A program that proposed nothing proposed before."""


def as_now(
    ledger: LedgerStore, previews: Sequence[Preview], held: Collection[str]
) -> list[Preview]:
    """``previews`` as ``ledger`` has them now, each of ``held`` read again once (as given
    where it cannot say: storing their batch fails then too, and says so). Only a change the
    session held may have moved since it was proposed: its settling runs while the program
    does; a preview the program made is in no batch nor pause yet (one query per proposal
    would block the event loop at every program's end)."""
    again = {p.id for p in previews if p.id in held}
    try:
        now = {pid: found for pid in again if (found := ledger.preview(pid)) is not None}
    except LedgerError:
        return list(previews)
    return [now.get(p.id, p) for p in previews]


_ENDED: Final = frozenset({"denied", "expired", "failed"})


def split_proposed(previews: Sequence[Preview], waiting_ids: Collection[str]) -> Proposed:
    """``previews`` (as the ledger has them now) split by where each stands;
    ``waiting_ids``: the previews the session holds already."""
    # One that ended while the session still holds it is told where it waits, once.
    held = [p for p in previews if p.state != "committed" and p.id in waiting_ids]
    rest = [p for p in previews if p.state != "committed" and p.id not in waiting_ids]
    return Proposed(
        fresh=[p for p in rest if p.state not in _ENDED],
        committed=[p for p in previews if p.state == "committed"],
        waiting=held,
        ended=[p for p in rest if p.state in _ENDED],
    )


def batch_note(
    batch: Batch, previews: Sequence[Preview], earlier: Proposed = NOTHING_EARLIER
) -> dict[str, object]:
    """The note of ``previews`` held as ``batch``; ``earlier``'s committed and waiting
    changes, proposed too, were proposed before."""
    count = len(batch.items)
    if all(p.state == "approved" for p in previews):  # an allow rule approved each
        note: dict[str, object] = {
            "status": "approved",
            "batch_id": batch.id,
            "count": count,
            "total": spend_totals(previews),
            "preview_ids": list(batch.items),
            "message": f"the program proposed {count} change(s), approved by policy; they are "
            "committed once the session resumes the batch. Do not propose or call them again",
        }
    else:
        minutes = max(0, round((min(p.expires for p in previews) - time.time()) / 60))
        note = {
            "status": "needs_approval",
            "batch_id": batch.id,
            "fingerprint": batch.fingerprint,
            "count": count,
            "total": spend_totals(previews),
            "preview_ids": list(batch.items),
            "expires_in_min": minutes,
            "message": f"the program proposed {count} change(s); they wait for a person to "
            "approve them as one batch. Tell the user, and do not propose or call them again",
        }
    return _with_earlier(note, earlier)


def batch_item_note(
    batch_id: str, preview: Preview, *, approved_by: Literal["policy", "person"] | None = None
) -> dict[str, object]:
    """What a direct call is answered with when its preview waits as an item of the
    session's batch ``batch_id`` (``prepared``, ``approved``, by ``approved_by`` when the
    ledger says, or ``sending``): it stays there, committed once and told once, with it.
    An ``unknown`` item is answered by :func:`batch_item_unknown`."""
    status = "already_waiting"
    if preview.state == "prepared":
        when = "it is committed once a person approves the batch"
    elif preview.state == "approved":
        by = f" by {'policy' if approved_by == 'policy' else 'a person'}" if approved_by else ""
        when = f"approved{by}, it is committed once the session settles or resumes the batch"
    else:
        status = "sending"
        when = "it is being sent now (by this session or another process)"
    return {
        "status": status,
        "batch_id": batch_id,
        "preview_id": preview.id,
        "tool": preview.tool,
        "summary": preview.summary,
        "message": f"this change already waits in this session as an item of batch {batch_id}, "
        f"proposed before by a program, so it is in no new pause: {when}, and told once where "
        "it waits. Do not propose or call it again",
    }


def batch_item_unknown(batch_id: str, preview: Preview) -> dict[str, object]:
    """The fields of the ``ambiguous_write`` answer to a direct call whose preview is an
    ``unknown`` item of the session's batch ``batch_id``: a send of it may have acted."""
    return {
        "message": "this change may or may not have happened: a send of it got no definite "
        f"answer. It waits as an item of batch {batch_id}, proposed before by a program: the "
        "session sends it again with the same key (never twice) when it settles or resumes "
        "the batch, a few times at most, then the operator's reconcile checks the system of "
        "record and settles it. Do not propose or call it again; tell the user its outcome "
        "is unknown",
        "batch_id": batch_id,
        "preview_id": preview.id,
        "tool": preview.tool,
        "summary": preview.summary,
        "outcome": "unknown",
    }


def nothing_new_note(earlier: Proposed) -> dict[str, object]:
    """The note of a program whose every proposal was committed in the run before, waits
    already or ended meanwhile: no batch is made."""
    if earlier.waiting:
        note = {"status": "already_waiting", "message": "nothing new was proposed"}
    else:
        note = {
            "status": "already_committed" if earlier.committed else "already_ended",
            "message": "nothing new was proposed, no batch was made, and nothing waits for "
            "approval",
        }
    return _with_earlier(dict(note), earlier)


def unheld_note(
    previews: Sequence[Preview],
    exc: LedgerError,
    *,
    held: bool,
    earlier: Proposed = NOTHING_EARLIER,
) -> dict[str, object]:
    """The note of a program whose previews the ledger stored, but could not hold as one
    batch: ``held``, each waits as a paused write of the session (committed by its
    settling once approved, like any); otherwise they stay prepared in the ledger, where
    the operator sees them, and this session commits none of them."""
    stored = (
        f"the program proposed {len(previews)} change(s), stored as previews, but "
        f"{exc.store} could not hold them as one batch"
    )
    if held:
        message = (
            f"{stored}, so each waits on its own as a paused write of this session: a person "
            "approves or denies each one (unless a rule approved it already), and the session "
            "commits each approved one once and tells you under settled_writes. Tell the "
            "user, and do not propose them again"
        )
    else:
        message = (
            f"{stored}, nor could this session hold them: they stay in the ledger as prepared "
            "previews, which the operator sees in approvals list, and this session will not "
            "commit them. Tell the user, and do not propose them again until the operator has "
            "checked it"
        )
    note: dict[str, object] = {
        "status": "not_held",
        "held": "each" if held else "none",
        "count": len(previews),
        "preview_ids": [p.id for p in previews],
        "message": message,
    }
    return _with_earlier(note, earlier)


def _with_earlier(note: dict[str, object], earlier: Proposed) -> dict[str, object]:
    if earlier.committed:
        note["message"] = (
            f"{note['message']}. {_named(note, 'already_committed', earlier.committed)} were "
            "already committed in this run, so they were not sent again and are in no batch "
            "nor total; resuming one (write_status) answers its receipt. Do not propose them "
            "again"
        )
    if earlier.waiting:
        note["message"] = (
            f"{note['message']}. {_named(note, 'already_waiting', earlier.waiting)} already "
            "wait in this session, proposed before as a paused write or in an earlier batch, "
            "so they are in no new batch nor total: each is committed once approved, and told "
            "once where it waits. Do not propose them again"
        )
    if earlier.ended:
        note["message"] = (
            f"{note['message']}. {_named(note, 'already_ended', earlier.ended)} were denied, "
            "expired or failed while the program ran, so they are in no batch nor total and "
            "nothing was sent for them. Tell the user, and do not propose them again without "
            "being asked"
        )
    return note


def _named(note: dict[str, object], key: str, previews: Sequence[Preview]) -> str:
    """Count ``previews`` under ``key`` and name the first of them under ``key``_ids; how
    the message says so."""
    note[key] = len(previews)
    note[f"{key}_ids"] = [p.id for p in previews[:EARLIER_IDS]]
    listed = "" if len(previews) <= EARLIER_IDS else f" (the first {EARLIER_IDS})"
    return f"{len(previews)} proposed change(s), named by {key}_ids{listed},"
