"""How long a connection to PostgreSQL may wait, told to the server and the socket at connect.

PostgreSQL waits for a lock, a statement or a silent peer without end unless told otherwise,
and airlock's callers cannot afford that: the write path calls the ledger from the event loop
(one blocked lock freezes every run of the harness), and the audit writer thread holds every
caller waiting for durability. So every connection airlock opens (the pool's and the first,
migrating one) carries, in libpq's ``options``:

* ``lock_timeout`` (5 s): the ledger's transactions hold a step's row lock, and the audit
  store the head's, for a fraction of a millisecond; a wait of seconds means the holder is
  stuck (a ``psql`` left in ``BEGIN``, a frozen process), and failing ``ledger_locked``
  (retryable) is better than freezing. It is also the longest a ledger call on the event loop
  waits for a lock.
* ``statement_timeout`` (30 s): no statement of the stores runs longer than a fraction of a
  second on a healthy server; past this the server cancels it (``ledger_locked``).
* ``idle_in_transaction_session_timeout`` (60 s): a process of airlock that stops in the
  middle of a transaction (frozen, stopped in a debugger) loses its session, and so its locks,
  instead of holding them until someone notices.

and on the client's socket TCP keepalives (probe after 10 s idle, every 5 s, give up after 3)
and ``tcp_user_timeout`` (30 s of unacknowledged data): a server that vanished (failover, a
cut network, a frozen VM) is noticed in about half a minute rather than the system's two hours.

The URL keeps the last word: what it (or ``PGOPTIONS``) sets comes after these defaults in
``options``, and a keepalive parameter it names is left as it is.

A deployment whose connections go through a pooler that refuses a startup ``options`` it does
not track (PgBouncer: before 1.20 any ``options``, since then any not listed in
``ignore_startup_parameters``) sets ``AIRLOCK_POSTGRES_LIMITS=server`` in the environment:
airlock then sends no ``options`` of its own, and the server's settings (its configuration,
``ALTER ROLE airlock SET lock_timeout = '5s'``, ...) apply, with whatever options the URL or
``PGOPTIONS`` carries passed on by libpq unchanged. The keepalives stay: they are the client
socket's. ``AIRLOCK_POSTGRES_LIMITS=airlock`` (or unset) is the default. A URL's own
``options`` is not taken as the signal: the documented way to put the tables in a schema is
``?options=-csearch_path%3DNAME``, and that deployment keeps airlock's limits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from airlock.policies import UsageError

__all__ = [
    "IDLE_IN_TRANSACTION_TIMEOUT",
    "KEEPALIVES",
    "LIMITS_ENV",
    "LOCK_TIMEOUT",
    "STATEMENT_TIMEOUT",
    "SessionLimits",
    "connect_arguments",
]

LOCK_TIMEOUT = 5.0
STATEMENT_TIMEOUT = 30.0
IDLE_IN_TRANSACTION_TIMEOUT = 60.0

LIMITS_ENV = "AIRLOCK_POSTGRES_LIMITS"
"""Whose session limits a connection runs under: ``airlock`` (the default: sent as startup
``options``) or ``server`` (none sent, for a pooler that refuses them)."""

KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
}


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """The server-side waits of a session, in seconds (``None``: the server's own setting)."""

    lock_timeout: float | None = LOCK_TIMEOUT
    statement_timeout: float | None = STATEMENT_TIMEOUT
    idle_in_transaction_timeout: float | None = IDLE_IN_TRANSACTION_TIMEOUT

    def settings(self) -> dict[str, int]:
        """The settings by their names in PostgreSQL, in milliseconds."""
        named = {
            "lock_timeout": self.lock_timeout,
            "statement_timeout": self.statement_timeout,
            "idle_in_transaction_session_timeout": self.idle_in_transaction_timeout,
        }
        for name, seconds in named.items():
            if seconds is not None and seconds <= 0:
                raise ValueError(f"{name} must be a positive number of seconds or None")
        return {name: max(1, round(s * 1000)) for name, s in named.items() if s is not None}


def connect_arguments(url: str, limits: SessionLimits) -> dict[str, Any]:
    """The keyword arguments for ``psycopg.connect(url, ...)`` that set ``limits`` and the
    keepalives, leaving what ``url`` sets itself as it is; with ``AIRLOCK_POSTGRES_LIMITS=server``
    in the environment, the keepalives only.

    Raises:
        UsageError: ``AIRLOCK_POSTGRES_LIMITS`` is neither ``airlock`` nor ``server``.
    """
    given = conninfo_to_dict(url)
    arguments: dict[str, Any] = {k: v for k, v in KEEPALIVES.items() if k not in given}
    if not _airlock_limits():
        return arguments  # libpq sends the URL's options or PGOPTIONS, as without airlock
    ours = [f"-c {name}={ms}" for name, ms in limits.settings().items()]
    # ``options`` given here replaces the URL's and PGOPTIONS: keep theirs, after ours (the
    # server takes the last of two settings of one name).
    theirs = str(given.get("options") or os.environ.get("PGOPTIONS") or "")
    options = " ".join([*ours, theirs]).strip()
    if options:
        arguments["options"] = options
    return arguments


def _airlock_limits() -> bool:
    """Whether the deployment leaves the session limits to airlock (:data:`LIMITS_ENV`)."""
    choice = os.environ.get(LIMITS_ENV, "").strip().lower()
    if choice in ("", "airlock"):
        return True
    if choice == "server":
        return False
    # A typo must not quietly keep the options a pooler refuses, nor drop the limits.
    raise UsageError(
        f"{LIMITS_ENV} must be 'airlock' (send airlock's lock, statement and idle limits at "
        "connect) or 'server' (send none: the server's settings apply, for PgBouncer and "
        "other poolers that refuse startup options), not "
        f"{os.environ[LIMITS_ENV][:40]!r}"
    )
