"""What an answer about a write keeps when it cannot be given whole: the model's view of a
paused write (``needs_approval``), of a commit (its receipt), of an intent already committed,
or of a batch, refused for its size or for the session's byte budget, still names the
preview or batch it is about and where it stands. A model told only "too large" would call
the tool again for a change that waits already, or never learn that it was made."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from airlock.harness._model_tools import ModelResult
from airlock.harness._results import KeptNotes

__all__ = ["WRITE_KEPT", "write_notes"]

WRITE_KEPT: Final = (
    "the change (or batch) it answers for and where it stands are named here all the same: "
    "do not call the tool again for it"
)
"""What a refusal that keeps a write's notes says of them."""
_IDS: Final = 4
"""Identifiers of a receipt kept, at most: what names the effect in the system of record."""
_ID_CHARS: Final = 128
"""Longest identifier kept (a preview id, a batch id, a receipt's id)."""


def write_notes(result: ModelResult) -> KeptNotes:
    """The notes ``result`` (an answer about a write or a batch, made by the harness) keeps
    when it is refused: most complete first, each small and bounded whatever the write's
    size (see :func:`~airlock.harness._results.sized`). The status is the answer's own, or
    its error code (``denied``...); a receipt is kept by its identifiers (``id``,
    ``..._id``), so a resume past the byte budget still gives the same receipt in short."""

    def notes() -> Sequence[Mapping[str, object]]:
        return _notes(result)

    return notes


def _notes(result: ModelResult) -> tuple[dict[str, object], ...]:
    try:
        found = json.loads(result.content)
    except ValueError:
        return ()
    if not isinstance(found, dict):
        return ()
    named = {key: found[key] for key in ("preview_id", "batch_id") if _short(found.get(key))}
    if not named:
        return ()
    status = found.get("status") if _short(found.get("status")) else result.code
    least: dict[str, object] = {"status": status} if status is not None else {}
    least.update(named)
    receipt = _receipt_ids(found.get("receipt"))
    if receipt:
        least["receipt"] = receipt
    more = dict(least)
    if _short(found.get("tool")):
        more["tool"] = found["tool"]
    counts = found.get("counts")
    if isinstance(counts, dict) and all(isinstance(n, int) for n in counts.values()):
        more["counts"] = {str(state)[:32]: n for state, n in list(counts.items())[:16]}
    return (more, least) if more != least else (least,)


def _receipt_ids(receipt: object) -> dict[str, object]:
    if not isinstance(receipt, dict):
        return {}
    ids = {
        key: value
        for key, value in receipt.items()
        if isinstance(key, str)
        and (key == "id" or key.endswith("_id"))
        and len(key) <= 64
        and (_short(value) or (type(value) is int and abs(value) < 2**63))
    }
    return dict(list(ids.items())[:_IDS])


def _short(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _ID_CHARS
