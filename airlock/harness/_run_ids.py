"""Run ids as names on the host: an application may give a session's run id, and each of its
programs stores its files in a directory named after it under the artifact store. A run id
is checked where the harness takes it, and a program's directory is a child of the store
whatever it is named."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Final

from airlock.policies import UsageError

__all__ = ["artifact_dir", "check_run_id"]

_RUN_ID: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")
"""Letters, digits, ``_ . : -``; no leading ``.`` or ``-`` (a hidden file, an option)."""


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a safe name for a run.

    Raises:
        UsageError: it is empty, longer than 128 characters, or holds a character other
            than ASCII letters, digits and ``_ . : -``, starts with ``.`` or ``-``, or holds
            ``..``: it could name a path outside the artifact store.
    """
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise UsageError(
            f"run_id {str(run_id)[:140]!r} is not a run id: use 1 to 128 ASCII letters, digits "
            "and _ . : - (not starting with . or -, no ..), such as 'conv_42'; or omit it for "
            "a fresh one"
        )
    return run_id


def artifact_dir(root: Path, call_id: str) -> Path:
    """Where one program's artifacts go: a directory of its own under ``root``, named after
    its call id (``RUN:m3-NONCE`` -> ``RUN-m3-NONCE``).

    Raises:
        UsageError: the name would not be a child of ``root`` (a session built around
            :func:`check_run_id`).
    """
    name = call_id.replace(":", "-")
    directory = root / name
    inside = (
        name not in ("", ".", "..")
        and os.sep not in name
        and (os.altsep is None or os.altsep not in name)
        and "\x00" not in name
    )
    if inside:
        # A link at its place leads elsewhere; a store that cannot be resolved (a loop, no
        # permission) fails when the files arrive, as the host's.
        with contextlib.suppress(OSError, RuntimeError):
            inside = directory.resolve().parent == root.resolve()
    if not inside:
        raise UsageError(
            f"the artifact directory of call {call_id[:140]!r} would not be in the artifact "
            "store; give the session a run_id of letters, digits and _ . : -"
        )
    return directory
