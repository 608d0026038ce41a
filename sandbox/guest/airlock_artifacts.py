"""The files a program leaves in ``/out``, sent to the host as ``artifact`` frames.

Standard library only; shipped in the image next to the runner. After the program ends, the
runner walks the directory the ``run`` frame names (``artifacts.dir``), never following a
link: every directory and file is opened relative to its parent with ``O_NOFOLLOW``. Files
are listed first and opened one at a time as they are sent (however many there are, the
runner holds a few descriptors), and a file is read only when the descriptor is the very
regular file listed (same device and inode), so a link, a device, a fifo or a socket (or a
file removed or swapped meanwhile, or one in a directory the program made unsearchable) is
skipped and reported, never read.

Each file's name is its path under the directory, made to fit ``airlock_wire.ARTIFACT_NAME``
(``a b.png`` -> ``a_b.png``, ``.hidden`` -> ``_hidden``). A name already safe is kept; a
renamed file or directory whose name is taken in its directory (by a file's or a
directory's) gets ``-2``, ``-3``... More files than ``artifacts.files`` (counted, past it,
not named) or more bytes than ``artifacts.bytes`` send nothing and end the run as
``limit_exceeded`` (``artifacts``), naming the amount and the limit. The host checks all of
this again: it trusts no frame.

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
    from airlock.sandbox.guest.airlock_output import is_full
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_wire as wire
    from airlock_output import is_full

_UNSAFE = r"[^A-Za-z0-9._-]"
_MAX_DEPTH = 8
_PART_CHARS = 128
MAX_SKIPPED = 20
"""Skipped entries reported by name; the rest are counted."""
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Artifact:
    """A regular file found under the directory: its name, the path the program gave it
    (its parts under the directory) and what it was when listed. It is opened only when
    sent, so that however many files there are, one at a time is open."""

    __slots__ = ("device", "inode", "name", "path", "size")

    def __init__(self, name: str, path: tuple[str, ...], listed: os.stat_result) -> None:
        self.name = name
        self.path = path
        self.size = listed.st_size
        self.device = listed.st_dev
        self.inode = listed.st_ino


class Skipped:
    """What was not sent and why: the first :data:`MAX_SKIPPED` by name, then counted."""

    __slots__ = ("count", "entries")

    def __init__(self) -> None:
        self.entries: list[dict[str, str]] = []
        self.count = 0

    def add(self, name: str, reason: str) -> None:
        self.count += 1
        if len(self.entries) < MAX_SKIPPED:
            self.entries.append({"name": name, "reason": reason})


def clean_part(part: str) -> str:
    """One path part made to fit :data:`airlock_wire.ARTIFACT_NAME`."""
    import re  # where a program leaves files; its patterns are cached by re

    cleaned = re.sub(_UNSAFE, "_", part)[:_PART_CHARS] or "_"
    return "_" + cleaned[1:] if cleaned[0] in ".-" else cleaned


class _Numbering:
    """Numbers for the parts of one directory that clash, each family of candidates
    (``stem-N.ext`` for one stem, extension and width of N) tried on from where it was left:
    a candidate found taken is never tried again, so naming stays linear in the names however
    many clean to the same part (names in a script :func:`clean_part` replaces whole)."""

    __slots__ = ("following", "taken")

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.following: dict[tuple[str, str, int], int] = {}

    def unique(self, part: str) -> str:
        """``part``, or the first of ``part-2``, ``part-3``... not taken (numbered before
        the extension, the stem cut so that the whole fits in :data:`_PART_CHARS`)."""
        if part not in self.taken:
            self.taken.add(part)
            return part
        stem, dot, extension = part.partition(".")
        tail = dot + extension
        if len(tail) >= _PART_CHARS // 2:  # the number goes at the end instead
            stem, tail = part, ""
        width = 1
        while True:
            head = stem[: _PART_CHARS - len(tail) - 1 - width]
            family = (head, tail, width)
            number = self.following.get(family, max(2, 10 ** (width - 1)))
            while number < 10**width:
                candidate = f"{head}-{number}{tail}"
                number += 1
                if candidate not in self.taken:
                    self.following[family] = number
                    self.taken.add(candidate)
                    return candidate
            self.following[family] = number
            width += 1


def _parts(names: list[str]) -> dict[str, str]:
    """The part of its artifact name each of ``names`` (the files and directories of one
    directory, sorted) gets, unique among them: a directory's part begins its files' names,
    so a file and a directory cannot share one either. A name :func:`clean_part` leaves as
    it is keeps it; the others, in order, are cleaned and numbered when taken, so that
    renaming one file never hands its name to another."""
    chosen = {name: name for name in names if clean_part(name) == name}
    numbering = _Numbering(set(chosen))
    for name in names:
        if name not in chosen:
            chosen[name] = numbering.unique(clean_part(name))
    return chosen


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


def _unreadable(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:  # it became a link since the listing
        return "a symbolic link"
    if exc.errno == errno.ENOENT:
        return "removed after it was listed"
    return f"not readable ({errno.errorcode.get(exc.errno or 0, exc.errno)})"


def collect(directory: str) -> tuple[list[Artifact], Skipped]:
    """The regular files under ``directory`` (listed, not opened), by name, and what was
    skipped and why."""
    walk = _collect(directory, max_files=None)
    return walk.found, walk.skipped


def _collect(directory: str, *, max_files: int | None) -> _Walk:
    walk = _Walk(max_files)
    try:
        top = os.open(directory, _DIRECTORY_FLAGS)
    except OSError:
        return walk
    try:
        walk.walk(top, (), "", 0)
    finally:
        os.close(top)
    walk.found.sort(key=lambda a: a.name)
    return walk


class _Walk:
    """One walk of the directory: the files found, by name, what was skipped, and how many
    regular files there are. Past ``max_files`` they are counted and no longer named: none
    will be sent, and the refusal that says how many must come before the run's deadline."""

    __slots__ = ("files", "found", "max_files", "skipped")

    def __init__(self, max_files: int | None) -> None:
        self.found: list[Artifact] = []
        self.skipped = Skipped()
        self.files = 0
        self.max_files = max_files

    def walk(self, fd: int, path: tuple[str, ...], prefix: str, depth: int) -> None:
        # Depth first, holding one descriptor per level: never one per directory listed.
        import re

        listed = self._list(fd, prefix)
        self.files += sum(1 for _, s in listed if stat.S_ISREG(s.st_mode))
        naming = self.max_files is None or self.files <= self.max_files
        kept = [n for n, s in listed if stat.S_ISDIR(s.st_mode) or stat.S_ISREG(s.st_mode)]
        parts = _parts(kept) if naming else {n: clean_part(n) for n in kept}
        for raw, listing in listed:
            part = parts.get(raw)
            if part is None:
                self.skipped.add(prefix + clean_part(raw), _kind(listing.st_mode))
                continue
            name = prefix + part
            if stat.S_ISREG(listing.st_mode):
                if naming and re.match(wire.ARTIFACT_NAME, name):  # never after clean_part
                    self.found.append(Artifact(name, (*path, raw), listing))
                elif naming:  # and never sent
                    self.skipped.add(clean_part(raw), "a name the host would refuse")
                continue
            if depth + 1 >= _MAX_DEPTH:
                self.skipped.add(name, f"deeper than {_MAX_DEPTH} directories")
                continue
            try:
                child = os.open(raw, _DIRECTORY_FLAGS, dir_fd=fd)
            except OSError as exc:
                self.skipped.add(name, _unreadable(exc))
                continue
            try:
                self.walk(child, (*path, raw), name + "/", depth + 1)
            finally:
                os.close(child)

    def _list(self, fd: int, prefix: str) -> list[tuple[str, os.stat_result]]:
        listed: list[tuple[str, os.stat_result]] = []
        with os.scandir(fd) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                try:
                    listed.append((entry.name, entry.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # removed meanwhile
                except OSError as exc:  # a directory the program left unsearchable (r--)
                    self.skipped.add(prefix + clean_part(entry.name), _unreadable(exc))
        return listed


def _size_text(size: int) -> str:
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB ({size} bytes)"
    return f"{size} bytes"


def refusal(
    found: list[Artifact], *, max_files: int, max_bytes: int, files: int | None = None
) -> dict[str, Any] | None:
    """The ``LimitExceeded`` error (wire form) when the files are over either limit;
    ``files`` counts them when ``found`` does not hold them all (a walk that stopped naming
    them past the limit)."""
    count = len(found) if files is None else files
    total = sum(a.size for a in found)
    if count > max_files:
        return {
            "type": "LimitExceeded",
            "message": f"the program left {count} files in {wire.OUT_DIR}; the limit is "
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


def _reopen(top: int, artifact: Artifact) -> int | str:
    """The file, opened along the path it was listed at (no link followed), or why not:
    only the very file listed is read, whatever took its place meanwhile."""
    fd = top
    try:
        for part in artifact.path[:-1]:
            parent, fd = fd, os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            if parent != top:
                os.close(parent)
        file = os.open(artifact.path[-1], _FILE_FLAGS, dir_fd=fd)
    except OSError as exc:
        return _unreadable(exc)
    finally:
        if fd != top:
            os.close(fd)
    opened = os.fstat(file)
    same = (opened.st_dev, opened.st_ino) == (artifact.device, artifact.inode)
    if stat.S_ISREG(opened.st_mode) and same:
        return file
    os.close(file)
    return "replaced after it was listed" if stat.S_ISREG(opened.st_mode) else _kind(opened.st_mode)


def send(
    directory: str,
    found: list[Artifact],
    emit: Callable[[dict[str, Any]], None],
    skipped: Skipped,
) -> int:
    """Send each file as ``artifact`` frames: full pieces of
    :data:`airlock_wire.ARTIFACT_CHUNK_BYTES`, then a last one (maybe empty) marked ``end``.
    At most the size counted when the file was listed is sent; a file that is no longer the
    one listed (removed, replaced, a link now) is added to ``skipped``. Returns how many
    files were sent."""
    try:
        top = os.open(directory, _DIRECTORY_FLAGS)
    except OSError as exc:
        for artifact in found:
            skipped.add(artifact.name, _unreadable(exc))
        return 0
    sent = 0
    try:
        for artifact in found:
            file = _reopen(top, artifact)
            if isinstance(file, str):
                skipped.add(artifact.name, file)
                continue
            try:
                _send_file(file, artifact, emit)
            finally:
                os.close(file)
            sent += 1
    finally:
        os.close(top)
    return sent


def _send_file(fd: int, artifact: Artifact, emit: Callable[[dict[str, Any]], None]) -> None:
    offset = 0
    while True:
        want = min(wire.ARTIFACT_CHUNK_BYTES, artifact.size - offset)
        try:
            piece = _read_piece(fd, want) if want > 0 else b""
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
            return


def deliver(
    emit: Callable[[dict[str, Any]], None], request: dict[str, Any], result: dict[str, Any]
) -> None:
    """After a program: send the files it left (when the ``run`` frame asks for them) before
    its ``done``; over either limit, or with ``/out`` full, send none and turn ``result``
    into ``limit_exceeded``. A kept container's zygote empties it before the next program."""
    wanted = request.get("artifacts")
    if not isinstance(wanted, dict) or result.get("status") not in ("ok", "error"):
        return
    directory = str(wanted.get("dir") or wire.OUT_DIR)
    max_files = int(wanted.get("files", 0))
    walk = _collect(directory, max_files=max_files)
    found, skipped = walk.found, walk.skipped
    refused = refusal(
        found, max_files=max_files, max_bytes=int(wanted.get("bytes", 0)), files=walk.files
    )
    if refused is not None or is_full(directory):
        # Full, /out may hold a file cut short by an ENOSPC the program caught: the verdict of
        # one it did not catch (the host names the limit), and none of its files.
        result.update(status="limit_exceeded", exit_status=137, limit="artifacts")
        result["error"] = refused or result.get("error")
        result["has_value"], result["value"] = False, None
    else:
        result["artifacts"] = send(directory, found, emit, skipped)
    if skipped.count:
        result["artifacts_skipped"] = skipped.entries
        result["artifacts_skipped_count"] = skipped.count


__all__ = [
    "MAX_SKIPPED",
    "Artifact",
    "Skipped",
    "clean_part",
    "collect",
    "deliver",
    "refusal",
    "send",
]
