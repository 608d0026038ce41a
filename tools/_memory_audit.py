"""An audit store in memory: for tests, for measuring without a disk, and the log of a
registry nobody gave a store yet (see :attr:`AuditLog.provisional
<airlock.tools.AuditLog.provisional>`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airlock.tools._audit import AuditEvent, RunSummary
from airlock.tools._fork_lock import ForkLock

__all__ = ["MemoryAuditStore", "summarize"]


class MemoryAuditStore:
    """An :class:`~airlock.tools.AuditStore` in memory; nothing survives the process."""

    def __init__(self) -> None:
        self._events: list[AuditEvent] = []
        self._programs: dict[str, str] = {}
        # (a ForkLock: a forked child must not find it held by a thread of its parent)
        self._lock = ForkLock("an audit store in memory")

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        with self._lock:
            self._events.extend(events)
            if programs:
                for digest, text in programs.items():
                    self._programs.setdefault(digest, text)

    def query(
        self,
        *,
        run_id: str | None = None,
        tool: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[AuditEvent]:
        with self._lock:
            found = [
                e
                for e in self._events
                if (run_id is None or e.run_id == run_id)
                and (tool is None or e.tool == tool)
                and (since is None or e.ts >= since)
            ]
        return found if limit is None else found[:limit]

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        with self._lock:
            events = list(self._events)
        by_run: dict[str, list[AuditEvent]] = {}
        for event in events:
            by_run.setdefault(event.run_id, []).append(event)
        summaries = [summarize(run_id, group) for run_id, group in by_run.items()]
        summaries.sort(key=lambda s: s.ended, reverse=True)
        return summaries[:limit]

    def program(self, digest: str) -> str | None:
        with self._lock:
            return self._programs.get(digest)

    def programs(self) -> dict[str, str]:
        """Every stored program by hash (what a provisional log hands to its real store)."""
        with self._lock:
            return dict(self._programs)

    def close(self) -> None:
        return None


def summarize(run_id: str, events: Sequence[AuditEvent]) -> RunSummary:
    """A :class:`RunSummary` of one run's events."""
    final = [e for e in events if e.final]
    return RunSummary(
        run_id=run_id,
        started=min(e.ts - e.duration_s for e in events),
        ended=max(e.ts for e in events),
        calls=len(final),
        ok=sum(e.outcome == "ok" for e in final),
        error=sum(e.outcome == "error" for e in final),
        unknown=sum(e.outcome == "unknown" for e in final),
        users=tuple(sorted({e.user_id for e in events})),
        previews=sum(e.outcome == "preview" for e in final),
    )
