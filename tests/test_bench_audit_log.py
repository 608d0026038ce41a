"""The audit benchmark's generated log is one a harness could have written: it verifies, so
the benchmark times a whole verify, not one that stopped at a fault of its own making."""

from __future__ import annotations

import time
from pathlib import Path

from airlock.tools import SQLiteAuditStore
from bench.audit import fill


def test_the_generated_log_verifies(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    fill(db, 41_000, time.time())  # three parts: each part's programs stored with it
    store = SQLiteAuditStore(db, readonly=True)
    try:
        report = store.verify()
    finally:
        store.close()
    assert (report.ok, report.records, report.programs) == (True, 41_000, 3), report
