"""Artifacts as stored: what programs left in ``/out``, read back from the host's store.

A harness stores each program's artifacts in a directory of its own under
``$AIRLOCK_HOME/artifacts`` (``RUN-mN-NONCE`` for a session's program, ``RUN`` for
``airlock run``). :class:`ArtifactStore` answers ``airlock artifacts list RUN`` and ``get``,
and resolves the ``airlock://artifacts/DIR/NAME`` URIs an MCP client asks for. It reads
only inside its root: directory and file names are checked against the same rules the
bridge enforces when the files arrive, no link is followed, and only regular files are read.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import re
import stat
from pathlib import Path
from typing import Final

from airlock.bridge import airlock_wire as wire
from airlock.harness._run_ids import check_run_id, run_directories
from airlock.policies import UsageError
from airlock.sandbox import ARTIFACT_URI, ArtifactRef

__all__ = ["ArtifactStore"]

_DIRECTORY: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")
_NAME: Final = re.compile(wire.ARTIFACT_NAME)
_TYPES: Final = mimetypes.MimeTypes()


class ArtifactStore:
    """The artifacts stored under ``root`` (``$AIRLOCK_HOME/artifacts``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def directories(self, run: str) -> list[str]:
        """The directories of ``run``: its own (``airlock run``) and one per program of a
        session (``RUN-mN-NONCE``), oldest first.

        Raises:
            UsageError: ``run`` is not a run id, or it names both one program's directory
                and another run (whose directories the message names).
        """
        check_run_id(run)
        # A program's directory named as it is, or the run's, named as artifact_dir named
        # them: any run id, and only that run's directories (ids alike once cleaned differ).
        mine = run_directories(run)
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        found = [
            e
            for e in entries
            if (e.name == run or mine.fullmatch(e.name))
            and e.is_dir(follow_symlinks=False)
            and _DIRECTORY.fullmatch(e.name)
        ]
        found.sort(key=lambda e: (e.stat(follow_symlinks=False).st_mtime, e.name))
        names = [e.name for e in found]
        # A directory named ``run`` that is not the run's own is another run's program's
        # (stored before such run ids were hashed): one of the two is not the caller's.
        if run in names and not mine.fullmatch(run) and len(names) > 1:
            others = ", ".join(n for n in names if n != run)
            raise UsageError(
                f"{run!r} names both a program's directory ({run}) and run {run!r}, whose "
                f"artifacts are in {others}: name one of the run's directories instead, or "
                "the run that program belongs to"
            )
        return names

    def list(self, run: str) -> list[ArtifactRef]:
        """Every artifact of ``run``, by directory then name, with size, media type and
        SHA-256 read from the files as they are now.

        Raises:
            UsageError: ``run`` is not a run id.
        """
        refs: list[ArtifactRef] = []
        for directory in self.directories(run):
            top = self.root / directory
            for folder, folders, files in os.walk(top, followlinks=False):
                folders.sort()
                for file in sorted(files):
                    path = Path(folder) / file
                    name = path.relative_to(top).as_posix()
                    if _NAME.match(name) and stat.S_ISREG(os.lstat(path).st_mode):
                        refs.append(self._ref(directory, name))
        return refs

    def get(self, run: str, name: str) -> ArtifactRef:
        """One artifact: ``name`` in the directory ``run`` (a program's), or, when ``run``
        is a session's run id, in the one program's directory that holds it.

        Raises:
            UsageError: no such artifact (or it is in several programs' directories: name
                the program's directory), a name that is not an artifact's, or ``run``
                names both a program's directory and another run: neither is preferred.
        """
        _check_name(name)
        holders = [d for d in self.directories(run) if self._is_file(d, name)]
        exact = [d for d in holders if d == run]
        if exact:
            return self._ref(run, name)
        if len(holders) == 1:
            return self._ref(holders[0], name)
        if not holders:
            raise UsageError(
                f"run {run!r} has no artifact {name!r}; `airlock artifacts list {run}` shows "
                "what it has"
            )
        raise UsageError(
            f"artifact {name!r} is in {len(holders)} programs of run {run!r} "
            f"({', '.join(holders)}); name the program's directory instead of the run"
        )

    def read(self, uri: str, *, max_bytes: int) -> tuple[ArtifactRef, bytes]:
        """The artifact ``airlock://artifacts/DIR/NAME`` and its content (at most
        ``max_bytes``).

        Raises:
            UsageError: not such a URI, no such artifact, or larger than ``max_bytes``.
        """
        if not uri.startswith(ARTIFACT_URI):
            raise UsageError(f"{uri!r} is not an artifact's URI ({ARTIFACT_URI}RUN/NAME)")
        directory, _, name = uri.removeprefix(ARTIFACT_URI).partition("/")
        _check_directory(directory)
        _check_name(name)
        if not self._is_file(directory, name):
            raise UsageError(f"no artifact {uri!r}")
        ref = self._ref(directory, name)
        if ref.size_bytes > max_bytes:
            raise UsageError(
                f"artifact {uri!r} is {ref.size_bytes} bytes; at most {max_bytes} are served"
            )
        return ref, self._bytes(directory, name)

    def _is_file(self, directory: str, name: str) -> bool:
        try:
            fd = self._open(directory, name)
        except OSError:
            return False
        os.close(fd)
        return True

    def _open(self, directory: str, name: str) -> int:
        """A descriptor of the regular file ``name`` in ``directory``: every part opened
        relative to the one before with ``O_NOFOLLOW``, so no link anywhere is followed."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.root / directory, flags | os.O_DIRECTORY)
        try:
            *parents, last = name.split("/")
            for part in parents:
                inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = inner
            file = os.open(last, flags | os.O_NONBLOCK, dir_fd=fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(os.fstat(file).st_mode):
            os.close(file)
            raise IsADirectoryError(name)
        return file

    def _bytes(self, directory: str, name: str) -> bytes:
        fd = self._open(directory, name)
        with os.fdopen(fd, "rb") as file:
            return file.read()

    def _ref(self, directory: str, name: str) -> ArtifactRef:
        digest = hashlib.sha256()
        size = 0
        fd = self._open(directory, name)
        with os.fdopen(fd, "rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        media, _ = _TYPES.guess_type(name, strict=True)
        return ArtifactRef(
            name=name,
            size_bytes=size,
            media_type=media or "application/octet-stream",
            sha256=digest.hexdigest(),
            uri=f"{ARTIFACT_URI}{directory}/{name}",
            path=str(self.root / directory / name),
        )


def _check_directory(run: str) -> None:
    if not _DIRECTORY.fullmatch(run):
        raise UsageError(f"{run!r} is not a run id; `airlock audit list` shows runs")


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise UsageError(
            f"{name!r} is not an artifact's name (its path under /out, e.g. 'chart.png')"
        )
