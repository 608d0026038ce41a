"""Where airlock keeps its state on this host.

``$AIRLOCK_HOME``, else ``$XDG_STATE_HOME/airlock``, else ``~/.local/state/airlock``: the
audit log (``audit.db`` and its chain key ``audit.db.key``), the ledger (``ledger.db``) and
run sockets. The command line reads the same place (``airlock.cli.Settings``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["airlock_home"]


def airlock_home(environ: Mapping[str, str] | None = None) -> Path:
    """The state directory: ``AIRLOCK_HOME``, else ``XDG_STATE_HOME/airlock``, else
    ``~/.local/state/airlock`` (read from ``environ``, default the process environment)."""
    env = os.environ if environ is None else environ
    if home := env.get("AIRLOCK_HOME"):
        return Path(home)
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "airlock"
