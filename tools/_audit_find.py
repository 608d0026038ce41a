"""Which calls touched what: searches of the audit store (SQLite or PostgreSQL) through its
indexes.

:func:`find_calls` answers "which runs touched ``billing:invoice/inv_1*``", "did any
code-called tool write or reach the network" and the like, in one query of the effect
index. A call's effect is *certain* when its target is a record (``read(billing:invoice/
inv_12)``) or a pattern inside the one asked about; it is *possible* when the tool recorded
only a pattern that overlaps it (``read(billing:invoice/*)``: a tool that lists records and
does not say which it returned), so a reviewer sees those calls too, marked as such. A
pattern that can stand for no target inside the one asked about (``billing:*``, one segment,
next to ``billing:invoice/inv_1``) is no match at all.

A period is turned into the first record that can fall in it, so the effect index is read
only from there on (records are numbered in the order they were written, and an event is
written after the call it records ended).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any, Final, NamedTuple

from airlock.policies import EFFECT_KINDS, UsageError, covers, glob_regex, may_share_text
from airlock.tools._audit import CallOutcome
from airlock.tools._audit_sql import first_record
from airlock.tools._context import Caller
from airlock.tools._sql_rows import SearchableAuditStore, SQLConnection

__all__ = ["FoundCall", "FoundCalls", "find_calls"]

_PATTERN: Final = re.compile(r"^[A-Za-z0-9_.@+*/:-]{1,256}$")
_CALL = (
    "e.id, e.ts, e.run_id, e.call_id, e.caller, e.tool, e.user_id, e.tenant_id, e.outcome, "
    "e.code, e.approver"
)
_CALL_WIDTH = 11


class FoundCall(NamedTuple):
    """One call that matched: its record number, who made it, how it ended, and what
    matched. (A tuple: a search of a large log builds many.)"""

    record: int
    ts: float
    run_id: str
    call_id: str
    caller: Caller
    tool: str
    user_id: str
    tenant_id: str
    outcome: CallOutcome
    code: str | None
    approver: str | None
    """Who approved it, for a write's send (see :attr:`AuditEvent.approver
    <airlock.tools.AuditEvent.approver>`)."""
    matched: tuple[str, ...]
    """The call's effects that answer the question (all of them without ``resource``)."""
    certain: bool
    """``False`` when the only match is a pattern the tool recorded (it cannot say which
    records it read) that overlaps the resource asked about."""


def find_calls(
    store: SearchableAuditStore,
    *,
    resource: str | None = None,
    kinds: Collection[str] = (),
    caller: Caller | None = None,
    tool: str | None = None,
    since: float | None = None,
    until: float | None = None,
    attempted: bool = False,
    runs: int | None = None,
) -> FoundCalls:
    """Calls whose effects match, oldest first.

    Args:
        resource: a target pattern (``billing:invoice/inv_1*``, ``api.example.com``) in the
            pattern language of grants; ``None`` for any.
        kinds: effect kinds to look for (``write``, ``network``...); empty for any.
        caller, tool: only calls by this caller, of this tool.
        since, until: only events that ended in ``[since, until)`` (epoch seconds).
        attempted: also calls that did not run (refused, previews): by default only what
            was exercised (:attr:`AuditEvent.exercised <airlock.tools.AuditEvent.exercised>`).
        runs: only the calls of the ``runs`` runs whose last matching call is newest (what
            ``airlock audit find --limit`` shows); the counts of every match are
            :attr:`FoundCalls.calls_found` and :attr:`FoundCalls.runs_found`. What is held
            in memory meanwhile is those runs' calls, and for a ``resource`` the number of
            each matching call and the id of each matching run.

    Raises:
        UsageError: ``resource`` is not a pattern, or a kind is not an effect kind.
    """
    unknown = sorted(set(kinds) - set(EFFECT_KINDS))
    if unknown:
        raise UsageError(f"effect kinds {unknown} are unknown; use {', '.join(EFFECT_KINDS)}")
    if resource is not None and not _PATTERN.match(resource):
        raise UsageError(
            f"resource {resource!r} must be 1-256 characters of letters, digits and "
            "_ . @ + * / : -, for example 'billing:invoice/inv_1*'"
        )
    where, params = ["1 = 1"], []
    for clause, value in (
        ("e.caller = ?", caller),
        ("e.tool = ?", tool),
        ("e.ts >= ?", since),
        ("e.ts < ?", until),
    ):
        if value is not None:
            where.append(clause)
            params.append(value)
    if not attempted:
        where.append("e.exercised = 1")
    first = 0 if since is None else store.read(lambda conn: first_record(conn, since))
    if runs is not None:
        return _newest_runs(store, resource, kinds, where, [*params, first], runs)
    if resource is None and not kinds:
        return FoundCalls(_by_time(store, where, [*params, first]))
    effects, values = _effect_rows(resource, kinds, first)
    # Two reads, each through a covering index or in record order: the matching effects,
    # then their calls, fetched by ascending record number (far faster than a join that
    # visits the calls in the order of the effect index).
    sql = (
        f"SELECT {_CALL} FROM audit_events e WHERE e.id IN "
        f"(SELECT event_id FROM ({effects}) AS matched) "
        f"AND {' AND '.join(where)} ORDER BY e.id"
    )

    def read(conn: SQLConnection) -> tuple[list[Any], list[Any]]:
        return (
            conn.execute(effects, values).fetchall(),
            conn.execute(sql, [*values, *params]).fetchall(),
        )

    rows, calls = store.read(read)
    by_call: dict[int, list[Any]] = {}
    for row in rows:
        by_call.setdefault(row[0], []).append(row)
    return FoundCalls(_matched(calls, by_call, _Matcher(resource)))


class FoundCalls(list[FoundCall]):
    """The calls :func:`find_calls` found, oldest first, and how many matched in all (more
    than these when it was asked for the newest ``runs`` only)."""

    __slots__ = ("calls_found", "runs_found")

    def __init__(
        self,
        calls: list[FoundCall],
        *,
        calls_found: int | None = None,
        runs_found: int | None = None,
    ) -> None:
        super().__init__(calls)
        self.calls_found = len(calls) if calls_found is None else calls_found
        """Calls that matched."""
        self.runs_found = len({c.run_id for c in calls}) if runs_found is None else runs_found
        """Runs with a call that matched."""


def _effect_rows(resource: str | None, kinds: Collection[str], first: int) -> tuple[str, list[Any]]:
    """The query of the effect rows ``(record, kind, target, concrete)`` that may match, from
    record ``first`` on: concrete targets in the range of the pattern's literal prefix, and
    recorded patterns whose literal prefix is compatible with it, each part through its own
    covering index; or rows of the given kinds."""
    kind = f" AND kind IN ({', '.join('?' * len(kinds))})" if kinds else ""
    chosen = sorted(kinds)
    literal = "" if resource is None else resource.split("*", 1)[0]
    if not literal:
        return (
            f"SELECT event_id, kind, target, prefix IS NULL FROM audit_effects "
            f"WHERE event_id >= ?{kind}",
            [first, *chosen],
        )
    upper = literal[:-1] + chr(ord(literal[-1]) + 1)
    prefixes = [literal[:n] for n in range(len(literal) + 1)]
    return (
        f"SELECT event_id, kind, target, 1 FROM audit_effects "
        f"WHERE prefix IS NULL AND target >= ? AND target < ? AND event_id >= ?{kind} "
        f"UNION ALL SELECT event_id, kind, target, 0 FROM audit_effects "
        f"WHERE prefix IS NOT NULL AND (prefix IN ({', '.join('?' * len(prefixes))}) "
        f"OR (prefix >= ? AND prefix < ?)) AND event_id >= ?{kind}",
        [literal, upper, first, *chosen, *prefixes, literal, upper, first, *chosen],
    )


class _Matcher:
    """Whether an effect's target falls inside the resource pattern asked about, in the
    pattern language of grants (:func:`airlock.policies.glob_regex`,
    :func:`airlock.policies.covers` for a recorded pattern)."""

    def __init__(self, resource: str | None) -> None:
        self._resource = resource
        self._regex = None if resource is None else glob_regex(resource)

    def __call__(self, kind: str, target: str, concrete: bool) -> bool:
        if self._resource is None or self._regex is None:
            return True
        if kind == "spend":  # its target is a currency, not a resource
            return False
        if concrete:
            return self._regex.fullmatch(target) is not None
        return covers(self._resource, target)

    def overlaps(self, kind: str, pattern: str) -> bool:
        """Whether the recorded ``pattern`` can stand for a target inside the resource."""
        if kind == "spend":
            return False
        return self._resource is None or may_share_text(self._resource, pattern)


def _matched(calls: list[Any], effects: dict[int, list[Any]], inside: _Matcher) -> list[FoundCall]:
    """One :class:`FoundCall` per call with an effect inside the resource: what matched for
    certain, or else what possibly did (a recorded pattern overlapping it)."""
    found: list[FoundCall] = []
    for call in calls:
        certain: list[str] = []
        possible: list[str] = []
        for _, kind, target, concrete in effects.get(call[0], ()):
            if inside(kind, target, bool(concrete)):
                certain.append(f"{kind}({target})")
            elif not concrete and inside.overlaps(kind, target):
                possible.append(f"{kind}({target})")
        if certain or possible:
            found.append(FoundCall._make((*call, tuple(certain or possible), bool(certain))))
    return found


def _by_time(store: SearchableAuditStore, where: list[str], params: list[Any]) -> list[FoundCall]:
    clause = " AND ".join(where)

    def rows(conn: SQLConnection) -> list[Any]:
        return conn.execute(
            f"SELECT {_CALL}, e.effects FROM audit_events e "
            f"WHERE {clause} AND e.id >= ? ORDER BY e.id",
            params,
        ).fetchall()

    return [
        FoundCall._make((*row[:_CALL_WIDTH], tuple(json.loads(row[-1])), True))
        for row in store.read(rows)
    ]


_CHUNK = 500
"""Record numbers or run ids one statement names at most (SQLite takes 250,000 variables)."""


def _chunks(values: list[Any]) -> list[list[Any]]:
    return [values[i : i + _CHUNK] for i in range(0, len(values), _CHUNK)]


def _newest_runs(
    store: SearchableAuditStore,
    resource: str | None,
    kinds: Collection[str],
    where: list[str],
    params: list[Any],
    runs: int,
) -> FoundCalls:
    """:func:`find_calls` for the newest ``runs`` runs: the matching calls are walked from the
    newest, a page of record numbers at a time, and only the chosen runs' calls are built.
    ``params`` ends with the first record of the period."""
    clause = " AND ".join([*where, "e.id >= ?"])
    first, inside = params[-1], _Matcher(resource)
    effects, values = (
        ("", []) if resource is None and not kinds else _effect_rows(resource, kinds, first)
    )
    chosen: dict[str, None] = {}
    ids: list[int] = []
    if resource is None:
        # Every call the query finds matches: SQL counts them, and pages them newest first.
        if effects:
            clause += f" AND e.id IN (SELECT event_id FROM ({effects}) AS m)"
            params = [*params, *values]
        counted = store.read(
            lambda conn: conn.execute(
                f"SELECT COUNT(*), COUNT(DISTINCT e.run_id) FROM audit_events e WHERE {clause}",
                params,
            ).fetchone()
        )
        calls_found, runs_found = int(counted[0]), int(counted[1])
        before = 2**62
        while len(chosen) < runs and before > first:
            page = _fetch(
                store,
                f"SELECT e.id, e.run_id FROM audit_events e WHERE {clause} AND e.id < ? "
                "ORDER BY e.id DESC LIMIT 1000",
                [*params, before],
            )
            for _, run in page:
                if run in chosen or len(chosen) < runs:
                    chosen.setdefault(run)
            before = int(page[-1][0]) if len(page) == 1000 else first
        for part in _chunks(list(chosen)):
            marks = ", ".join("?" * len(part))
            sql = f"SELECT e.id FROM audit_events e WHERE {clause} AND e.run_id IN ({marks})"
            ids += [int(r[0]) for r in _fetch(store, sql, [*params, *part])]
    else:
        hits = store.read(lambda conn: _hits(conn, effects, values, inside))
        seen: set[str] = set()
        calls_found = 0
        for part in _chunks(hits):
            marks = ", ".join("?" * len(part))
            sql = (
                f"SELECT e.id, e.run_id FROM audit_events e WHERE {clause} "
                f"AND e.id IN ({marks}) ORDER BY e.id DESC"
            )
            for number, run in _fetch(store, sql, [*params, *part]):
                calls_found += 1
                seen.add(run)
                if run in chosen or len(chosen) < runs:
                    chosen.setdefault(run)
                    ids.append(int(number))
        runs_found = len(seen)
    found = [
        call
        for part in _chunks(sorted(ids))
        for call in _calls(store, part, resource, kinds, inside)
    ]
    return FoundCalls(found, calls_found=calls_found, runs_found=runs_found)


def _fetch(store: SearchableAuditStore, sql: str, args: list[Any]) -> list[Any]:
    return store.read(lambda conn: conn.execute(sql, args).fetchall())


def _hits(conn: SQLConnection, effects: str, values: list[Any], inside: _Matcher) -> list[int]:
    """The numbers of the records with an effect inside the resource, newest first."""
    hit: set[int] = set()
    for number, kind, target, concrete in conn.execute(effects, values):
        if number not in hit and (
            inside(kind, target, bool(concrete)) or (not concrete and inside.overlaps(kind, target))
        ):
            hit.add(int(number))
    return sorted(hit, reverse=True)


def _calls(
    store: SearchableAuditStore,
    ids: list[int],
    resource: str | None,
    kinds: Collection[str],
    inside: _Matcher,
) -> list[FoundCall]:
    """The calls of records ``ids`` (ascending), with their matching effects in the order
    the search of every record gives them."""
    marks = ", ".join("?" * len(ids))
    if resource is None and not kinds:
        return _by_time(store, [f"e.id IN ({marks})"], [*ids, 0])
    kind = f" AND kind IN ({', '.join('?' * len(kinds))})" if kinds else ""

    def read(conn: SQLConnection) -> tuple[list[Any], list[Any]]:
        return (
            conn.execute(
                "SELECT event_id, kind, target, prefix IS NULL FROM audit_effects "
                f"WHERE event_id IN ({marks}){kind}",
                [*ids, *sorted(kinds)],
            ).fetchall(),
            conn.execute(
                f"SELECT {_CALL} FROM audit_events e WHERE e.id IN ({marks}) ORDER BY e.id", ids
            ).fetchall(),
        )

    rows, calls = store.read(read)
    by_call: dict[int, list[Any]] = {}
    # For a resource, in the order its search of every record reads them through the
    # effect index: concrete targets (by target), then recorded patterns (by prefix).
    for row in rows if resource is None else sorted(rows, key=_index_order):
        by_call.setdefault(row[0], []).append(row)
    return _matched(calls, by_call, inside)


def _index_order(row: Any) -> tuple[Any, ...]:
    if row[3]:
        return (0, row[2], row[1])
    return (1, row[2].split("*", 1)[0], row[1], row[2])
