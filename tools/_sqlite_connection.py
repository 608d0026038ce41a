"""One SQLite connection per process to a store's file, shared by its threads under a lock.

The audit store and the ledger open their files the same way: WAL mode, the chosen
``synchronous`` level, autocommit (``isolation_level=None``) so each store writes with an
explicit ``BEGIN IMMEDIATE``, and their schema; or, ``readonly``, an existing file through a
``mode=ro`` URI that creates and changes nothing. A forked child must not share its parent's
handle: it opens its own when it first needs one (the inherited one is never used, nor
closed: closing it may act on the parent's WAL). A fork waits for the transactions of this
process's connections to end, and the child finds their locks free (:mod:`._fork_lock`).

Every operation maps SQLite's errors (:func:`store_error`), so no ``sqlite3`` exception
reaches a store's caller. Before SQLite
sees a file it is checked for what SQLite reports badly or not at all (a directory, a file or
folder that cannot be written, another program's database), and at every read and
transaction the path must still name the file that was opened (same device and inode): a
ledger deleted or replaced under a running process is refused before anything is written, so
nothing is sent on the strength of a file nobody can read any more.

A zero-byte file is what a process leaves when it stops between creating a store's file and
writing its first page; it holds nothing. Opened to write, it becomes a new store (with a
warning in the log); opened read-only, it is refused as not yet a store.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from airlock.tools._errors import (
    LedgerClosedError,
    LedgerError,
    LedgerNotADatabaseError,
    LedgerReadOnlyError,
    LedgerReplacedError,
    LedgerUnavailableError,
)
from airlock.tools._fork_lock import ForkLock
from airlock.tools._sqlite_errors import store_error

__all__ = ["SQLiteConnection", "store_error"]

T = TypeVar("T")
E = TypeVar("E", bound=LedgerError)
_FOLDER_MODE = 0o700
_FILE_MODE = 0o600
_log = logging.getLogger("airlock.ledger")
_CLOSED = "is closed: this process closed it, and nothing more can be recorded in it"


class SQLiteConnection:
    """The connection of one store to the SQLite file at ``path`` (or ``":memory:"``).

    Args:
        path: the file; unless ``readonly``, its folder and it are created when missing
            (mode 0700 and 0600: what exists keeps its mode).
        schema: SQL run on each new writable connection (``CREATE TABLE IF NOT EXISTS ...``).
        label: what the store is called in errors, e.g. ``"the ledger"``.
        marker: the table every file of this store holds; an SQLite file with tables but
            not this one is another program's and is refused.
        pragmas: more ``PRAGMA`` statements run before the schema (``"foreign_keys=ON"``).
        synchronous: the ``PRAGMA synchronous`` level, e.g. ``"FULL"``.
        busy_timeout: seconds to wait for another process's lock before giving up.
        readonly: open an existing file without creating or changing anything.

    Raises:
        LedgerError: the file cannot be used; the subclass says why, the message names it.
    """

    def __init__(
        self,
        path: str | Path,
        schema: str,
        *,
        label: str,
        marker: str,
        pragmas: Sequence[str] = (),
        synchronous: str,
        busy_timeout: float,
        readonly: bool,
    ) -> None:
        self._path = str(path)
        # Identity is checked on the absolute path: a later chdir must not look like a swap.
        self._where = self._path if self._path == ":memory:" else os.path.abspath(self._path)
        self._schema = schema
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._readonly = readonly
        self._pragmas = tuple(pragmas)
        self._label = label
        self._marker = marker
        self._lock = ForkLock(f"{label} {self._path!r}")
        self._pid = os.getpid()
        self._identity: tuple[int, int] | None = None
        self._conn: sqlite3.Connection | None = self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._path == ":memory:":
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout,
                check_same_thread=False,
                isolation_level=None,
            )
            self._prepare(conn)
            return conn
        if self._identity is not None:  # reopening (a forked child): the same file or none
            self._check_identity()
        try:
            self._check_file()
        except OSError as exc:  # e.g. a folder on the way that may not be searched
            raise self._error(
                LedgerUnavailableError, f"cannot be reached ({exc.strerror}); check its folders"
            ) from exc
        with self._mapped():
            if self._readonly:
                uri = f"{Path(self._where).resolve().as_uri()}?mode=ro"
                conn = sqlite3.connect(
                    uri, uri=True, timeout=self._busy_timeout, check_same_thread=False
                )
            else:
                conn = sqlite3.connect(
                    self._where,
                    timeout=self._busy_timeout,
                    check_same_thread=False,
                    isolation_level=None,
                )
            try:
                self._check_marker(conn)
                if not self._readonly:
                    self._prepare(conn)
            except BaseException:
                conn.close()
                raise
        identity = self._stat()
        if self._identity is not None and identity != self._identity:
            conn.close()  # a forked child found another file at the path
            raise self._replaced(identity)
        self._identity = identity
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        for pragma in self._pragmas:
            conn.execute(f"PRAGMA {pragma}")
        conn.executescript(self._schema)

    def _check_file(self) -> None:
        """Refuse what SQLite would report as a bare ``disk I/O error`` or not at all."""
        path = Path(self._where)
        if path.is_dir():
            raise self._error(
                LedgerUnavailableError,
                "is a directory, not a file; pass the path of the file itself",
            )
        if not path.exists():
            if self._readonly:
                raise self._error(LedgerUnavailableError, "does not exist; check the path")
            try:
                # The folder this makes (the last; those above it are ordinary) and the file
                # are the user's alone: a store holds programs' text and write arguments.
                path.parent.mkdir(mode=_FOLDER_MODE, parents=True, exist_ok=True)
            except OSError as exc:
                raise self._error(
                    LedgerUnavailableError,
                    f"cannot be created: its folder cannot be made ({exc.strerror})",
                ) from exc
            self._check_folder(path)
            self._create(path)
            return
        if not os.access(path, os.R_OK):
            raise self._error(
                LedgerUnavailableError, "cannot be read (permission denied); check its owner"
            )
        if path.stat().st_size == 0:
            if self._readonly:
                raise self._error(
                    LedgerNotADatabaseError,
                    "is an empty file (0 bytes): nothing was ever written to it; remove it, "
                    "or let a writer (a harness, `airlock serve`) start it",
                )
            _log.warning(
                "%s %s is an empty file (0 bytes); it is initialised as a new one",
                self._label,
                self._path,
            )
        if self._readonly:
            shm = path.with_name(path.name + "-shm")
            if not shm.exists() and not os.access(path.parent, os.W_OK | os.X_OK):
                raise self._error(
                    LedgerReadOnlyError,
                    f"cannot be read here: its folder {str(path.parent)!r} is read-only, and "
                    f"SQLite must create {shm.name!r} beside it to read; make the folder "
                    "writable, or read a copy",
                )
            return
        if not os.access(path, os.W_OK):
            raise self._error(
                LedgerReadOnlyError,
                f"is read-only (mode {path.stat().st_mode & 0o777:o}); make it writable "
                "(chmod u+w) or use a copy you may write",
            )
        self._check_folder(path)

    def _create(self, path: Path) -> None:
        # SQLite would create it with the umask's mode (0644 as a rule), and its -wal and
        # -shm take the file's mode: made 0600 here first, all three are the user's alone.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _FILE_MODE)
        except FileExistsError:  # another process made it meanwhile, or a link is there
            if path.is_symlink():
                self._create_link_target(path)
            return
        except OSError as exc:
            raise self._error(
                LedgerUnavailableError, f"cannot be created ({exc.strerror}); check its folder"
            ) from exc
        os.close(fd)

    def _create_link_target(self, path: Path) -> None:
        # A link to nothing: SQLite would follow it and create the file it names with the
        # umask's mode. Whoever placed the link chose where the store lives (another disk, say),
        # so the file is made there, 0600 like any new store (refusing would break that setup).
        try:
            target = path.resolve()
        except (OSError, RuntimeError) as exc:  # a loop of links (RuntimeError before 3.13)
            raise self._error(
                LedgerUnavailableError, f"is a link that cannot be followed ({exc}); fix the link"
            ) from exc
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _FILE_MODE)
        except FileExistsError:
            return  # another process made it meanwhile: what is there keeps its mode
        except OSError as exc:
            raise self._error(
                LedgerUnavailableError,
                f"cannot be created: it is a link to {str(target)!r}, which cannot be made "
                f"({exc.strerror}); fix the link or make the folder it points into",
            ) from exc
        os.close(fd)

    def _check_folder(self, path: Path) -> None:
        folder = path.parent
        if not os.access(folder, os.W_OK | os.X_OK):
            raise self._error(
                LedgerReadOnlyError,
                f"cannot be written: its folder {str(folder)!r} is read-only, and SQLite "
                "keeps the file's journal (-wal, -shm) beside it; make the folder writable",
            )

    def _check_marker(self, conn: sqlite3.Connection) -> None:
        tables = {
            str(row[0])
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if self._marker in tables:
            return
        if tables:
            raise self._error(
                LedgerNotADatabaseError,
                f"is an SQLite database but not {self._label} (it has no {self._marker!r} "
                "table); pass the right file",
            )
        if self._readonly:
            raise self._error(
                LedgerNotADatabaseError,
                "holds no tables, so nothing was written to it yet; let a writer start it",
            )

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self._where)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error(
                LedgerUnavailableError, f"cannot be checked ({exc.strerror})"
            ) from exc
        return (st.st_dev, st.st_ino)

    def _check_identity(self) -> None:
        # Called with the lock held. A deleted or replaced file goes on working for whoever
        # holds it open, but nobody else will ever read what is written to it.
        if self._identity is None:
            return
        now = self._stat()
        if now != self._identity:
            raise self._replaced(now)

    def _replaced(self, now: tuple[int, int] | None) -> LedgerReplacedError:
        dev, ino = self._identity or (0, 0)
        found = "the path names nothing" if now is None else f"the path names inode {now[1]}"
        return self._error(
            LedgerReplacedError,
            f"was deleted or replaced while it was open (it was inode {ino} on device {dev}; "
            f"{found}); nothing was written. Restore the file, or restart with the one you mean",
        )

    def _error(self, kind: type[E], problem: str) -> E:
        return kind(f"{self._label} {self._path!r} {problem}", path=self._path, store=self._label)

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise store_error(exc, path=self._path, store=self._label) from exc

    def _connection(self) -> sqlite3.Connection:  # called with the lock held
        if self._conn is None:
            raise self._error(LedgerClosedError, _CLOSED)
        if os.getpid() != self._pid:  # a forked child must not share the parent's handle
            self._pid = os.getpid()
            _INHERITED.append(self._conn)
            self._conn = None
            self._conn = self._connect()
        return self._conn

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` under the lock, outside any explicit transaction.

        Raises:
            LedgerClosedError: this process closed the store.
            LedgerError: SQLite failed, or the file was deleted or replaced since it opened.
        """
        with self._lock, self._mapped():
            conn = self._connection()
            self._check_identity()
            return fn(conn)

    def snapshot(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` under the lock, in one read transaction: all its statements
        see the file as the first one did, whatever other processes commit meanwhile (WAL
        mode lets them write while it reads).

        Raises:
            LedgerClosedError: this process closed the store.
            LedgerError: SQLite failed, or the file was deleted or replaced since it opened.
        """
        with self._lock, self._mapped():
            conn = self._connection()
            self._check_identity()
            # A deferred BEGIN: the first SELECT fixes the snapshot every later one reads.
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside ``BEGIN IMMEDIATE`` (the write lock taken up front):
        committed when the block ends, rolled back when it raises.

        Raises:
            LedgerClosedError: this process closed the store.
            LedgerError: SQLite failed (``ledger_locked`` when another process held the lock
                past ``busy_timeout``), or the file was deleted or replaced since it opened.
        """
        if self._readonly:
            raise self.refuse_write()
        with self._lock, self._mapped():
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Checked with the write lock held: a file replaced now cannot take this
                # transaction's writes, and none is made.
                self._check_identity()
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def refuse_write(self) -> LedgerReadOnlyError:
        """The error for a write to a store opened ``readonly``."""
        return self._error(
            LedgerReadOnlyError, "is open read-only here; open it without readonly to write"
        )

    def close(self) -> None:
        """Close this process's connection; a forked child leaves its parent's handle alone."""
        with self._lock:
            if self._conn is not None and os.getpid() == self._pid:
                self._conn.close()
            elif self._conn is not None:
                _INHERITED.append(self._conn)
            self._conn = None


_INHERITED: list[sqlite3.Connection] = []
"""The handles a forked child inherited: kept, so that they are never closed in it."""
