"""The state folder airlock makes is its user's alone (mode 0700, whatever the umask); one
that exists keeps the mode its owner gave it; one that cannot be made says why."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airlock.harness import open_ledger
from airlock.harness._home import make_home
from airlock.tools import LedgerUnavailableError


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _open_folder(home: Path) -> None:
    home.mkdir(parents=True)
    home.chmod(0o755)


# (what is there before, the modes after: path under tmp_path -> mode)
HOMES: dict[str, tuple[Callable[[Path], None], dict[str, int]]] = {
    "nothing": (lambda home: None, {"state": 0o755, "state/home": 0o700}),
    "the home (0755)": (_open_folder, {"state": 0o755, "state/home": 0o755}),
}


@pytest.mark.parametrize("before", sorted(HOMES))
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(make_home, id="make_home"),
        pytest.param(lambda home: open_ledger(f"sqlite://{home}").close(), id="open_ledger"),
    ],
)
def test_the_home_made_is_the_users_alone(
    before: str, make: Callable[[Path], None], tmp_path: Path
) -> None:
    setup, expected = HOMES[before]
    home = tmp_path / "state" / "home"
    setup(home)
    make(home)
    assert {p: _mode(tmp_path / p) for p in expected} == expected


@pytest.mark.parametrize(
    ("where", "says"),
    [
        pytest.param(lambda tmp: tmp / "afile", "File exists", id="a file"),
        pytest.param(lambda tmp: tmp / "afile" / "sub", "Not a directory", id="under a file"),
        pytest.param(lambda tmp: Path("/proc/airlock"), "No such file", id="in /proc"),
    ],
)
def test_a_home_that_cannot_be_made_is_the_ledgers_typed_error(
    where: Callable[[Path], Path], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "afile").write_text("not a folder\n")
    monkeypatch.setenv("AIRLOCK_HOME", str(where(tmp_path)))
    with pytest.raises(LedgerUnavailableError, match=f"its folder cannot be made \\({says}"):
        open_ledger(None)
    with pytest.raises(OSError, match=says):
        make_home(where(tmp_path))


def test_the_home_a_postgres_audit_key_is_made_in_is_the_users_alone(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airlock.harness import open_audit_store
    from tests.postgres import fresh_schema

    home = tmp_path / "state" / "home"
    monkeypatch.setenv("AIRLOCK_HOME", str(home))
    monkeypatch.delenv("AIRLOCK_AUDIT_KEY_FILE", raising=False)
    open_audit_store(fresh_schema(postgres_url)).close()
    assert {p: _mode(p) for p in [home, home / "audit.key"]} == {
        home: 0o700,
        home / "audit.key": 0o600,
    }
    assert _mode(tmp_path / "state") == 0o755
