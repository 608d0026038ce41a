"""The audit store's SQLite schema, and an event as a row of it and back.

``audit_events`` holds one row per event, numbered 1, 2, 3, ... by ``id``, with its ``chain``
(:mod:`airlock.tools._audit_chain`); ``audit_effects`` each event's effects split into kind,
target and, for a pattern, its literal prefix (what ``airlock audit find`` searches, through a
covering index for concrete targets and one for patterns); ``audit_programs`` the text of each
program once, by hash; ``audit_head`` how many records were written.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from airlock.tools._audit import AuditEvent
from airlock.tools._audit_chain import AuditStoreError, canonical

__all__ = [
    "COLUMNS",
    "INSERT_EFFECT",
    "INSERT_EVENT",
    "INSERT_PROGRAM",
    "SCHEMA",
    "SET_HEAD",
    "encoded_row",
    "event_of_row",
    "refuse_old_schema",
    "row_of",
]

_T = TypeVar("_T")

_VERSION = 2
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS audit_events (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    caller TEXT NOT NULL,
    tool TEXT NOT NULL,
    user_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    stage TEXT NOT NULL,
    decision TEXT NOT NULL,
    rule TEXT NOT NULL,
    outcome TEXT NOT NULL,
    code TEXT,
    duration_s REAL NOT NULL,
    effects TEXT NOT NULL,
    detail TEXT,
    final INTEGER NOT NULL,
    approver TEXT,
    exercised INTEGER NOT NULL,
    chain BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_run ON audit_events (run_id, id);
CREATE INDEX IF NOT EXISTS audit_events_tool ON audit_events (tool, id);
CREATE INDEX IF NOT EXISTS audit_events_ts ON audit_events (ts);
CREATE TABLE IF NOT EXISTS audit_effects (
    event_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    prefix TEXT,
    PRIMARY KEY (event_id, kind, target)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS audit_effects_target ON audit_effects (target, prefix)
    WHERE prefix IS NULL;
CREATE INDEX IF NOT EXISTS audit_effects_prefix ON audit_effects (prefix)
    WHERE prefix IS NOT NULL;
CREATE INDEX IF NOT EXISTS audit_effects_kind ON audit_effects (kind, event_id);
CREATE TABLE IF NOT EXISTS audit_programs (
    hash TEXT PRIMARY KEY,
    text BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audit_head (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    records INTEGER NOT NULL,
    chain BLOB NOT NULL,
    mac BLOB NOT NULL
);
PRAGMA user_version = {_VERSION};
"""
COLUMNS = (
    "ts, run_id, call_id, caller, tool, user_id, tenant_id, args_hash, stage, decision, "
    "rule, outcome, code, duration_s, effects, detail, final, approver, exercised"
)
"""The stored columns of an event, after ``id`` and before ``chain``, in hashing order."""
INSERT_EVENT = f"INSERT INTO audit_events (id, {COLUMNS}, chain) VALUES ({', '.join('?' * 21)})"
INSERT_EFFECT = "INSERT OR IGNORE INTO audit_effects VALUES (?, ?, ?, ?)"
INSERT_PROGRAM = "INSERT OR IGNORE INTO audit_programs (hash, text) VALUES (?, ?)"
SET_HEAD = "INSERT OR REPLACE INTO audit_head (one, records, chain, mac) VALUES (1, ?, ?, ?)"


def row_of(e: AuditEvent) -> tuple[Any, ...]:
    """An event's stored columns, as SQLite will give them back (floats as floats, text
    that UTF-8 can hold), so the chain computed now matches the one checked later."""
    return (
        float(e.ts) + 0.0,  # (+ 0.0: -0.0 becomes 0.0, as SQLite stores it; see encoded_row)
        _text(e.run_id),
        _text(e.call_id),
        _text(e.caller),
        _text(e.tool),
        _text(e.user_id),
        _text(e.tenant_id),
        _text(e.args_hash),
        _text(e.stage),
        _text(e.decision),
        _text(e.rule),
        _text(e.outcome),
        None if e.code is None else _text(e.code),
        float(e.duration_s) + 0.0,
        json.dumps([_text(x) for x in e.effects]),
        None if e.detail is None else _text(e.detail),
        int(e.final),
        None if e.approver is None else _text(e.approver),
        int(e.exercised),
    )


def encoded_row(e: AuditEvent) -> tuple[tuple[Any, ...], bytes, tuple[str, ...]]:
    """:func:`row_of` ``e``, the row's :func:`~airlock.tools._audit_chain.canonical` bytes
    without the opening ``[``, and its effects as stored (what the effect index must hold,
    as :func:`verify_chain <airlock.tools._audit_chain.verify_chain>` reads them back from
    the row): what a writer stores and chains, computed once per event, the same for either
    database.

    Nearly every event's texts are printable ASCII without a quote or a backslash, and its
    times are finite: such a row is written straight into its JSON, which is then the same,
    byte for byte, as the encoder's (``tests/tools/test_audit_rows.py`` holds the cases).
    Such a row holds nothing a database cannot (no NUL, no lone surrogate). Any other row
    goes through ``row_of`` and the encoder.
    """
    # SQLite stores -0.0 as 0 (an integral REAL is kept as an integer), so a record chained
    # over "-0.0" would not verify: both times are chained as they will be read back.
    ts, duration = float(e.ts) + 0.0, float(e.duration_s) + 0.0
    code, detail, approver, effects = e.code, e.detail, e.approver, e.effects
    # The eleven texts between ``ts`` and ``code``, in column order.
    plain = (
        e.run_id,
        e.call_id,
        e.caller,
        e.tool,
        e.user_id,
        e.tenant_id,
        e.args_hash,
        e.stage,
        e.decision,
        e.rule,
        e.outcome,
    )
    quoted = '","'.join(plain)
    texts = "".join(
        (
            quoted,
            "" if code is None else code,
            "" if detail is None else detail,
            "" if approver is None else approver,
            *effects,
        )
    )
    if not (
        texts.isascii()
        and texts.isprintable()
        and texts.count('"') == 20  # the separators of the eleven texts joined: no other
        and "\\" not in texts
        and math.isfinite(ts)
        and math.isfinite(duration)
    ):
        return _encoded(e)
    listed = '["' + '", "'.join(effects) + '"]' if effects else "[]"
    final, exercised = int(e.final), int(e.exercised)
    row = (ts, *plain, code, duration, listed, detail, final, approver, exercised)
    escaped = listed.replace('"', '\\"')
    code_json = "null" if code is None else f'"{code}"'
    detail_json = "null" if detail is None else f'"{detail}"'
    approver_json = "null" if approver is None else f'"{approver}"'
    tail = (
        f'{ts!r},"{quoted}",{code_json},{duration!r},"{escaped}",{detail_json},{final},'
        f"{approver_json},{exercised}]"
    )
    return row, tail.encode(), effects


def _encoded(e: AuditEvent) -> tuple[tuple[Any, ...], bytes, tuple[str, ...]]:
    # encoded_row of any event, through row_of and the encoder.
    row = row_of(e)
    return row, canonical(row)[1:], tuple(_text(x) for x in e.effects)


def _text(value: str) -> str:
    # What a database cannot hold as text becomes U+FFFD, rather than the whole batch
    # being lost: a lone surrogate (from a model's JSON escape; not UTF-8), and NUL, which
    # PostgreSQL's text refuses. SQLite could keep a NUL, but both stores must store and
    # hash the same text, or their chains differ from the first such record and a log moved
    # between them no longer matches; and PostgreSQL stores have always written U+FFFD for
    # it. (Not the ledger's visible escape ``\x00``: one replacement for everything the
    # audit store cannot hold, and PostgreSQL records already written keep meaning the same.)
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    if value.isascii():
        return value
    return value.encode("utf-8", "replace").decode("utf-8")


def event_of_row(row: Sequence[Any]) -> AuditEvent:
    """The event of a row of :data:`COLUMNS`.

    Raises:
        AuditStoreError: a column holds what no writer stores (a row edited behind the
            store's back); the message names the record by run and call.
    """
    return AuditEvent(
        ts=_decoded(row, 0, float),
        run_id=str(row[1]),
        call_id=str(row[2]),
        caller=row[3],
        tool=str(row[4]),
        user_id=str(row[5]),
        tenant_id=str(row[6]),
        args_hash=str(row[7]),
        stage=row[8],
        decision=row[9],
        rule=str(row[10]),
        outcome=row[11],
        code=None if row[12] is None else str(row[12]),
        duration_s=_decoded(row, 13, float),
        effects=_decoded(row, 14, _effects_of),
        detail=None if row[15] is None else str(row[15]),
        final=bool(row[16]),
        approver=None if row[17] is None else str(row[17]),
    )


_NAMES: Final = tuple(name.strip() for name in COLUMNS.split(","))


def _decoded(row: Sequence[Any], index: int, decode: Callable[[Any], _T]) -> _T:
    """``decode(row[index])``: a column the reader must parse, which someone with write
    access to the database may have filled with anything.

    Raises:
        AuditStoreError: it does not decode; one record must not end a listing with a
            traceback, and the operator needs to know which one to look at.
    """
    try:
        return decode(row[index])
    except (TypeError, ValueError) as exc:  # (json's JSONDecodeError is a ValueError)
        # The texts quoted are the forger's: repr() escapes what could drive a terminal.
        raise AuditStoreError(
            f"the audit record of run {_quoted(row[1])}, call {_quoted(row[2])} cannot be "
            f"read: its {_NAMES[index]} {_quoted(row[index])} is not what airlock writes "
            f"({type(exc).__name__}); it was changed behind the store's back. Run `airlock "
            "audit verify` to find the first changed record, and restore the log from a backup"
        ) from None


def _effects_of(stored: Any) -> tuple[str, ...]:
    effects = json.loads(str(stored))
    if not isinstance(effects, list):
        raise TypeError(f"effects are a JSON list, not {type(effects).__name__}")
    return tuple(str(e) for e in effects)


def _quoted(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def refuse_old_schema(path: Path, *, timeout: float = 5.0) -> None:
    """Raise when ``path`` holds an audit table without the chain (an older airlock's);
    wait at most ``timeout`` seconds for another process's lock."""
    if not path.is_file():
        return
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout)
    try:
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'audit_events'"
        ).fetchone()
    except sqlite3.DatabaseError:
        return  # not a database: SQLite itself says so when the store opens it
    finally:
        conn.close()
    if row is not None and "chain BLOB" not in str(row[0]):
        raise AuditStoreError(
            f"the audit store {str(path)!r} was written by an older airlock, without a hash "
            f"chain; move it aside (mv {path} {path}.old) and a new one starts on next use"
        )
