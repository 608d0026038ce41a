"""The files a program leaves in ``/out``, sent to the host as ``artifact`` frames.

Standard library only; shipped in the image next to the runner. After the program ends, the
runner walks the directory the ``run`` frame names (``artifacts.dir``), never following a
link: every directory and file is opened relative to its parent with ``O_NOFOLLOW``, and a
file is read only when the descriptor itself is a regular file, so a link, a device, a fifo
or a socket (or a file swapped for one meanwhile) is skipped and reported, never read.

Each file's name is its path under the directory, made to fit ``airlock_wire.ARTIFACT_NAME``
(``a b.png`` -> ``a_b.png``, ``.hidden`` -> ``_hidden``; a clash gets ``-2``, ``-3``...). More
files than ``artifacts.files`` or more bytes than ``artifacts.bytes`` send nothing and end the
run as ``limit_exceeded`` (``artifacts``), naming the amount and the limit. The host checks
all of this again: it trusts no frame.

A kept runner empties the directory after each program, so a program's artifacts are its own.
"""

from __future__ import annotations

import binascii  # base64's encoder, without base64's imports
import errno
import os
import stat

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from airlock.bridge import airlock_wire as wire
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_wire as wire

_UNSAFE = r"[^A-Za-z0-9._-]"
_MAX_DEPTH = 8
_PART_CHARS = 128
MAX_SKIPPED = 20
"""Skipped entries reported by name; the rest are counted."""
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Artifact:
    """A regular file found under the directory, opened and ready to be sent."""

    __slots__ = ("fd", "name", "size")

    def __init__(self, name: str, fd: int, size: int) -> None:
        self.name = name
        self.fd = fd
        self.size = size


def clean_part(part: str) -> str:
    """One path part made to fit :data:`airlock_wire.ARTIFACT_NAME`."""
    import re  # where a program leaves files; its patterns are cached by re

    cleaned = re.sub(_UNSAFE, "_", part)[:_PART_CHARS] or "_"
    return "_" + cleaned[1:] if cleaned[0] == "." else cleaned


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    head, slash, last = name.rpartition("/")
    stem, dot, extension = last.partition(".")
    number = 2
    while True:
        suffix = f"-{number}"
        candidate = f"{head}{slash}{stem[: _PART_CHARS - len(suffix) - len(dot + extension)]}"
        candidate += f"{suffix}{dot}{extension}"
        if candidate not in taken:
            return candidate
        number += 1


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def collect(directory: str) -> tuple[list[Artifact], list[dict[str, str]], int]:
    """The regular files under ``directory`` (opened), what was skipped and why (the first
    :data:`MAX_SKIPPED`), and how many were skipped in all. The caller closes the files."""
    import re

    found: list[Artifact] = []
    skipped: list[dict[str, str]] = []
    skipped_count = 0
    taken: set[str] = set()

    def skip(name: str, reason: str) -> None:
        nonlocal skipped_count
        skipped_count += 1
        if len(skipped) < MAX_SKIPPED:
            skipped.append({"name": name, "reason": reason})

    try:
        top = os.open(directory, _DIRECTORY_FLAGS)
    except OSError:
        return found, skipped, skipped_count
    pending: list[tuple[int, str, int]] = [(top, "", 0)]
    while pending:
        fd, prefix, depth = pending.pop()
        try:
            with os.scandir(fd) as entries:
                listing = sorted(entries, key=lambda e: e.name)
            for entry in listing:
                name = prefix + clean_part(entry.name)
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue  # gone meanwhile
                if stat.S_ISDIR(mode):
                    if depth + 1 >= _MAX_DEPTH:
                        skip(name, f"deeper than {_MAX_DEPTH} directories")
                        continue
                    try:
                        child = os.open(entry.name, _DIRECTORY_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        skip(
                            name, f"not readable ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
                        )
                        continue
                    pending.append((child, name + "/", depth + 1))
                    continue
                if not stat.S_ISREG(mode):
                    skip(name, _kind(mode))
                    continue
                try:
                    file = os.open(entry.name, _FILE_FLAGS, dir_fd=fd)
                except OSError as exc:
                    # ELOOP: the file became a link since the listing.
                    reason = "a symbolic link" if exc.errno == errno.ELOOP else "not readable"
                    skip(name, reason)
                    continue
                opened = os.fstat(file)
                if not stat.S_ISREG(opened.st_mode):
                    os.close(file)
                    skip(name, _kind(opened.st_mode))
                    continue
                name = _unique(name, taken)
                if not re.match(wire.ARTIFACT_NAME, name):  # never after clean_part; never sent
                    os.close(file)
                    skip(clean_part(entry.name), "a name the host would refuse")
                    continue
                taken.add(name)
                found.append(Artifact(name, file, opened.st_size))
        finally:
            os.close(fd)
    found.sort(key=lambda a: a.name)
    return found, skipped, skipped_count


def _size_text(size: int) -> str:
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB ({size} bytes)"
    return f"{size} bytes"


def refusal(found: list[Artifact], *, max_files: int, max_bytes: int) -> dict[str, Any] | None:
    """The ``LimitExceeded`` error (wire form) when the files are over either limit."""
    total = sum(a.size for a in found)
    if len(found) > max_files:
        return {
            "type": "LimitExceeded",
            "message": f"the program left {len(found)} files in {wire.OUT_DIR}; the limit is "
            f"{max_files} files: write fewer, larger files (one CSV, one archive)",
        }
    if total > max_bytes:
        return {
            "type": "LimitExceeded",
            "message": f"the files in {wire.OUT_DIR} hold {_size_text(total)}; the limit is "
            f"{_size_text(max_bytes)}: write smaller files or fewer of them",
            "size_bytes": total,
            "limit_bytes": max_bytes,
        }
    return None


def _read_piece(fd: int, size: int) -> bytes:
    piece = bytearray()
    while len(piece) < size:
        chunk = os.read(fd, size - len(piece))
        if not chunk:
            break
        piece += chunk
    return bytes(piece)


def send(found: list[Artifact], emit: Callable[[dict[str, Any]], None]) -> None:
    """Send each file as ``artifact`` frames: full pieces of
    :data:`airlock_wire.ARTIFACT_CHUNK_BYTES`, then a last one (maybe empty) marked ``end``.
    At most the size counted when the file was opened is sent."""
    for artifact in found:
        offset = 0
        try:
            while True:
                want = min(wire.ARTIFACT_CHUNK_BYTES, artifact.size - offset)
                try:
                    piece = _read_piece(artifact.fd, want) if want > 0 else b""
                except OSError:
                    piece = b""
                end = len(piece) < wire.ARTIFACT_CHUNK_BYTES or offset + len(piece) >= artifact.size
                emit(
                    {
                        "type": wire.ARTIFACT,
                        "name": artifact.name,
                        "offset": offset,
                        "data": binascii.b2a_base64(piece, newline=False).decode("ascii"),
                        "end": end,
                    }
                )
                offset += len(piece)
                if end:
                    break
        finally:
            os.close(artifact.fd)


def close_all(found: list[Artifact]) -> None:
    """Close the files of a collection that will not be sent."""
    import contextlib  # a collection refused: not on a run's usual path

    for artifact in found:
        with contextlib.suppress(OSError):
            os.close(artifact.fd)


def deliver(
    emit: Callable[[dict[str, Any]], None], request: dict[str, Any], result: dict[str, Any]
) -> None:
    """After a program: send the files it left (when the ``run`` frame asks for them) before
    its ``done``; over either limit, send none and turn ``result`` into ``limit_exceeded``.
    A kept container's zygote empties the directory before the next program."""
    wanted = request.get("artifacts")
    if not isinstance(wanted, dict) or result.get("status") not in ("ok", "error"):
        return
    directory = str(wanted.get("dir") or wire.OUT_DIR)
    found, skipped, skipped_count = collect(directory)
    refused = refusal(
        found, max_files=int(wanted.get("files", 0)), max_bytes=int(wanted.get("bytes", 0))
    )
    if refused is not None:
        close_all(found)
        result.update(status="limit_exceeded", exit_status=137, limit="artifacts", error=refused)
        result["has_value"], result["value"] = False, None
    else:
        send(found, emit)
        result["artifacts"] = len(found)
    if skipped:
        result["artifacts_skipped"] = skipped
        result["artifacts_skipped_count"] = skipped_count


__all__ = [
    "MAX_SKIPPED",
    "Artifact",
    "clean_part",
    "close_all",
    "collect",
    "deliver",
    "refusal",
    "send",
]
