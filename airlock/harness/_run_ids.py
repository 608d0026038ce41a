"""Run ids as names on the host: an application may give a session's run id (its own id of a
conversation, such as ``alice@acme.com-conv-42`` or ``slack:C024BE91L/1355517523.000005``),
and each of its programs stores its files in a directory of its own under the artifact store.
A run id is any text of 1 to 256 characters without a control character, checked where the
harness takes it; it names nothing on the host by itself. A program's directory is named
after its call id when that is a plain name (``RUN-m3-NONCE``), otherwise after a plain
prefix and a hash of the whole id, and it is a child of the store whatever the id."""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from typing import Final

from airlock.policies import UsageError

__all__ = ["MAX_RUN_ID", "artifact_dir", "check_run_id"]

MAX_RUN_ID: Final = 256
"""Most characters of a run id."""
_NOT_TEXT: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""C0 and C1 controls, DEL, and lone surrogates (no UTF-8 text: no ledger row can hold them)."""
_PLAIN: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
"""A name as it is: letters, digits, ``_ . -``; no leading ``.`` or ``-`` (a hidden file, an
option), and at most 200 characters (a file name holds 255 bytes)."""
_NOT_PLAIN: Final = re.compile(r"^-|[^A-Za-z0-9_-]")
"""What a hashed name's prefix has instead an ``_`` for (``.`` too: no ``..`` to read)."""


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a run id: text of 1 to :data:`MAX_RUN_ID` characters, none of
    them a control character (C0, C1, DEL) or a lone surrogate. Logs print it on one line
    and the ledger stores it; artifact directories are named by :func:`artifact_dir`.

    Raises:
        UsageError: it is not text, is empty or longer than 256 characters, or holds such a
            character.
    """
    if not isinstance(run_id, str) or not 0 < len(run_id) <= MAX_RUN_ID or _NOT_TEXT.search(run_id):
        raise UsageError(
            f"run_id {str(run_id)[:140]!r} is not a run id: use 1 to {MAX_RUN_ID} characters "
            "without control characters (no line break, tab or NUL), such as 'conv_42'; or "
            "omit it for a fresh one"
        )
    return run_id


def artifact_dir(root: Path, call_id: str) -> Path:
    """Where one program's artifacts go: a directory of its own under ``root``, named after
    its call id when that is a plain name (``RUN:m3-NONCE`` -> ``RUN-m3-NONCE``), else after a
    plain prefix of it and a hash of all of it (``alice@acme.com-conv-42:m1-NONCE`` ->
    ``alice_acme_com-conv-42-m1-NONCE-3f0c...``): a name no id makes a path of.

    Raises:
        UsageError: the directory would not be a child of ``root`` (a link at its place
            leads elsewhere).
    """
    name = call_id.replace(":", "-")
    if not _PLAIN.fullmatch(name) or ".." in name:
        digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        name = f"{_NOT_PLAIN.sub('_', name[:64]) or '_'}-{digest}"
    directory = root / name
    inside = True
    # A link at its place leads elsewhere; a store that cannot be resolved (a loop, no
    # permission) fails when the files arrive, as the host's.
    with contextlib.suppress(OSError, RuntimeError):
        inside = directory.resolve().parent == root.resolve()
    if not inside:
        raise UsageError(
            f"the artifact directory of call {call_id[:140]!r} would not be in the artifact "
            f"store: {name!r} there leads out of it; remove it"
        )
    return directory
