"""What the model is told when a program did not end as the program's own doing: the host
failed around it (an input it can no longer give, an artifact store that cannot take its
files), or the ledger stored its proposals as previews but could not hold them as one batch
(they then wait as the session's paused writes: :mod:`airlock.harness._proposal_notes`).
Each answer carries the program's notes, so what it proposed is never left out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from airlock.harness._model_tools import ModelResult
from airlock.harness._results import failure
from airlock.sandbox import ArtifactStoreFailed, InputRefused
from airlock.tools import LedgerError

__all__ = ["host_failure", "unheld"]


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


def unheld(result: ModelResult, exc: LedgerError) -> ModelResult:
    """A program's ``result`` when the ledger could not hold its proposals as one batch
    (its proposals note, :func:`~airlock.harness._proposal_notes.unheld_note`, says where
    they wait): a program's own error keeps its code; a value that came back is kept, under
    the ledger's code, and not retryable (running the program again proposes the same
    changes, which wait already)."""
    if result.is_error:
        return result
    return failure(
        exc.code,
        f"the program ran, but {exc.store} could not hold the changes it proposed as one "
        "batch: the proposals note says where they wait. Its value is under value; do not "
        "run the program again for them",
        retryable=False,
        extra=json.loads(result.content),
    )
