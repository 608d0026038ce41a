"""The file a kept session's names wait in between programs, whatever a program left there.

Standard library only. Every process of a kept container runs as the same user, so a program
can put anything where the names are kept: a link (to ``/dev/zero``, say), a directory, a
pipe, a file too large to read. The next program's process reads that file before its
program is known, so what it reads is bounded by the runner, never by what a program left;
and the zygote clears the way before each program's process is made, so that one program
cannot leave every later program of the session with nothing kept.
"""

from __future__ import annotations

import errno
import os
import stat


class NotARegularFile(OSError):
    """What stands where the kept names should be is not a regular file of a bounded size."""


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, of ``limit`` bytes at most. Whatever else a
    program may have left there is refused at once: a link is not followed (to ``/dev/zero``,
    it would be read until the memory runs out), a pipe is not waited on, a directory or a
    larger file is not read.

    Raises:
        FileNotFoundError: nothing is at ``path``.
        NotARegularFile: a link, a directory, a pipe or the like, or over ``limit`` bytes.
        OSError: it could not be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFile("a link, not a file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile("not a regular file")
        if info.st_size > limit:  # (a sparse one too: its size is all it says)
            raise NotARegularFile(f"over {limit:,} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1024 * 1024):
            size += len(chunk)
            if size > limit:
                raise NotARegularFile(f"over {limit:,} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def temporary_file(path: str) -> str:
    """Where ``airlock_kept.KeptGlobals.keep`` writes the names before they replace ``path``."""
    return path + ".new"


def clear_way(path: str) -> None:
    """Before the next program's process is made, while no program's process is alive: remove
    whatever a program left at ``path``'s :func:`temporary_file`, and at ``path`` unless it is
    a regular file. A directory or a link there would otherwise leave every later program of
    the session with nothing kept."""
    for leftover, regular_stays in ((temporary_file(path), False), (path, True)):
        try:
            mode = os.lstat(leftover).st_mode
        except OSError:
            continue
        if regular_stays and stat.S_ISREG(mode):
            continue
        try:
            if stat.S_ISDIR(mode):
                import shutil  # loaded only by a zygote that meets a directory here

                shutil.rmtree(leftover)
            else:
                os.unlink(leftover)
        except OSError:
            pass  # the next program keeps nothing then, and its stderr says why


__all__ = ["NotARegularFile", "clear_way", "read_regular", "temporary_file"]
