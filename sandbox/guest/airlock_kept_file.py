"""The file a kept session's names wait in between programs, whatever a program left there.

Standard library only. Every process of a kept container runs as the same user, so a program
can put anything where the names are kept: a link (to ``/dev/zero``, say), a directory, a
pipe, a file too large to read, or a file of its own making. The next program's process reads
that file before its program is known, so what reading it costs is bounded by the runner,
never by what a program left: only a regular file of bounded size is read
(:func:`read_regular`), and its format (:func:`encode_names`) is read back in one pass, into
dictionaries keyed by the names' strings, whatever its bytes say (a pickle would build
whatever objects they describe first: a dictionary of integers that all hash alike took the
next program's process longer than its program's deadline). The zygote clears the way before
each program's process is made (:func:`clear_way`), so that one program cannot leave every
later program of the session with nothing kept.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from airlock.sandbox.guest import airlock_clearing as clearing
else:
    import airlock_clearing as clearing

_MAGIC = b"airlock kept names 1\n"
_LENGTH_BYTES = 4
_DATA, _FUNCTION, _MODULE = b"d", b"f", b"m"


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


def encode_names(
    data: dict[str, bytes], functions: dict[str, str], modules: dict[str, str]
) -> bytes:
    """The kept names as their file holds them: a header, then for each name its kind, the
    name and its value (a plain value pickled, a function's source, where a module is), each
    of the last two after its length."""
    parts = [_MAGIC]
    for kind, entries in (
        (_DATA, data),
        (_FUNCTION, {name: _utf8(source) for name, source in functions.items()}),
        (_MODULE, {name: _utf8(where) for name, where in modules.items()}),
    ):
        for name, value in entries.items():
            encoded = _utf8(name)
            parts += (kind, _length(encoded), encoded, _length(value), value)
    return b"".join(parts)


def decode_names(
    blob: bytes,
) -> tuple[dict[str, bytes], dict[str, str], dict[str, str]]:
    """The ``data``, ``functions`` and ``modules`` of :func:`encode_names`, in one pass.

    Raises:
        ValueError: ``blob`` is not such a file (or is cut short).
    """
    if not blob.startswith(_MAGIC):
        raise ValueError("not a file of kept names")
    data: dict[str, bytes] = {}
    functions: dict[str, str] = {}
    modules: dict[str, str] = {}
    view = memoryview(blob)
    at = len(_MAGIC)
    while at < len(blob):
        kind = blob[at : at + 1]
        name, at = _field(view, at + 1)
        value, at = _field(view, at)
        text = name.decode("utf-8", "surrogatepass")
        if kind == _DATA:
            data[text] = value
        elif kind == _FUNCTION:
            functions[text] = value.decode("utf-8", "surrogatepass")
        elif kind == _MODULE:
            modules[text] = value.decode("utf-8", "surrogatepass")
        else:
            raise ValueError(f"no kind of kept name is {kind!r}")
    return data, functions, modules


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a name may be any string a program made


def _length(value: bytes) -> bytes:
    return len(value).to_bytes(_LENGTH_BYTES, "big")


def _field(view: memoryview, at: int) -> tuple[bytes, int]:
    """The field whose length starts at ``at``, and where the next begins."""
    start = at + _LENGTH_BYTES
    end = start + int.from_bytes(view[at:start], "big")
    if start > len(view) or end > len(view):
        raise ValueError("the file of kept names is cut short")
    return bytes(view[start:end]), end


def temporary_file(path: str) -> str:
    """Where ``airlock_kept.KeptGlobals.keep`` writes the names before they replace ``path``."""
    return path + ".new"


def clear_way(path: str) -> None:
    """Before the next program's process is made, while no program's process is alive: remove
    whatever a program left at ``path``'s :func:`temporary_file`, and at ``path`` unless it is
    a regular file. A directory or a link there would otherwise leave every later program of
    the session with nothing kept."""
    clearing.remove(temporary_file(path))
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        clearing.remove(path)  # what will not go stays: the next program keeps nothing


__all__ = [
    "NotARegularFile",
    "clear_way",
    "decode_names",
    "encode_names",
    "read_regular",
    "temporary_file",
]
