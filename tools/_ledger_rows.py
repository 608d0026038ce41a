"""The ledger's rows as records and back, the same for SQLite and PostgreSQL.

Both stores hold the same columns with the same JSON in text columns. Two rules hold for
both, here in one place:

* free text the ledger stores (a summary, an approval's reason, a step's error, how it moved
  and who moved it) goes in through :func:`ledger_text`: credentials are redacted with the
  audit log's :func:`~airlock.tools._redact.redact` (an exception's text may echo a request's
  ``Authorization`` header, and approvers read the ledger), and C0 control characters other
  than tab and newline are written as visible escapes (``\\x00``), because PostgreSQL refuses
  NUL in text and a store that refuses to record how a send ended leaves it ``sending``;
* a row that does not read back as its record (a column changed by hand, a bad restore)
  raises :class:`UnreadableRowError`, which each store turns into
  :class:`~airlock.tools.LedgerCorruptError` naming its database and the row
  (:func:`readable_rows`), never a pydantic or JSON error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from airlock.policies import Principal
from airlock.tools._batch_records import Batch
from airlock.tools._errors import LedgerCorruptError
from airlock.tools._ledger import StepRef
from airlock.tools._preview import (
    STEP_STATES,
    Approval,
    Preview,
    Receipt,
    StepEvent,
    StepState,
    canonical_json,
)
from airlock.tools._redact import escape_controls, redact

__all__ = [
    "UnreadableRowError",
    "approval_of",
    "batch_of",
    "event_of",
    "ledger_text",
    "preview_of",
    "preview_row",
    "readable_rows",
    "receipt_of",
    "state_of",
    "step_ref_of",
]

T = TypeVar("T")

_C0: Final = re.compile("[\x00-\x08\x0b-\x1f]")


def ledger_text(text: str) -> str:
    """``text`` as the ledger stores it: credentials redacted, C0 controls but tab and
    newline escaped."""
    return _C0.sub(lambda found: escape_controls(found.group()), redact(text))


class UnreadableRowError(Exception):
    """A row of ``table`` (``row`` its id or key) does not read back as its record."""

    def __init__(self, table: str, row: str, why: str) -> None:
        super().__init__(f"{table} {row!r}: {why}")
        self.table = table
        self.row = row
        self.why = why


@contextmanager
def readable_rows(path: str) -> Iterator[None]:
    """Raise an :class:`UnreadableRowError` from the block as ``ledger_corrupt`` naming the
    database at ``path`` (a file, or a URL without its password) and the row."""
    try:
        yield
    except UnreadableRowError as exc:
        raise LedgerCorruptError(
            f"the ledger {path!r} holds a row that does not read back: {exc.table} "
            f"{exc.row!r} ({exc.why}); restore that row from a copy of the ledger, or move "
            "it aside, and reconcile against the system of record",
            path=path,
        ) from exc


def _decoded(table: str, row: tuple[Any, ...], build: Callable[[], T]) -> T:
    try:
        return build()
    except (ValueError, TypeError, IndexError) as exc:  # pydantic's and json's are ValueErrors
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise UnreadableRowError(table, str(row[0]) if row else "?", why[:200]) from exc


def preview_row(p: Preview) -> tuple[object, ...]:
    return (
        p.id,
        p.run_id,
        p.tool,
        p.principal.user_id,
        p.principal.tenant_id,
        p.principal.model_dump_json(),
        canonical_json(p.effect).decode(),
        json.dumps(list(p.effects)),
        ledger_text(p.summary),
        p.key,
        p.fingerprint,
        p.rule,
        p.created,
        p.expires,
        p.state,
        p.updated,
        p.attempts,
        p.owner,
        p.lease_until,
        None if p.error is None else ledger_text(p.error),
    )


def state_of(value: object) -> StepState:
    if value not in STEP_STATES:
        raise ValueError(f"the ledger holds an unknown state {value!r}")
    return value


def step_ref_of(r: tuple[Any, ...]) -> StepRef:
    return _decoded("previews", r, lambda: StepRef(str(r[0]), str(r[1]), state_of(r[2])))


def preview_of(r: tuple[Any, ...]) -> Preview:
    return _decoded(
        "previews",
        r,
        lambda: Preview(
            id=str(r[0]),
            run_id=str(r[1]),
            tool=str(r[2]),
            principal=Principal.model_validate_json(r[5]),
            effect=json.loads(r[6]),
            effects=tuple(str(e) for e in json.loads(r[7])),
            summary=str(r[8]),
            key=str(r[9]),
            fingerprint=str(r[10]),
            rule=str(r[11]),
            created=float(r[12]),
            expires=float(r[13]),
            state=state_of(r[14]),
            updated=float(r[15]),
            attempts=int(r[16]),
            owner=None if r[17] is None else str(r[17]),
            lease_until=None if r[18] is None else float(r[18]),
            error=None if r[19] is None else str(r[19]),
        ),
    )


def event_of(r: tuple[Any, ...]) -> StepEvent:
    return _decoded(
        "step_events",
        r,
        lambda: StepEvent(
            preview_id=str(r[0]),
            at=float(r[1]),
            from_state=None if r[2] is None else state_of(r[2]),
            to_state=state_of(r[3]),
            actor=str(r[4]),
            how=str(r[5]),
        ),
    )


def approval_of(r: tuple[Any, ...]) -> Approval:
    return _decoded("approvals", r, lambda: _approval(r))


def _approval(r: tuple[Any, ...]) -> Approval:
    kind = r[2]
    if kind not in ("policy", "person"):
        raise ValueError(f"the ledger holds an unknown approver kind {kind!r}")
    return Approval(
        preview_id=str(r[0]),
        fingerprint=str(r[1]),
        kind=kind,
        approver=str(r[3]),
        rule=str(r[4]),
        at=float(r[5]),
        reason=str(r[6]),
        consumed_at=None if r[7] is None else float(r[7]),
    )


def batch_of(r: tuple[Any, ...]) -> Batch:
    return _decoded(
        "batches",
        r,
        lambda: Batch(
            id=str(r[0]),
            run_id=str(r[1]),
            principal=Principal.model_validate_json(r[2]),
            items=tuple(str(i) for i in json.loads(r[3])),
            fingerprint=str(r[4]),
            created=float(r[5]),
        ),
    )


def receipt_of(r: tuple[Any, ...]) -> Receipt:
    return _decoded("receipts", r, lambda: _receipt(r))


def _receipt(r: tuple[Any, ...]) -> Receipt:
    resolved = r[5]
    if resolved not in ("send", "resend", "query"):
        raise ValueError(f"the ledger holds an unknown resolution {resolved!r}")
    return Receipt(
        key=str(r[0]),
        preview_id=str(r[1]),
        tool=str(r[2]),
        data=json.loads(r[3]),
        stored_at=float(r[4]),
        resolved_by=resolved,
    )
