"""What the model is told when a program did not end as the program's own doing: the host
failed around it (an input it can no longer give, an artifact store that cannot take its
files), or the ledger stored its proposals as previews but could not hold them as one batch.
Each answer carries the program's notes, so what it proposed is never left out."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from airlock.harness._model_tools import ModelResult
from airlock.harness._results import failure
from airlock.sandbox import ArtifactStoreFailed, InputRefused
from airlock.tools import LedgerError, Preview

__all__ = ["host_failure", "unheld", "unheld_note"]


def host_failure(
    exc: InputRefused | ArtifactStoreFailed, notes: Mapping[str, object]
) -> ModelResult:
    """The model's answer when the host failed around a program: an input it can no longer
    give (by the input's name, never its host path: the operator's), or an artifact store
    that could not take the files the program left; ``notes`` (what it proposed) are added
    as they are."""
    if isinstance(exc, ArtifactStoreFailed):
        return failure(
            "sandbox_unavailable",
            "the program ran, but the host could not store the files it left in /out, so "
            "its result is lost; this is the host's fault, not the program's: tell the "
            "user. A program that writes nothing to /out may still run",
            reason="artifact_store",
            extra=notes,
        )
    if exc.reason == "size":  # its message names sizes and the input, no host path
        return failure(
            "limit_exceeded",
            exc.message,
            limit="inputs",
            size_bytes=exc.size_bytes,
            limit_bytes=exc.limit_bytes,
            extra=notes,
        )
    return failure(
        exc.code,
        f"the input {exc.name!r} is not available any more (it is {_GONE[exc.reason]} on "
        "the host); the program did not run, and no program can fix it: tell the user the "
        f"file {exc.name!r} is not available",
        input=exc.name,
        reason=exc.reason,
        extra=notes,
    )


_GONE: Final[dict[str, str]] = {
    "missing": "gone",
    "unreadable": "not readable",
    "link": "a link now",
    "kind": "no regular file or directory now",
    "name": "misnamed",
    "grant": "outside the grant",
}


def unheld_note(previews: Sequence[Preview], exc: LedgerError) -> dict[str, object]:
    """The proposals note of a program whose previews the ledger stored, but could not
    hold as one batch: they wait for no approval, and the model must not think them
    pending (nor that nothing was written)."""
    return {
        "status": "not_held",
        "count": len(previews),
        "preview_ids": [p.id for p in previews],
        "message": f"the program proposed {len(previews)} change(s), stored as previews, but "
        f"{exc.store} could not hold them as one batch, so they do not wait for approval; "
        "tell the user, and do not propose them again until the operator has checked it",
    }


def unheld(result: ModelResult, exc: LedgerError) -> ModelResult:
    """A program's ``result`` when the ledger could not hold its proposals as one batch
    (its notes say so): a program's own error keeps its code; a value that came back is
    kept, under the ledger's code."""
    if result.is_error:
        return result
    return failure(
        exc.code,
        f"the program ran, but {exc.store} cannot be used right now, so the changes it "
        "proposed do not wait for approval (see proposals); its value is under value",
        retryable=exc.retryable,
        extra=json.loads(result.content),
    )
