"""The process-wide tables of who holds which preview (:mod:`airlock.tools._preview_holders`),
emptied for one test and given back as they were after it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from airlock.tools import _preview_holders as holders

__all__ = ["empty_holder_tables"]


@contextlib.contextmanager
def empty_holder_tables() -> Iterator[None]:
    kept = [(table, dict(table)) for table in (holders._held, holders._pending, holders._due)]
    for table, _ in kept:
        table.clear()
    try:
        yield
    finally:
        for table, before in kept:
            table.clear()
            table.update(before)  # type: ignore[arg-type]
