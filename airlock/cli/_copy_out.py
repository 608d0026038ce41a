"""Stored artifacts copied into a directory a person named (``airlock run --out DIR``,
``airlock artifacts get --to DIR``), and the table of where each one went.

The names are the program's (``charts/config.toml``); the directory is the user's, who may
keep links in it (``charts -> ~/site/charts``). So each part of a name is made and opened
relative to the descriptor of the directory above it, never by its path: a link at any depth
under DIR is refused, never followed, and nothing outside DIR is written. A file already
there is kept unless the caller lets a regular file be replaced; the copy is then written
beside it under a temporary name and renamed over it only once whole, so a copy that fails
(the store lost the artifact, the disk is full) leaves that file as it was, and another hard
link to it keeps its content.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from rich.console import Console
from rich.text import Text

from airlock.cli._literal import literal, table
from airlock.policies import UsageError
from airlock.sandbox import ArtifactRef

__all__ = [
    "CopyOutcome",
    "Refusal",
    "copy_artifacts",
    "copy_out",
    "print_artifacts",
    "print_refused",
]

RefusalCode = Literal["bad_name", "link", "exists", "not_directory", "not_file"]
_WHY: dict[RefusalCode, str] = {
    "bad_name": "is not a relative name",
    "link": "is a link (not followed)",
    "exists": "is already there (kept)",
    "not_directory": "is not a directory",
    "not_file": "is not a regular file",
}
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_EXCL: only a file this copy creates is ever opened for writing, never a fifo or a link.
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Refusal:
    """An artifact not copied, and why: ``part`` (a path under the directory) ``code``."""

    name: str
    code: RefusalCode | None
    part: str
    detail: str = ""

    @property
    def why(self) -> str:
        """``charts is a link (not followed)``, or the system's error for ``part``."""
        return f"{self.part} {_WHY[self.code] if self.code else self.detail}"


@dataclass(frozen=True, slots=True)
class CopyOutcome:
    """Where each artifact went (by name, in order), and what was refused."""

    destination: Path
    copied: dict[str, Path] = field(default_factory=dict)
    refused: list[Refusal] = field(default_factory=list)


class _Refused(Exception):
    def __init__(self, code: RefusalCode | None, part: str, detail: str = "") -> None:
        self.code, self.part, self.detail = code, part, detail


def _failed(done: str, exc: OSError) -> _Refused:
    return _Refused(None, done, exc.strerror or type(exc).__name__)


def _kind(parent: int, part: str, done: str, *, want: Literal["directory", "file"]) -> _Refused:
    """Why ``part`` (in the directory ``parent``) could not be opened: what stands there."""
    try:
        mode = os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError as exc:
        return _failed(done, exc)
    if stat.S_ISLNK(mode):
        return _Refused("link", done)
    if want == "file" and stat.S_ISREG(mode):
        return _Refused("exists", done)
    return _Refused("not_directory" if want == "directory" else "not_file", done)


def _enter(parent: int, part: str, done: str) -> int:
    try:
        os.mkdir(part, 0o777, dir_fd=parent)
    except FileExistsError:
        pass  # a directory DIR already holds is entered; anything else fails the open below
    except OSError as exc:
        raise _failed(done, exc) from None
    try:
        return os.open(part, _DIRECTORY, dir_fd=parent)
    except OSError:
        raise _kind(parent, part, done, want="directory") from None


def _replaced_mode(parent: int, part: str, done: str) -> int | None:
    """The permissions of the regular file at ``part`` the copy will replace, or None when
    nothing is there."""
    try:
        found = os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _failed(done, exc) from None
    if stat.S_ISLNK(found):
        raise _Refused("link", done)
    if not stat.S_ISREG(found):
        raise _Refused("not_file", done)
    # A private file stays private; set-user-ID is never carried onto the sandbox's bytes.
    return stat.S_IMODE(found) & 0o777


def _open_new(parent: int, name: str, done: str) -> int:
    try:
        return os.open(name, _NEW, 0o644, dir_fd=parent)
    except FileExistsError:
        raise _kind(parent, name, done, want="file") from None
    except OSError as exc:
        raise _failed(done, exc) from None


def _write_all(fd: int, source: BinaryIO) -> None:
    while chunk := source.read(1 << 20):
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def _place(parent: int, part: str, done: str, source: BinaryIO, *, overwrite: bool) -> None:
    """``source`` written to ``part`` in ``parent``: a new file, or with ``overwrite`` one
    renamed over the regular file there once all of it is written."""
    if overwrite:
        mode = _replaced_mode(parent, part, done)
        name = f".airlock-{secrets.token_hex(8)}.part"  # short: ``part`` may be 255 bytes
    else:
        mode, name = None, part
    fd = _open_new(parent, name, done)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            _write_all(fd, source)
        finally:
            os.close(fd)
        if name != part:
            # A rename replaces the name only: it follows no link that appeared at ``part``,
            # and another hard link to the file there keeps its content.
            os.replace(name, part, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=parent)  # the file this copy created, never the user's
        raise _failed(done, exc) from None


def _copy_one(root: int, ref: ArtifactRef, *, overwrite: bool) -> None:
    parts = ref.name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise _Refused("bad_name", ref.name)
    opened: list[int] = []
    try:
        # The source first: an artifact the store lost leaves DIR as it was.
        with open(ref.path, "rb") as source:
            parent = root
            for depth, part in enumerate(parts[:-1], 1):
                parent = _enter(parent, part, "/".join(parts[:depth]))
                opened.append(parent)
            _place(parent, parts[-1], ref.name, source, overwrite=overwrite)
    except OSError as exc:
        raise _failed(ref.name, exc) from None
    finally:
        for entered in opened:
            os.close(entered)


def copy_out(
    refs: Sequence[ArtifactRef], destination: Path, *, overwrite: bool = False
) -> CopyOutcome:
    """Copy stored artifacts into ``destination`` (created when missing) under their names,
    making the directories they name. An artifact is refused, and the others still copied,
    when a link stands anywhere on its way under ``destination``, when something that is no
    directory stands where a directory goes, or when something stands where the file goes:
    ``overwrite`` replaces a regular file there (not a link), keeping its permissions, and
    only once the whole copy is written: a copy that fails leaves that file as it was.

    Raises:
        UsageError: ``destination`` cannot be made or opened as a directory.
    """
    outcome = CopyOutcome(destination)
    try:
        destination.mkdir(parents=True, exist_ok=True)
        root = os.open(destination, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(
            f"cannot copy into {str(destination)!r}: {exc.strerror or type(exc).__name__}; "
            "name a directory you can write"
        ) from None
    try:
        for ref in refs:
            try:
                _copy_one(root, ref, overwrite=overwrite)
            except _Refused as exc:
                outcome.refused.append(Refusal(ref.name, exc.code, exc.part, exc.detail))
            else:
                outcome.copied[ref.name] = destination / ref.name
    finally:
        os.close(root)
    return outcome


def copy_artifacts(refs: Sequence[ArtifactRef], destination: Path) -> list[Path]:
    """Copy stored artifacts into ``destination`` as :func:`copy_out` does, replacing a
    regular file of the same name (as ``cp`` does), and return where each went.

    Raises:
        UsageError: ``destination`` is unusable, or an artifact was refused (a link on its
            way, or no regular file where it goes); the others are copied.
    """
    outcome = copy_out(refs, destination, overwrite=True)
    if outcome.refused:
        first = outcome.refused[0]
        raise UsageError(
            f"{str(destination / first.name)!r} not copied: {first.why}; move it out of the way"
        )
    return list(outcome.copied.values())


def print_artifacts(
    console: Console, refs: Sequence[ArtifactRef], outcome: CopyOutcome | None
) -> None:
    """The artifacts with where each is: the copy, ``not copied`` and why, or the store."""
    if not refs:
        return
    shown = table("artifact", "bytes", "media type", "sha256", "where")
    refused = {refusal.name: refusal for refusal in outcome.refused} if outcome else {}
    for ref in refs:
        if outcome is None:
            where = literal(ref.path)
        elif ref.name in outcome.copied:
            where = literal(str(outcome.copied[ref.name]))
        else:
            where = Text("not copied: ", "red") + literal(refused[ref.name].why)
        size, media = str(ref.size_bytes), literal(ref.media_type)
        shown.add_row(literal(ref.name), size, media, ref.sha256[:16], where)
    console.print(shown)


def print_refused(console: Console, outcome: CopyOutcome) -> None:
    """Each artifact not copied, by the path it would have had, and why (one line each)."""
    for refusal in outcome.refused:
        target = str(outcome.destination / refusal.name)
        console.print(
            Text("not copied: ", "red") + literal(f"{target}: {refusal.why}"), soft_wrap=True
        )
    if any(refusal.code == "exists" for refusal in outcome.refused):
        console.print("(--overwrite replaces a file that is already there)", markup=False)
