"""The host directory of a backend's container sockets, and removing those of dead owners.

A backend makes one directory under the system's temporary directory (``airlock-XXXXXXXX``)
and its containers' socket directories inside it; :meth:`DockerBackend.close` deletes it. A
process that crashed never does: the directory records its owner in a file beside those
directories (:data:`OWNER_FILE`, the labels its containers carry; the name stays random,
because a container's mount table shows its socket directory's host path), and
:func:`reap_socket_roots` deletes it once that owner is judged dead the way its containers
are (:func:`~airlock.sandbox._owner.owner_state`). Only directories of this user, not
symbolic links, whose owner file is readable and names a dead owner go; anything else (a live
owner, an unreadable file, a root of an older version without one) is left alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Final

from airlock.sandbox._owner import owner_state

__all__ = ["OWNER_FILE", "make_socket_root", "reap_socket_roots"]

OWNER_FILE: Final = "owner.json"
_PREFIX: Final = "airlock-"
_OWNER_FILE_MAX_BYTES: Final = 4096
_log = logging.getLogger(__name__)


def make_socket_root(labels: dict[str, str], *, parent: Path | None = None) -> Path:
    """A new directory for the socket directories of the containers labelled ``labels``.

    Raises:
        OSError: the directory could not be made.
    """
    root = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=parent))
    try:
        descriptor = os.open(root / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(json.dumps(labels))
        root.chmod(0o755)  # the runners traverse it to their sockets
    except OSError:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


def reap_socket_roots(*, parent: Path | None = None) -> list[Path]:
    """Delete the socket roots of owners that are gone; returns those deleted."""
    folder = Path(parent or tempfile.gettempdir())
    removed = []
    try:
        candidates = [entry for entry in folder.iterdir() if entry.name.startswith(_PREFIX)]
    except OSError as exc:
        _log.warning("could not list %s for orphaned socket directories: %s", folder, exc)
        return []
    for root in candidates:
        labels = _owner_of(root)
        if labels is None or owner_state(labels) != "dead":
            continue
        shutil.rmtree(root, ignore_errors=True)
        if not root.exists():
            removed.append(root)
    return removed


def _owner_of(root: Path) -> dict[str, str] | None:
    """The labels recorded in ``root``, or ``None`` when it is not a root this user made."""
    try:
        info = root.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None  # a symbolic link, a file, or another user's: never ours to delete
        descriptor = os.open(root / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as file:
            if os.fstat(file.fileno()).st_uid != os.getuid():
                return None
            text = file.read(_OWNER_FILE_MAX_BYTES + 1)
        if len(text) > _OWNER_FILE_MAX_BYTES:
            return None
        labels = json.loads(text)
    except (OSError, ValueError):
        return None
    if not isinstance(labels, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in labels.items()
    ):
        return None
    return labels
