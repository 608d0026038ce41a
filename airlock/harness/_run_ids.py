"""Run ids as names on the host: an application may give a session's run id (its own id of a
conversation, such as ``alice@acme.com-conv-42`` or ``slack:C024BE91L/1355517523.000005``),
and each of its programs stores its files in a directory of its own under the artifact store.
A run id is any text of 1 to 256 characters without a control character, checked where the
harness takes it; it names nothing on the host by itself. A program's directory is named
after its call id when that is a plain name (``RUN-m3-NONCE``), otherwise after a plain
prefix and a hash of the whole id, and it is a child of the store whatever the id. A run id
that reads as a program's directory (``conv-m1-abc123``) is hashed too, so no run's
directories are named as another run's program's are."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import unicodedata
from pathlib import Path
from typing import Final

from airlock.policies import UsageError

__all__ = ["MAX_RUN_ID", "artifact_dir", "check_run_id", "run_directories"]

MAX_RUN_ID: Final = 256
"""Most characters of a run id."""
_PLAIN: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
"""A name as it is: letters, digits, ``_ . -``; no leading ``.`` or ``-`` (a hidden file, an
option), and at most 200 characters (a file name holds 255 bytes)."""
_NOT_PLAIN: Final = re.compile(r"^-|[^A-Za-z0-9_-]")
"""What a hashed name's prefix has instead an ``_`` for (``.`` too: no ``..`` to read)."""
_HASHED: Final = re.compile(r"-[0-9a-f]{16}$")
"""How a hashed name ends: a plain run id that ends so is hashed too, so that no plain name
is another run's hashed one."""
_PROGRAM: Final = re.compile(r"m[0-9]+-[A-Za-z0-9]{1,32}")
"""A program's part of its call id (``mN-NONCE``)."""
_PROGRAM_DIR: Final = re.compile(rf".+-{_PROGRAM.pattern}")
"""How a program's directory is named (``NAME-mN-NONCE``): a plain run id so named is hashed
too, so that no run's name is another run's program's directory."""
_ENDS_AS_PROGRAM: Final = re.compile(r"-(m[0-9]+)$")
"""A hashed name's prefix that ends so would make ``PREFIX-HASH`` read as a program's
directory of the run ``PREFIX``: its ``-`` becomes ``_``."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _run_name(run_id: str) -> str:
    """What a run's directories are named after: the run id when plain, else a plain prefix
    of it and a hash of the run id alone (so the run's own directories share it exactly).
    Never a name another run's program's directory has (``NAME-mN-NONCE``)."""
    if (
        _PLAIN.fullmatch(run_id)
        and ".." not in run_id
        and not _HASHED.search(run_id)
        and not _PROGRAM_DIR.fullmatch(run_id)
    ):
        return run_id
    prefix = _ENDS_AS_PROGRAM.sub(r"_\1", _NOT_PLAIN.sub("_", run_id[:64]))
    return f"{prefix or '_'}-{_digest(run_id)}"


def run_directories(run_id: str) -> re.Pattern[str]:
    """The directory names of ``run_id``'s artifacts, exactly: its own (``airlock run``'s)
    and one per program (``NAME-mN-NONCE``); never another run's, even one whose id reads
    the same once cleaned."""
    return re.compile(rf"{re.escape(_run_name(run_id))}(?:-{_PROGRAM.pattern})?")


_NO_RUN_ID: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
"""Unicode categories no run id holds: controls, format characters (bidi overrides, zero
widths) and line or paragraph separators, which break or disguise a log line, and surrogates."""


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a run id: text of 1 to :data:`MAX_RUN_ID` characters, none of
    them a control or format character, a line or paragraph separator or a surrogate. Logs
    print it on one line and the ledger stores it; artifact directories are named by
    :func:`artifact_dir`.

    Raises:
        UsageError: it is not text, is empty or longer than 256 characters, or holds such a
            character.
    """
    if (
        not isinstance(run_id, str)
        or not 0 < len(run_id) <= MAX_RUN_ID
        or any(unicodedata.category(c) in _NO_RUN_ID for c in run_id)
    ):
        raise UsageError(
            f"run_id {str(run_id)[:140]!r} is not a run id: use 1 to {MAX_RUN_ID} characters "
            "without control or format characters (no line break or separator, tab, NUL or "
            "bidi mark), such as 'conv_42'; or "
            "omit it for a fresh one"
        )
    return run_id


def artifact_dir(root: Path, call_id: str) -> Path:
    """Where one program's artifacts go: a directory of its own under ``root``, named after
    its call id when that is a plain name (``RUN:m3-NONCE`` -> ``RUN-m3-NONCE``), else after a
    plain prefix of the run id and a hash of the run id alone, then the program's part
    (``alice@acme.com-conv-42:m1-NONCE`` -> ``alice_acme_com-conv-42-3f0c...-m1-NONCE``): a
    name no id makes a path of, and one :func:`run_directories` finds for that run only.

    Raises:
        UsageError: the directory would not be a child of ``root`` (a link at its place
            leads elsewhere).
    """
    run, _, program = call_id.rpartition(":")
    if not run or not _PROGRAM.fullmatch(program):
        run, program = call_id, ""
    name = _run_name(run)
    if program:
        name = f"{name}-{program}"
    directory = root / name
    inside = True
    # Only a link at its place can lead elsewhere (the name is one plain part), and most
    # often nothing is there yet: one look, not the two paths resolved part by part (about
    # 300 us of the event loop, on every program). A store that cannot be resolved (a loop,
    # no permission) fails when the files arrive, as the host's.
    with contextlib.suppress(OSError, RuntimeError):
        if stat.S_ISLNK(os.lstat(directory).st_mode):
            inside = directory.resolve().parent == root.resolve()
    if not inside:
        raise UsageError(
            f"the artifact directory of call {call_id[:140]!r} would not be in the artifact "
            f"store: {name!r} there leads out of it; remove it"
        )
    return directory
