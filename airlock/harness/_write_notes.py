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
from airlock.harness._results import KeptNotes, byte_size, compact

__all__ = ["WRITE_KEPT", "write_notes"]

WRITE_KEPT: Final = (
    "the change (or batch) it answers for and where it stands are named here all the same: "
    "do not call the tool again for it"
)
"""What a refusal that keeps a write's notes says of them."""
_IDS: Final = 4
"""Identifiers of a receipt kept, at most: what names the effect in the system of record."""
_ID_BYTES: Final = 128
"""Longest identifier kept (a preview id, a batch id, a receipt's id), in bytes of the
compact JSON the model is given (a control character escapes to six)."""
_KEY_BYTES: Final = 64
_LEAST_BYTES: Final = 384
"""Largest smallest note: the status, the preview or batch id and as much of a receipt's
identifiers as fits (so a refusal once the byte budget is used up stays within its cap)."""


def write_notes(result: ModelResult) -> KeptNotes:
    """The notes ``result`` (an answer about a write or a batch, made by the harness) keeps
    when it is refused: most complete first, each bounded whatever the write's size (see
    :func:`~airlock.harness._results.sized`), the last under :data:`_LEAST_BYTES`. The
    status is the answer's own, or its error code (``denied``...); a receipt is kept by its
    identifiers (``id``, ``..._id``), so a resume past the byte budget still gives the same
    receipt in short, as far as it fits."""

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
    named = {k: found[k] for k in ("preview_id", "batch_id") if _short(found.get(k), _ID_BYTES)}
    if not named:
        return ()
    status = found.get("status") if _short(found.get("status"), _KEY_BYTES) else result.code
    least: dict[str, object] = {"status": status} if status is not None else {}
    least.update(named)
    receipt = _receipt_ids(found.get("receipt"))
    more = dict(least)
    if receipt:
        more["receipt"] = receipt
    if _short(found.get("tool"), _ID_BYTES):
        more["tool"] = found["tool"]
    counts = found.get("counts")
    if isinstance(counts, dict) and all(isinstance(n, int) for n in counts.values()):
        more["counts"] = {str(state)[:32]: n for state, n in list(counts.items())[:16]}
    # The smallest keeps the receipt's identifiers one by one, as far as they fit.
    kept: dict[str, object] = {}
    for key, value in receipt.items():
        if byte_size(compact({**least, "receipt": {**kept, key: value}})) > _LEAST_BYTES:
            break
        kept[key] = value
    if kept:
        least["receipt"] = kept
    return (more, least) if more != least else (least,)


def _receipt_ids(receipt: object) -> dict[str, object]:
    if not isinstance(receipt, dict):
        return {}
    ids = {
        key: value
        for key, value in receipt.items()
        if isinstance(key, str)
        and (key == "id" or key.endswith("_id"))
        and _short(key, _KEY_BYTES)
        and (_short(value, _ID_BYTES) or (type(value) is int and abs(value) < 2**63))
    }
    return dict(list(ids.items())[:_IDS])


def _short(value: object, limit: int) -> bool:
    """Whether ``value`` is a string of at most ``limit`` bytes as the model is given it."""
    return isinstance(value, str) and 0 < byte_size(compact(value)) - 2 <= limit
