"""The audit log's SQLite store: WAL mode, one transaction per batch, safe across processes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from airlock.tools._audit import AuditEvent, RunSummary
from airlock.tools._sqlite_connection import SQLiteConnection

__all__ = ["SQLiteAuditStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
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
    final INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_run ON audit_events (run_id, id);
CREATE INDEX IF NOT EXISTS audit_events_tool ON audit_events (tool, id);
"""
_COLUMNS = (
    "ts, run_id, call_id, caller, tool, user_id, tenant_id, args_hash, stage, decision, "
    "rule, outcome, code, duration_s, effects, detail, final"
)
_INSERT = f"INSERT INTO audit_events ({_COLUMNS}) VALUES ({', '.join('?' * 17)})"


class SQLiteAuditStore:
    """An :class:`~airlock.tools.AuditStore` in one SQLite file.

    WAL mode lets readers (``airlock audit``) work while a harness writes; writers in other
    processes wait up to ``busy_timeout`` seconds. Within a process one connection serves all
    threads under a lock; a forked child opens its own. ``synchronous="FULL"`` (the default)
    syncs each batch to disk; ``"NORMAL"`` survives a crash of the process but not of the
    machine. ``readonly`` opens an existing file without creating or changing anything.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout: float = 10.0,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path)
        self._db = SQLiteConnection(
            self.path,
            _SCHEMA,
            label="the audit store",
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            readonly=readonly,
        )

    def append(self, events: Sequence[AuditEvent]) -> None:
        rows = [
            (
                e.ts,
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
                e.code,
                e.duration_s,
                json.dumps(e.effects),
                e.detail,
                int(e.final),
            )
            for e in events
        ]
        with self._db.transaction() as conn:
            conn.executemany(_INSERT, rows)

    def query(
        self, *, run_id: str | None = None, tool: str | None = None, limit: int | None = None
    ) -> list[AuditEvent]:
        where, params = [], []
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if tool is not None:
            where.append("tool = ?")
            params.append(tool)
        sql = f"SELECT {_COLUMNS} FROM audit_events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._db.read(lambda conn: conn.execute(sql, params).fetchall())
        return [_event(row) for row in rows]

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        sql = """
            SELECT run_id, MIN(ts - duration_s), MAX(ts),
                   SUM(final), SUM(final AND outcome = 'ok'),
                   SUM(final AND outcome = 'error'), SUM(final AND outcome = 'unknown'),
                   GROUP_CONCAT(DISTINCT user_id), SUM(final AND outcome = 'preview')
            FROM audit_events GROUP BY run_id ORDER BY MAX(id) DESC LIMIT ?
        """
        rows = self._db.read(lambda conn: conn.execute(sql, (int(limit),)).fetchall())
        return [
            RunSummary(
                run_id=r[0],
                started=r[1],
                ended=r[2],
                calls=r[3],
                ok=r[4],
                error=r[5],
                unknown=r[6],
                users=tuple(sorted(str(r[7]).split(","))),
                previews=r[8],
            )
            for r in rows
        ]

    def close(self) -> None:
        self._db.close()


def _event(row: tuple[Any, ...]) -> AuditEvent:
    effects = json.loads(str(row[14]))
    return AuditEvent(
        ts=float(row[0]),
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
        duration_s=float(row[13]),
        effects=tuple(str(e) for e in effects),
        detail=None if row[15] is None else str(row[15]),
        final=bool(row[16]),
    )
