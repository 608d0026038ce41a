"""A key file that cannot be used (not ASCII, not hex, a folder, a link to nowhere, under a
file) is refused as ``audit_store`` with a message naming it, never a raw ``OSError`` or
``UnicodeDecodeError``: on load, when a store opens to write and when ``verify`` reads it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import audit_app
from airlock.tools import SQLiteAuditStore
from airlock.tools._audit_chain import AuditStoreError, load_key
from tests.tools.test_audit_chain import event

Make = Callable[[Path, pytest.MonkeyPatch], object]


def _bytes(data: bytes) -> Make:
    return lambda key, _: key.write_bytes(data)


def _folder(key: Path, _: pytest.MonkeyPatch) -> None:
    key.mkdir()


def _nowhere(key: Path, _: pytest.MonkeyPatch | None = None) -> None:
    key.symlink_to(key.parent / "gone" / "audit.key")


def _unreadable(key: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key.write_text("ab" * 32)
    key.chmod(0)
    if os.geteuid() == 0:  # root reads it anyway: make the read fail as it would for others
        real = Path.read_bytes

        def refuse(self: Path) -> bytes:
            if self == key:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", refuse)


BAD_KEYS: list[tuple[str, Make, str]] = [
    ("bytes that are not ASCII", _bytes(b"\xff\xfe" + b"ab" * 31), "does not hold an audit key"),
    ("hex of the wrong length", _bytes(b"ab" * 16), "does not hold an audit key"),
    ("not hex", _bytes(b"zz" * 32), "does not hold an audit key"),
    ("an empty file", _bytes(b""), "does not hold an audit key"),
    ("a folder", _folder, "cannot be read"),
    ("a link to nowhere", _nowhere, "cannot be read"),
    ("a file nobody may read", _unreadable, "cannot be read"),
]


@pytest.mark.parametrize("create", [False, True], ids=["load", "create"])
@pytest.mark.parametrize(("name", "make", "message"), BAD_KEYS, ids=[k[0] for k in BAD_KEYS])
def test_a_bad_key_file_is_an_audit_store_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    make: Make,
    message: str,
    create: bool,
) -> None:
    key = tmp_path / "audit.db.key"
    make(key, monkeypatch)
    with pytest.raises(AuditStoreError, match=message) as caught:
        load_key(key, create=create)
    assert caught.value.code == "audit_store"
    assert str(key) in str(caught.value), name


def test_a_key_under_a_file_cannot_be_made_or_read(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    key = tmp_path / "plain" / "audit.db.key"
    for create in (False, True):
        with pytest.raises(AuditStoreError, match="cannot be"):
            load_key(key, create=create)


@pytest.mark.parametrize(("name", "make", "message"), BAD_KEYS, ids=[k[0] for k in BAD_KEYS])
def test_a_store_refuses_a_bad_key_and_verify_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, make: Make, message: str
) -> None:
    path = tmp_path / "audit.db"
    store = SQLiteAuditStore(path)
    store.append([event(1)])
    store.close()
    key = tmp_path / "audit.db.key"
    key.unlink()
    make(key, monkeypatch)
    with pytest.raises(AuditStoreError, match=message):
        SQLiteAuditStore(path)
    result = CliRunner().invoke(audit_app, ["verify", "--db", str(path)])
    assert result.exit_code == 2, (name, result.output, result.exception)
    assert "Traceback" not in result.output


def test_a_new_store_whose_key_is_a_link_to_nowhere_is_refused(tmp_path: Path) -> None:
    _nowhere(tmp_path / "audit.db.key")
    with pytest.raises(AuditStoreError, match="cannot be read"):
        SQLiteAuditStore(tmp_path / "audit.db")
