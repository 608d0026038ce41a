"""What a SQLite store creates is its user's alone, whatever the umask lets others read: a new
folder 0700, a new database file 0600 (its journals, -wal and -shm, take the file's mode);
what was there before keeps the mode its owner gave it."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airlock.tools import LedgerUnavailableError, SQLiteAuditStore, SQLiteLedgerStore

Opener = Callable[[Path], SQLiteLedgerStore | SQLiteAuditStore]
STORES: dict[str, Opener] = {
    "ledger": lambda path: SQLiteLedgerStore(path),
    "audit store": lambda path: SQLiteAuditStore(path),
}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o002, 0o000])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


# (what is there before the store opens, the modes expected after: path -> mode)
Before = Callable[[Path], None]


def _nothing(base: Path) -> None:
    pass


def _open_folder(base: Path) -> None:
    (base / "state").mkdir(mode=0o755)
    (base / "state").chmod(0o755)


def _open_file(base: Path) -> None:
    _open_folder(base)
    (base / "state" / "store.db").touch()
    (base / "state" / "store.db").chmod(0o644)


SETUPS: dict[str, tuple[Before, dict[str, int]]] = {
    "nothing": (_nothing, {"state": 0o700, "state/store.db": 0o600}),
    "the folder (0755)": (_open_folder, {"state": 0o755, "state/store.db": 0o600}),
    "an empty file (0644)": (_open_file, {"state": 0o755, "state/store.db": 0o644}),
}


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("before", sorted(SETUPS))
def test_what_a_store_creates_is_its_users_alone(store: str, before: str, tmp_path: Path) -> None:
    make, expected = SETUPS[before]
    make(tmp_path)
    path = tmp_path / "state" / "store.db"
    opened = STORES[store](path)
    try:
        journals = {f"state/store.db{s}": expected["state/store.db"] for s in ("-wal", "-shm")}
        assert {p: _mode(tmp_path / p) for p in [*expected, *journals]} == {
            **expected,
            **journals,
        }
    finally:
        opened.close()


def test_only_the_stores_own_folder_is_closed_to_others(umask: int, tmp_path: Path) -> None:
    SQLiteLedgerStore(tmp_path / "a" / "b" / "ledger.db").close()
    assert _mode(tmp_path / "a" / "b") == 0o700
    assert _mode(tmp_path / "a") == 0o777 & ~umask


def _link_to_nothing(base: Path) -> None:
    (base / "elsewhere").mkdir(mode=0o755)
    (base / "elsewhere").chmod(0o755)
    _open_folder(base)
    (base / "state" / "store.db").symlink_to(base / "elsewhere" / "store.db")


def _link_to_a_file(base: Path) -> None:
    _link_to_nothing(base)
    (base / "elsewhere" / "store.db").touch()
    (base / "elsewhere" / "store.db").chmod(0o644)


# what is at the store's path -> the mode of the file the link names, once the store opened
LINKS: dict[str, tuple[Before, int]] = {
    "a link to nothing": (_link_to_nothing, 0o600),
    "a link to an empty file (0644)": (_link_to_a_file, 0o644),
}


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("link", sorted(LINKS))
def test_a_store_behind_a_link_is_made_its_users_alone(
    store: str, link: str, tmp_path: Path
) -> None:
    make, expected = LINKS[link]
    make(tmp_path)
    opened = STORES[store](tmp_path / "state" / "store.db")
    try:
        target = tmp_path / "elsewhere" / "store.db"
        files = [target, *(target.with_name(f"store.db{s}") for s in ("-wal", "-shm"))]
        assert {f.name: _mode(f) for f in files if f.exists()} == {f.name: expected for f in files}
        assert (tmp_path / "state" / "store.db").is_symlink()
    finally:
        opened.close()


def _link_into_nowhere(folder: Path) -> None:
    (folder / "store.db").symlink_to(folder.parent / "nowhere" / "x.db")


def _link_loop(folder: Path) -> None:
    (folder / "store.db").symlink_to(folder / "other.db")
    (folder / "other.db").symlink_to(folder / "store.db")


BAD_LINKS: dict[str, Callable[[Path], None]] = {
    "a link into a missing folder": _link_into_nowhere,
    "a loop of links": _link_loop,
}


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("link", sorted(BAD_LINKS))
def test_a_link_to_where_no_file_can_be_is_the_typed_error(
    store: str, link: str, tmp_path: Path
) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    BAD_LINKS[link](folder)
    with pytest.raises(LedgerUnavailableError, match=r"store\.db"):
        STORES[store](folder / "store.db")
