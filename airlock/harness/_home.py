"""Where airlock keeps its state on this host.

``$AIRLOCK_HOME``, else ``$XDG_STATE_HOME/airlock``, else ``~/.local/state/airlock``: the
audit log (``audit.db`` and its chain key ``audit.db.key``), the ledger (``ledger.db``) and
programs' artifacts (``artifacts/``); run sockets are elsewhere, in ``$TMPDIR/airlock-*``. The
command line reads the same place (``airlock.cli.Settings``). A folder airlock makes for its
state is made mode 0700, and its database files 0600: they hold programs' text and the
arguments of writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["HOME_MODE", "airlock_home", "make_home"]

HOME_MODE = 0o700
"""The mode of a state folder airlock makes (one that exists keeps its own)."""


def airlock_home(environ: Mapping[str, str] | None = None) -> Path:
    """The state directory: ``AIRLOCK_HOME``, else ``XDG_STATE_HOME/airlock``, else
    ``~/.local/state/airlock`` (read from ``environ``, default the process environment)."""
    env = os.environ if environ is None else environ
    if home := env.get("AIRLOCK_HOME"):
        return Path(home)
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "airlock"


def make_home(home: Path) -> None:
    """Make the state directory ``home`` mode 0700 (the folders above it as the umask says)
    unless it exists; one that exists is left as it is.

    Raises:
        OSError: it cannot be made (a file is on its path, say).
    """
    home.mkdir(mode=HOME_MODE, parents=True, exist_ok=True)
