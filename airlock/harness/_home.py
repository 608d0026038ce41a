"""Where airlock keeps its state on this host, and the audit log a harness opens there.

``$AIRLOCK_HOME``, else ``$XDG_STATE_HOME/airlock``, else ``~/.local/state/airlock``: the
audit log (``audit.db`` and its chain key ``audit.db.key``), the ledger (``ledger.db``) and
run sockets. The command line reads the same place (``airlock.cli.Settings``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from airlock.harness._otel import spans_from_environment
from airlock.policies import UsageError
from airlock.tools import AuditLog, AuditStore, Registry

__all__ = ["airlock_home", "durable_audit"]


def airlock_home(environ: Mapping[str, str] | None = None) -> Path:
    """The state directory: ``AIRLOCK_HOME``, else ``XDG_STATE_HOME/airlock``, else
    ``~/.local/state/airlock`` (read from ``environ``, default the process environment)."""
    env = os.environ if environ is None else environ
    if home := env.get("AIRLOCK_HOME"):
        return Path(home)
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "airlock"


def durable_audit(registry: Registry, store: AuditStore | None) -> AuditLog:
    """The registry's audit log, given a durable store when it has none of its own:
    ``store``, else the one ``AIRLOCK_DATABASE_URL`` names, else the SQLite store
    ``audit.db`` under :func:`airlock_home`. Spans are
    exported over OTLP as well when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_...``)
    is set.

    Raises:
        UsageError: ``store`` is given and the registry already writes to another one.
        MissingExtraError: OTLP is configured and the ``otel`` extra is not installed.
    """
    # Imported here: the database module finds its default folder through this one.
    from airlock.harness._database import database_url, open_audit_store

    log = registry.audit
    if log.provisional:
        log.attach(store if store is not None else open_audit_store(database_url()))
    elif store is not None and store is not log.store:
        raise UsageError(
            "the registry already records to its own audit store (Registry(audit=...)); "
            "pass the store to the registry or to the Harness, not to both"
        )
    spans_from_environment(log)
    return log
