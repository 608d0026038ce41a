"""Times as the approval surfaces print them: UTC, to the second, and never an error.

A ledger row's time is whatever the process that wrote it computed (a harness with a ttl of
``1e12`` seconds, a row changed by hand), and one time past what :mod:`datetime` can print
must not hide the preview it belongs to, nor every other one on the same page.
"""

from __future__ import annotations

import datetime as dt
import math

__all__ = ["utc_time"]

_FORMAT = "%Y-%m-%d %H:%M:%S"
# Written out: strftime's %Y gives year 1 as "1" on glibc.
_LATEST = "9999-12-31 23:59:59"
_EARLIEST = "0001-01-01 00:00:00"


def utc_time(ts: float, *, zone: bool = False) -> str:
    """``ts`` (seconds since 1970) as ``YYYY-MM-DD HH:MM:SS`` in UTC, with `` UTC`` when
    ``zone``; a time past the calendar's ends as ``after``/``before`` that end, and a value
    that is no time at all (NaN, not a number) as itself."""
    suffix = " UTC" if zone else ""
    try:
        return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime(_FORMAT) + suffix
    except (OverflowError, ValueError, OSError, TypeError):
        if not isinstance(ts, int | float) or math.isnan(ts):
            return f"{ts!r} (not a time)"[:80]
        return f"after {_LATEST}{suffix}" if ts > 0 else f"before {_EARLIEST}{suffix}"
