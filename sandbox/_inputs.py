"""A run's inputs: host files and directories mounted read-only at ``/data/NAME``.

An input is named by the application or the operator, never by a program; reading it is the
effect ``read(file:NAME)`` (:func:`input_effect`), which a session's grant must cover before
the container starts (``airlock.harness`` checks it). Here the host side is checked before
any container is created, each refusal an :class:`~airlock.sandbox.InputRefused` naming the
input and how to fix it:

- the name is one path part of letters, digits, ``.``, ``_`` and ``-`` (not starting with a
  dot), so ``/data/NAME`` is one entry and the effect one resource;
- the path exists and is not itself a symbolic link (the engine would follow it on the host,
  wherever it leads), and the engine is handed the real path (parent links resolved);
- a file is a regular file; a directory holds directories, regular files and links only
  (links inside resolve inside the container, never on the host): no device, fifo or socket;
- nothing is mounted under a directory: the engine mounts the directory alone, not what is
  mounted under it (a recursive bind would carry those in, and writable: the engine's
  read-only flag covers the top mount only), so a mount point under it (read from the host's
  mount table, :data:`MOUNTINFO`: another file system or a bind mount of the same one) is
  refused rather than shown as the empty directory beneath it;
- everything is readable by the sandbox's user (``o+r``, directories ``o+rx``): the program
  runs as an unprivileged user that owns nothing on the host;
- the total size is within the profile's ``input_limit_bytes``.

What a checked input may still do is in ``SECURITY.md`` (a path swapped between this check
and the engine's mount).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from airlock.bridge import airlock_wire as wire
from airlock.policies import Effect, UsageError, read

__all__ = [
    "INPUT_NAME",
    "INPUT_RESOURCE",
    "InputReason",
    "InputRefused",
    "RunInput",
    "input_effect",
    "resolve_inputs",
]

INPUT_NAME: Final = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
"""An input's name: the entry under ``/data`` and the resource of its effect."""
INPUT_RESOURCE: Final = "file"
"""The service part of an input's resource: ``read(file:NAME)``."""
MOUNTINFO: Final = "/proc/self/mountinfo"
"""The host's mount table, where the mount points under a directory input are found. A host
without it (not Linux) falls back to device numbers: an entry on another device than the
input's is taken for a mount (a bind mount of the same file system then goes unseen)."""
_ESCAPED: Final = re.compile(rb"\\([0-7]{3})")

InputReason = Literal["name", "missing", "link", "kind", "unreadable", "size", "grant"]
"""Why an input was refused: its name, a path that does not exist, a symbolic link, not a
regular file or directory (or a directory holding one, or a mount point under it), not
readable by the sandbox's user (or not walkable: a path over the host's limit),
over the profile's ``input_limit_bytes``, or (a session's check) outside the grant."""


class InputRefused(UsageError):
    """An input cannot be given to a run; nothing was started. :attr:`reason` says why,
    :attr:`size_bytes` and :attr:`limit_bytes` say how much when it is the size."""

    code = "input_refused"

    def __init__(
        self,
        message: str,
        *,
        name: str,
        reason: InputReason,
        size_bytes: int | None = None,
        limit_bytes: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.name = name
        self.reason = reason
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


@dataclass(frozen=True, slots=True)
class RunInput:
    """One checked input: mounted read-only at :attr:`mount_path`."""

    name: str
    source: Path
    """The real host path the engine mounts (parent links resolved; never a link itself)."""
    directory: bool
    size_bytes: int
    """Bytes of the file, or of every regular file under the directory."""
    identity: tuple[int, ...] = ()
    """What was checked at :attr:`source`: its device and inode. A container made with this
    input shows the inode that was at the path then, edits in place included: a file or
    directory replaced since (a new inode at the same path) is not the one it mounted."""

    @property
    def mount_path(self) -> str:
        """Where the program reads it: ``/data/NAME``."""
        return f"{wire.DATA_DIR}/{self.name}"

    @property
    def effect(self) -> Effect:
        """``read(file:NAME)``: what a grant must cover for a run to be given this input."""
        return input_effect(self.name)


def input_effect(name: str) -> Effect:
    """The effect of reading the input ``name``: ``read(file:NAME)``.

    Raises:
        InputRefused: ``name`` is not an input name.
    """
    _check_name(name)
    return read(f"{INPUT_RESOURCE}:{name}")


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not INPUT_NAME.fullmatch(name):
        raise InputRefused(
            f"input name {name!r} must be 1-128 letters, digits, '.', '_' or '-', not "
            "starting with a dot (it becomes /data/NAME); rename it, e.g. 'sales.csv'",
            name=str(name),
            reason="name",
        )


def _size_text(size: int) -> str:
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB ({size} bytes)"
    return f"{size} bytes"


def _readable(mode: int, *, directory: bool) -> bool:
    if directory:
        return bool(mode & stat.S_IROTH and mode & stat.S_IXOTH)
    return bool(mode & stat.S_IROTH)


def _unreadable(name: str, path: str, *, directory: bool) -> InputRefused:
    fix = "chmod o+rx" if directory else "chmod o+r"
    return InputRefused(
        f"input {name!r}: {path!r} is not readable by the sandbox's user (an unprivileged "
        f"uid that owns nothing on this host); `{fix}` it, or give a copy that is",
        name=name,
        reason="unreadable",
    )


def _special(name: str, path: str) -> InputRefused:
    return InputRefused(
        f"input {name!r}: {path!r} is a device, fifo or socket; inputs hold regular files, "
        "directories and links only",
        name=name,
        reason="kind",
    )


def _mounted_under(name: str, path: str, top: str) -> InputRefused:
    return InputRefused(
        f"input {name!r}: {path!r} is a mount point under {top!r} (another file system, or "
        "a bind mount, is mounted there); the sandbox would not see it, since an input's "
        "mount does not carry the mounts under it: unmount it, or give it as an input of its "
        "own",
        name=name,
        reason="kind",
    )


def _lstat(name: str, path: str) -> os.stat_result:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        raise InputRefused(
            f"input {name!r}: {path!r} was removed while the input was checked; give "
            "a directory that does not change while a run starts",
            name=name,
            reason="unreadable",
        ) from None
    except OSError as error:  # made unreadable while it is walked, or a path too long
        raise _unwalkable(name, path, error, directory=False) from error


def _unwalkable(name: str, path: str, error: OSError, *, directory: bool) -> InputRefused:
    if error.errno != errno.ENAMETOOLONG:
        return _unreadable(name, path, directory=directory)
    return InputRefused(
        f"input {name!r}: a path under it is longer than this host's limit ({path[:80]!r}...); "
        "give a directory with fewer levels",
        name=name,
        reason="unreadable",
    )


def _mount_points(real: str) -> list[str] | None:
    """The mount points under the real path ``real`` (not ``real`` itself), sorted, from
    :data:`MOUNTINFO` (its fifth field, octal escapes such as ``\\040`` undone); ``None``
    when the host has no such table."""
    try:
        with open(MOUNTINFO, "rb") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    inside = os.path.join(real, "")
    points: set[str] = set()
    for line in lines:
        fields = line.split(b" ")
        if len(fields) > 4:
            point = os.fsdecode(_ESCAPED.sub(_unescape, fields[4]))
            if point.startswith(inside):
                points.add(point)
    return sorted(points)


def _unescape(octal: re.Match[bytes]) -> bytes:
    return bytes([int(octal[1], 8) & 0xFF])


def _directory_size(name: str, top: str, device: int | None) -> int:
    """Bytes of the regular files under ``top``, each entry checked. Given ``device`` (a
    host without a mount table), an entry on another device is taken for a mount point;
    not otherwise, since an overlay's files carry the device numbers of its layers.

    An explicit stack, not :func:`os.walk`: it recurses once per level and a tree deeper
    than the interpreter's recursion limit would end the check with a RecursionError."""
    total = 0
    folders = [top]
    while folders:
        folder = folders.pop()
        try:
            entries = os.listdir(folder)
        except OSError as error:
            raise _unwalkable(name, folder, error, directory=True) from error
        for entry in entries:
            path = os.path.join(folder, entry)
            info = _lstat(name, path)
            if stat.S_ISLNK(info.st_mode):
                continue  # resolved inside the container, never on the host
            if device is not None and info.st_dev != device:
                raise _mounted_under(name, path, top)
            if stat.S_ISDIR(info.st_mode):
                if not _readable(info.st_mode, directory=True):
                    raise _unreadable(name, path, directory=True)
                folders.append(path)
            elif stat.S_ISREG(info.st_mode):
                if not _readable(info.st_mode, directory=False):
                    raise _unreadable(name, path, directory=False)
                total += info.st_size
            else:
                raise _special(name, path)
    return total


def _one(name: str, given: str | os.PathLike[str]) -> RunInput:
    _check_name(name)
    path = os.path.abspath(os.fspath(given))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise InputRefused(
            f"input {name!r}: {path!r} does not exist; give an existing file or directory",
            name=name,
            reason="missing",
        ) from None
    except OSError as exc:
        raise _unreadable(name, path, directory=False) from exc
    if stat.S_ISLNK(info.st_mode):
        raise InputRefused(
            f"input {name!r}: {path!r} is a symbolic link (to {_target(path)}); give "
            "the file or directory itself, so what is mounted is what you named",
            name=name,
            reason="link",
        )
    source = Path(os.path.realpath(path))
    if stat.S_ISREG(info.st_mode):
        if not _readable(info.st_mode, directory=False):
            raise _unreadable(name, path, directory=False)
        file = (info.st_dev, info.st_ino)
        return RunInput(
            name=name, source=source, directory=False, size_bytes=info.st_size, identity=file
        )
    if stat.S_ISDIR(info.st_mode):
        if not _readable(info.st_mode, directory=True):
            raise _unreadable(name, path, directory=True)
        points = _mount_points(str(source))
        if points:
            inside = os.path.join(path, os.path.relpath(points[0], source))
            raise _mounted_under(name, inside, path)
        # Without a mount table, an entry on another device than the input's is taken for one.
        size = _directory_size(name, path, info.st_dev if points is None else None)
        root = (info.st_dev, info.st_ino)
        return RunInput(name=name, source=source, directory=True, size_bytes=size, identity=root)
    raise _special(name, path)


def _target(link: str) -> str:
    try:
        return repr(os.readlink(link))
    except OSError:  # gone, or replaced by a file, since it was seen
        return "a target it no longer names"


def resolve_inputs(
    inputs: Mapping[str, str | os.PathLike[str]] | None, *, limit_bytes: int
) -> tuple[RunInput, ...]:
    """Check ``inputs`` (name -> host path) for a run; the inputs, sorted by name.

    Raises:
        InputRefused: an input is refused (see the module's docstring), or together they are
            over ``limit_bytes``.
    """
    if not inputs:
        return ()
    checked = tuple(sorted((_one(name, path) for name, path in inputs.items()), key=_by_name))
    total = sum(i.size_bytes for i in checked)
    if total > limit_bytes:
        biggest = max(checked, key=lambda i: i.size_bytes)
        raise InputRefused(
            f"the inputs hold {_size_text(total)}; the limit is {_size_text(limit_bytes)} per "
            f"run (input_limit_bytes; the largest is {biggest.name!r}, "
            f"{_size_text(biggest.size_bytes)}): give less, or raise the profile's limit",
            name=biggest.name,
            reason="size",
            size_bytes=total,
            limit_bytes=limit_bytes,
        )
    return checked


def _by_name(entry: RunInput) -> str:
    return entry.name
