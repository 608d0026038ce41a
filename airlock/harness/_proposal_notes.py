"""The one short note a program's result carries about what it proposed (under
``proposals``): the batch its new proposals wait in, the changes it proposed that were
already committed in the run (told as such, in no batch and no total), or where its
proposals wait when the ledger could not hold them as one batch. Never every preview: a
batch note has ids, count and totals, and an answer too large for the model keeps the note
without its ``preview_ids`` (:func:`~airlock.harness._execute_code.kept_notes`), so each list
here that is not ``preview_ids`` has a bounded length."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from airlock.tools import Batch, LedgerError, Preview, spend_totals

__all__ = ["batch_note", "committed_note", "split_committed", "unheld_note"]

COMMITTED_IDS: Final = 10
"""Preview ids of already committed changes a note names (it counts them all)."""


def split_committed(previews: Sequence[Preview]) -> tuple[list[Preview], list[Preview]]:
    """The previews a batch should hold (new, in order), and those already committed in the
    run (proposing the same intent again answers its committed preview: nothing to hold)."""
    fresh = [p for p in previews if p.state != "committed"]
    return fresh, [p for p in previews if p.state == "committed"]


def batch_note(
    batch: Batch, previews: Sequence[Preview], committed: Sequence[Preview] = ()
) -> dict[str, object]:
    """The note of ``previews`` held as ``batch``; ``committed``, proposed too, were
    committed in the run before."""
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
    return _with_committed(note, committed)


def committed_note(committed: Sequence[Preview]) -> dict[str, object]:
    """The note of a program whose every proposal was committed in the run before: no batch
    is made, and nothing waits."""
    return _with_committed(
        {
            "status": "already_committed",
            "message": "nothing new was proposed, no batch was made, and nothing waits for "
            "approval",
        },
        committed,
    )


def unheld_note(
    previews: Sequence[Preview],
    exc: LedgerError,
    *,
    held: bool,
    committed: Sequence[Preview] = (),
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
    return _with_committed(note, committed)


def _with_committed(note: dict[str, object], committed: Sequence[Preview]) -> dict[str, object]:
    if not committed:
        return note
    note["already_committed"] = len(committed)
    note["already_committed_ids"] = [p.id for p in committed[:COMMITTED_IDS]]
    listed = "" if len(committed) <= COMMITTED_IDS else f" (the first {COMMITTED_IDS})"
    note["message"] = (
        f"{note['message']}. {len(committed)} proposed change(s) were already committed in "
        f"this run, so they were not sent again and are in no batch nor total; "
        f"already_committed_ids names them{listed}, and resuming one (write_status) answers "
        "its receipt. Do not propose them again"
    )
    return note
