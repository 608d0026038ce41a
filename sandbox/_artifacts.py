"""Artifacts: the files a program leaves in ``/out``, received on the host as frames.

Nothing is copied out of a container's file system (``docker cp`` follows links the program
made, and races it). The guest runner sends each file over the bridge after the program ends
(``artifact`` frames, checked by the bridge); an :class:`ArtifactReceiver` writes them into a
directory the host made for the run, and trusts nothing the guest says:

- the directory is new (``mkdir``, mode 0700) and only this process writes in it; each file
  is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (mode 0600), so nothing is overwritten
  and no link is followed, and its parts of the name were checked against
  ``airlock_wire.ARTIFACT_NAME`` (no ``..``, no absolute path, no hidden file);
- pieces arrive in order (each at the offset the file has reached), a file once ended takes
  no more, and the run's files and bytes stay within the profile's limits (a piece over them
  ends the run as ``limit_exceeded``, naming the amount and the limit);
- size, SHA-256 and media type are computed here, from the bytes received; the media type is
  read from the name's extension with Python's built-in table (never the host's
  ``/etc/mime.types``), ``application/octet-stream`` when unknown.

:meth:`ArtifactReceiver.finish` returns the references (:class:`ArtifactRef`); a run that did
not finish (a limit, a protocol error, a deadline, cancellation) calls
:meth:`ArtifactReceiver.discard_whatever_happens`.
A store on the host that cannot take a file (a full disk, no permission) is the host's
failure, never the program's: :class:`ArtifactStoreFailed`, a :class:`SandboxError` that ends
the run, logged at ERROR.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import mimetypes
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from airlock.bridge import ArtifactRefused
from airlock.sandbox._errors import SandboxError

__all__ = [
    "ARTIFACT_STORE_FAILED",
    "ARTIFACT_URI",
    "ArtifactReceiver",
    "ArtifactRef",
    "ArtifactStoreFailed",
]

_log = logging.getLogger("airlock.sandbox")
ARTIFACT_STORE_FAILED: Final = "artifact_store_failed"
"""The code of :class:`ArtifactStoreFailed` (what the harness tells apart)."""
_NAME_CLASHES: Final = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG})
"""Errors of creating a file that its name explains (a file 'a' and a file 'a/b', a part
too long): the program's doing. Any other error is the host store's."""

ARTIFACT_URI: Final = "airlock://artifacts/"
"""How an artifact is named outside the host: ``airlock://artifacts/RUN/NAME``, where RUN
is the directory the run's artifacts are stored in (under ``$AIRLOCK_HOME/artifacts``)."""
_DIRECTORY_MODE: Final = 0o700
_FILE_MODE: Final = 0o600
_TYPES: Final = mimetypes.MimeTypes()
"""Python's own table: the same answer on every host."""


class ArtifactRef(BaseModel):
    """A file a program left in ``/out``, as stored on the host: a reference, never the
    content (which does not enter the model's context)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Its path under /out, e.g. 'chart.png' or 'tables/a.csv'.")
    size_bytes: int = Field(description="Its size, counted on the host.")
    media_type: str = Field(
        description="From the name's extension, e.g. 'image/png'; 'application/octet-stream' "
        "when unknown. Not read from the content."
    )
    sha256: str = Field(description="SHA-256 of the content, computed on the host (hex).")
    uri: str = Field(description="airlock://artifacts/RUN/NAME: how to ask for it.")
    path: str = Field(description="Where it is stored on the host.")


@dataclass
class _Open:
    fd: int
    received: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)


class ArtifactStoreFailed(SandboxError):
    """The host's artifact store could not take a file (a full or read-only disk, a root
    that is no directory, no permission): the host's failure, not the program's. The run
    ends and what arrived is discarded; the message names host paths (the operator's log
    gets it, a model must not). Not retryable: the operator must fix the store first."""

    code = ARTIFACT_STORE_FAILED

    def __init__(self, directory: Path, error: OSError) -> None:
        super().__init__(
            f"the artifact store cannot take a program's files in {str(directory)!r} "
            f"({error.strerror or type(error).__name__}); free space or fix the store's "
            "permissions (Harness(artifacts=...), $AIRLOCK_HOME/artifacts)"
        )
        self.directory = directory
        self.errno = error.errno


def _media_type(name: str) -> str:
    found, _ = _TYPES.guess_type(name, strict=True)
    return found or "application/octet-stream"


def _size_text(size: int) -> str:
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB ({size} bytes)"
    return f"{size} bytes"


class ArtifactReceiver:
    """Receives one run's artifacts into ``directory`` (created on the first file; it must
    not exist yet), within ``max_files`` files and ``max_bytes`` bytes.

    Implements :class:`airlock.bridge.ArtifactSink`; the bridge calls :meth:`receive` from
    worker threads, one piece at a time, in the order the guest sent them.
    """

    def __init__(self, directory: Path, *, max_files: int, max_bytes: int) -> None:
        self.directory = directory
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._open: dict[str, _Open] = {}
        self._done: dict[str, ArtifactRef] = {}
        self._bytes = 0
        self._created = False
        self._discarded = False
        self._lock = threading.Lock()

    def receive(self, name: str, offset: int, data: bytes, *, end: bool) -> None:
        """Store one piece of ``name`` (see :class:`airlock.bridge.ArtifactSink`).

        Raises:
            ArtifactRefused: over a limit (``limit``), or a piece out of order, of a file
                already ended or whose name clashes with another's (protocol).
            ArtifactStoreFailed: the host's store could not take the piece.
        """
        with self._lock:
            if self._discarded:
                # A piece whose worker thread outlived its run (cancelled meanwhile) must not
                # make the directory again.
                raise ArtifactRefused(f"artifact {name!r}: the run was ended", limit=False)
            entry = self._open.get(name)
            if entry is None:
                entry = self._begin(name, offset)
            if offset != entry.received:
                raise ArtifactRefused(
                    f"artifact {name!r}: a piece at offset {offset}, expected {entry.received}",
                    limit=False,
                )
            self._bytes += len(data)
            if self._bytes > self.max_bytes:
                raise ArtifactRefused(
                    f"the files in /out hold more than {_size_text(self.max_bytes)} (the "
                    f"artifact limit; {_size_text(self._bytes)} arrived so far): write "
                    "smaller files or fewer of them",
                    limit=True,
                )
            view = memoryview(data)
            try:
                while view:
                    written = os.write(entry.fd, view)
                    view = view[written:]
            except OSError as exc:  # a full disk, a quota: nothing the program did
                raise self._store_failed(exc) from exc
            entry.digest.update(data)
            entry.received += len(data)
            if end:
                os.close(entry.fd)
                del self._open[name]
                self._done[name] = ArtifactRef(
                    name=name,
                    size_bytes=entry.received,
                    media_type=_media_type(name),
                    sha256=entry.digest.hexdigest(),
                    uri=f"{ARTIFACT_URI}{self.directory.name}/{name}",
                    path=str(self.directory / name),
                )

    def _begin(self, name: str, offset: int) -> _Open:
        if name in self._done:
            raise ArtifactRefused(f"artifact {name!r} was sent twice", limit=False)
        if offset != 0:
            raise ArtifactRefused(f"artifact {name!r} starts at offset {offset}", limit=False)
        if len(self._done) + len(self._open) >= self.max_files:
            raise ArtifactRefused(
                f"the program left more than {self.max_files} files in /out (the artifact "
                "limit): write fewer, larger files (one CSV, one archive)",
                limit=True,
            )
        if not self._created:
            try:
                self.directory.parent.mkdir(mode=_DIRECTORY_MODE, parents=True, exist_ok=True)
                self.directory.mkdir(mode=_DIRECTORY_MODE)  # a new directory: nothing else in it
            except OSError as exc:  # the host's store: no name of the program's is in it yet
                raise self._store_failed(exc) from exc
            self._created = True
        head, _, _ = name.rpartition("/")
        try:
            if head:
                # Below a directory only this process writes in, by names the bridge checked.
                (self.directory / head).mkdir(mode=_DIRECTORY_MODE, parents=True, exist_ok=True)
            fd = os.open(
                self.directory / name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                _FILE_MODE,
            )
        except OSError as exc:
            if exc.errno not in _NAME_CLASHES:
                raise self._store_failed(exc) from exc
            # A name that is also another's directory (a file 'a' and a file 'a/b').
            raise ArtifactRefused(
                f"artifact {name!r} cannot be stored beside the others ({exc.strerror})",
                limit=False,
            ) from None
        entry = _Open(fd=fd)
        self._open[name] = entry
        return entry

    def _store_failed(self, exc: OSError) -> ArtifactStoreFailed:
        failed = ArtifactStoreFailed(self.directory, exc)
        # The operator's to fix, and the model is told only that the host failed.
        _log.error("%s", failed)
        return failed

    @property
    def nothing_open(self) -> bool:
        """No file was begun and left unended: :meth:`finish` then only lists what came,
        which costs the event loop less than a worker thread's round trip."""
        return not self._open

    def finish(self) -> tuple[ArtifactRef, ...]:
        """The references of every file received, by name.

        Raises:
            ArtifactRefused: a file was begun and never ended (protocol).
        """
        with self._lock:
            if self._open:
                unfinished = sorted(self._open)
                self._close_open()
                raise ArtifactRefused(f"artifact {unfinished[0]!r} was never finished", limit=False)
            return tuple(self._done[name] for name in sorted(self._done))

    def close(self) -> None:
        """Refuse any later piece and close the files begun and never ended; cheap enough
        for the event loop (removing them is :meth:`discard`'s). Safe to call twice."""
        with self._lock:
            self._discarded = True
            self._close_open()

    def discard(self) -> None:
        """Remove whatever was received (the run did not finish); any later piece is
        refused. Safe to call twice."""
        self.close()
        with self._lock:
            self._done.clear()
            if self._created:
                shutil.rmtree(self.directory, ignore_errors=True)

    async def discard_whatever_happens(self) -> None:
        """:meth:`discard` on a worker thread, awaited to its end even when the caller is
        cancelled meanwhile, then the cancellation goes on: an anyio cancel scope cancels
        again at every await until the run returns, and a removal cancelled before its
        thread began would leave the files behind. The descriptors are closed first, on
        the event loop."""
        self.close()
        removal = asyncio.get_running_loop().run_in_executor(None, self.discard)
        cancelled: asyncio.CancelledError | None = None
        while not removal.done():
            try:
                await asyncio.shield(removal)
            except asyncio.CancelledError as exc:
                cancelled = cancelled or exc
        removal.result()
        if cancelled is not None:
            raise cancelled

    def _close_open(self) -> None:
        for entry in self._open.values():
            with contextlib.suppress(OSError):
                os.close(entry.fd)
        self._open.clear()
