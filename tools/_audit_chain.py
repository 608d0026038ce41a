"""The audit store's hash chain: each record keyed-hashed over the one before it.

Record *n* (``id`` = n, numbered 1, 2, 3, ... with no gaps) carries
``chain[n] = HMAC-SHA256(key, chain[n-1] || canonical(record n))``, ``chain[0]`` being 32 zero
bytes; the canonical form is the compact JSON of every stored column, the record's number
included. One ``audit_head`` row holds the last number and chain, under a MAC of its own.
:func:`verify_chain` walks the records and reports the first one that does not fit:

    changed    its chain does not match what its content and its predecessor give
               (a field edited, or records reordered: the number is hashed in)
    missing    a number is absent (a record deleted)
    truncated  the head counts more records than there are (the last ones deleted)
    head       the head is missing, does not read back or its MAC is wrong (a store is made
               with a head counting no record, so one without a head had it deleted, with
               every record)
    program    a stored program's text does not match its hash
    index      the effect index (what ``airlock audit find`` searches) disagrees with the
               effects of the record it points to, or a row of it does not read back

The key is 32 random bytes kept in a file beside the database (``audit.db.key``, mode
0600), made when the store is created. Someone who can edit the database but cannot read
the key cannot forge a chain; someone who can read both can, which is why the key should be
readable by the harness's user only, and why exports and spans are a second copy elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

from airlock.policies import UsageError
from airlock.tools._audit import PROGRAM_TOOL
from airlock.tools._sql_rows import SQLConnection

__all__ = [
    "GENESIS",
    "MISSING_HEAD",
    "AuditStoreError",
    "ChainProblem",
    "ChainReport",
    "Linker",
    "canonical",
    "head_mac",
    "link",
    "load_key",
    "split_effect",
    "verify_chain",
]

GENESIS = bytes(32)
_KEY_BYTES = 32
ChainProblem = Literal["changed", "missing", "truncated", "head", "program", "index"]


class AuditStoreError(UsageError):
    """An audit store cannot be used as asked: written by an older airlock without a hash
    chain, its key is missing or unreadable, or (on append) its last records are not the
    ones its head names, so someone deleted or changed them. The message says what to do."""

    code = "audit_store"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainReport:
    """What :func:`verify_chain` found."""

    records: int
    """Records checked (all of them when :attr:`ok`)."""
    programs: int
    """Stored programs checked."""
    head: int
    """The number of records the head says were written."""
    last_chain: str
    """The last record's chain in hex: note it somewhere else to detect a later rewrite."""
    problem: ChainProblem | None = None
    record: int | None = None
    """The first record that does not fit (for ``program``: the record count so far)."""
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Whether every record, the head and every program fit."""
        return self.problem is None


def link(key: bytes, previous: bytes, row: Sequence[Any]) -> bytes:
    """The chain of a record whose stored columns (its number first) are ``row``."""
    return hmac.digest(key, previous + canonical(row), "sha256")


def canonical(row: Sequence[Any]) -> bytes:
    """The bytes a record is hashed as: the compact JSON array of its columns."""
    return _COMPACT(list(row)).encode()


_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=True).encode


class Linker:
    """:func:`link` for a writer: ``linker(previous, number, tail)`` is the chain of the
    record ``(number, *row)`` given ``tail``, ``canonical(row)`` without its opening ``[``
    (a non-empty row), so a writer serializes its rows before it takes the write lock.

    The same HMAC-SHA256, with the key's inner and outer blocks hashed once (RFC 2104) and
    copied for each record: half the cost of a one-shot HMAC, which prepares the key again
    every time.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        block = (hashlib.sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
        self._inner = hashlib.sha256(block.translate(_IPAD))
        self._outer = hashlib.sha256(block.translate(_OPAD))

    def __call__(self, previous: bytes, number: int, tail: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(b"%s[%d,%s" % (previous, number, tail))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def head_mac(key: bytes, records: int, chain: bytes) -> bytes:
    """The MAC of the head row that says ``records`` were written, the last with ``chain``."""
    return hmac.digest(key, b"head" + records.to_bytes(8, "big") + chain, "sha256")


def load_key(key_file: Path, *, create: bool) -> bytes:
    """The chain key in ``key_file``, made first (atomically, mode 0600) when ``create``.

    Raises:
        AuditStoreError: no key and not ``create``; the file cannot be read or made (a
            folder, a link to nowhere, no permission); or it does not hold a key.
    """
    try:
        try:
            data = key_file.read_bytes()
        except FileNotFoundError:
            if key_file.is_symlink() or not create:
                raise
            _write_key(key_file)
            data = key_file.read_bytes()
    except FileNotFoundError:
        if key_file.is_symlink():
            raise _unusable(key_file, "it is a link to a file that does not exist") from None
        raise AuditStoreError(
            f"the audit store's key {str(key_file)!r} is missing; restore it from a backup "
            "(without it the chain cannot be checked or extended), or pass its path"
        ) from None
    except OSError as exc:
        raise _unusable(key_file, exc.strerror or type(exc).__name__) from None
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except ValueError:  # (UnicodeDecodeError included)
        key = b""
    if len(key) != _KEY_BYTES:
        raise AuditStoreError(
            f"{str(key_file)!r} does not hold an audit key ({_KEY_BYTES} bytes in hex); "
            "restore the right file"
        )
    return key


def _unusable(key_file: Path, why: str) -> AuditStoreError:
    return AuditStoreError(
        f"the audit store's key {str(key_file)!r} cannot be read or made ({why}); it must be "
        "a file the harness's user may read: fix or restore it, or pass its path"
    )


def _write_key(key_file: Path) -> None:
    key_file.parent.mkdir(parents=True, exist_ok=True)
    temporary = key_file.with_name(f".{key_file.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (secrets.token_bytes(_KEY_BYTES).hex() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, key_file)  # atomic; another process that won the race keeps its key
    except FileExistsError:
        pass
    finally:
        os.unlink(temporary)


def split_effect(effect: str) -> tuple[str, str, str | None]:
    """``read(billing:invoice/inv_*)`` -> (kind, target, literal prefix of a pattern target,
    ``None`` for a concrete one): the row of the effect index."""
    kind, opening, rest = effect.partition("(")
    if not opening or not rest.endswith(")"):
        return "", effect, None
    target = rest[:-1]
    star = target.find("*")
    return kind, target, (None if star < 0 else target[:star])


def verify_chain(conn: SQLConnection, key: bytes, columns: str) -> ChainReport:
    """Walk every record of the store on ``conn`` in order (``columns``: the stored columns
    after ``id`` and before ``chain``) and report the first that does not fit."""
    checked = 0
    previous = GENESIS

    def bad(problem: ChainProblem, record: int, detail: str) -> ChainReport:
        return _bad(conn, checked, previous, problem, record, detail)

    index = _effect_index(conn)
    pending = next(index, None)
    effects_at = columns.split(", ").index("effects") + 1
    for row in _pages(conn, f"SELECT id, {columns}, chain FROM audit_events", ("id",)):
        number = int(row[0])
        if number != checked + 1:
            return bad(
                "missing",
                checked + 1,
                f"record {checked + 1} is missing (the next one is {number})",
            )
        try:
            intact = hmac.compare_digest(link(key, previous, row[:-1]), _blob(row[-1]))
        except (TypeError, ValueError):  # a column given a value of another type
            intact = False
        if not intact:
            return bad(
                "changed",
                number,
                f"record {number} does not match its chain: changed, or moved from elsewhere",
            )
        if pending is not None and pending[0] < number:
            return bad("index", *_stray(pending, number, "has no such effect"))
        listed: set[tuple[str, str, str | None]] = set()
        while pending is not None and pending[0] == number:
            listed.add(pending[1:])
            pending = next(index, None)
        if listed != {split_effect(e) for e in json.loads(str(row[effects_at]))}:
            return bad(
                "index", number, f"the effect index disagrees with record {number}'s effects"
            )
        previous = _blob(row[-1])
        checked = number
    head = conn.execute("SELECT records, chain, mac FROM audit_head").fetchone()
    if head is None:
        # Every store is made with a head (for no record): without one, it was deleted.
        return bad("head", checked or 1, MISSING_HEAD)
    records = _count(head[0])
    try:
        chain, mac = _blob(head[1]), _blob(head[2])
    except TypeError:
        records = None
    if records is None:
        return bad("head", checked, "the head row does not read back: a column of it was edited")
    if not hmac.compare_digest(head_mac(key, records, chain), mac):
        return bad("head", checked, "the head row's MAC is wrong")
    if records > checked:
        return bad(
            "truncated",
            checked + 1,
            f"records {checked + 1}..{records} are missing: the head says {records} were written",
        )
    if records < checked or not hmac.compare_digest(chain, previous):
        detail = f"the head says {records} records were written, the store holds {checked}"
        return bad("head", records + 1, detail)
    if pending is not None:
        return bad("index", *_stray(pending, checked, "does not exist"))
    report = ChainReport(records=checked, programs=0, head=records, last_chain=previous.hex())
    return _programs(conn, report)


def _count(value: Any) -> int | None:
    """The head's count as stored; None for a value of another type (SQLite lets a column
    hold one) or a number no head holds (its MAC takes 8 bytes)."""
    return value if isinstance(value, int) and 0 <= value < 1 << 64 else None


def _blob(value: Any) -> bytes:
    """A chain or MAC as stored. (``bytes()`` of a number would be that many zero bytes.)

    Raises:
        TypeError: the column holds a value of another type.
    """
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"a blob was expected, not {type(value).__name__}")
    return bytes(value)


# Why a store without its head row is refused: every store is made with one.
MISSING_HEAD = (
    "the head row is missing: it and the records it counted were deleted (or, with no record, "
    "the store was made by an airlock that wrote its head only with the first record; if it "
    "never held one, move it aside and a new one starts)"
)

VERIFY_PAGE = 1000
"""Rows :func:`verify_chain` reads of a table at a time."""


def _pages(conn: SQLConnection, select: str, key: tuple[str, ...]) -> Iterator[Any]:
    """The rows of ``select`` (its first columns: ``key``, unique) in key order, read
    :data:`VERIFY_PAGE` at a time after the last key read: psycopg reads the whole result
    of a statement before handing over its first row, so a log of millions of records
    would be held in memory at once. (Within one snapshot: the pages see one state.)"""
    order = ", ".join(key)
    after = f" WHERE ({order}) > ({', '.join('?' * len(key))})"
    last: tuple[Any, ...] | None = None
    while True:
        rows = conn.execute(
            f"{select}{'' if last is None else after} ORDER BY {order} LIMIT {VERIFY_PAGE}",
            () if last is None else last,
        ).fetchall()
        yield from rows
        if len(rows) < VERIFY_PAGE:
            return
        last = tuple(rows[-1][: len(key)])


_UNREADABLE: Final = (0, "", "", None)  # an index row holding a value of another type


def _effect_index(conn: SQLConnection) -> Iterator[tuple[int, str, str, str | None]]:
    # A second connection would see another snapshot; pages read beside the records' are fine.
    # (SQLite lets a column hold a value of another type: such a row is _UNREADABLE.)
    select = "SELECT event_id, kind, target, prefix FROM audit_effects"
    for number, kind, target, prefix in _pages(conn, select, ("event_id", "kind", "target")):
        fits = type(number) is int and type(kind) is type(target) is str
        fits = fits and (prefix is None or type(prefix) is str)
        yield (number, kind, target, prefix) if fits else _UNREADABLE


def _stray(row: tuple[int, str, str, str | None], at: int, why: str) -> tuple[int, str]:
    """Where verify reports an index row that no record (``at``: the one read) accounts for."""
    if row is _UNREADABLE:
        return max(at, 1), "a row of the effect index does not read back: a column was edited"
    return row[0], f"the effect index lists record {row[0]}, which {why}"


def _programs(conn: SQLConnection, report: ChainReport) -> ChainReport:
    """Each stored text matches its hash, and each program's record (whose fields the chain
    vouches for) finds its text: the text of what ran is evidence too."""

    def problem(count: int, record: int, detail: str) -> ChainReport:
        return replace(report, programs=count, problem="program", record=record, detail=detail)

    count = 0
    for digest, text in _pages(conn, "SELECT hash, text FROM audit_programs", ("hash",)):
        count += 1
        try:
            held = hashlib.blake2b(_blob(text), digest_size=16).hexdigest()
        except TypeError:  # a text given a value of another type
            held = ""
        if held != digest:
            detail = f"program {digest} does not match its hash: its text was changed"
            return problem(count, report.records, detail)
    missing = conn.execute(
        "SELECT id, args_hash FROM audit_events WHERE tool = ? AND stage = 'done' "
        "AND args_hash <> '' AND args_hash NOT IN (SELECT hash FROM audit_programs) "
        "ORDER BY id LIMIT 1",
        (PROGRAM_TOOL,),
    ).fetchone()
    if missing is not None:
        detail = f"record {missing[0]} ran program {missing[1]}, whose text is not stored"
        return problem(count, int(missing[0]), detail)
    return ChainReport(
        records=report.records, programs=count, head=report.head, last_chain=report.last_chain
    )


def _bad(
    conn: SQLConnection,
    checked: int,
    previous: bytes,
    problem: ChainProblem,
    record: int,
    detail: str,
) -> ChainReport:
    head = conn.execute("SELECT records FROM audit_head").fetchone()
    return ChainReport(
        records=checked,
        programs=0,
        head=(None if head is None else _count(head[0])) or 0,
        last_chain=previous.hex(),
        problem=problem,
        record=record,
        detail=detail,
    )
