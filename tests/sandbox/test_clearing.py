"""What a program leaves in a directory a kept container clears (``airlock_clearing``): every
kind of leftover goes, and nothing outside the directory is touched."""

from __future__ import annotations

import os
import subprocess
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sandbox.guest_image import load_guest

clearing = load_guest("airlock_clearing")

DEEP = 3000
"""Levels of nesting: past the interpreter's recursion limit, and past the longest path."""


def _outside(root: Path) -> Path:
    outside = root / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "keep.txt").write_text("kept")
    return outside


def _files_and_links(out: Path) -> None:
    (out / "sub").mkdir()
    (out / "sub" / "x").write_text("1")
    (out / "file").write_text("2")
    (out / "link").symlink_to(_outside(out.parent))
    (out / "sub" / "link").symlink_to(_outside(out.parent) / "keep.txt")
    os.mkfifo(out / "pipe")


def _locked(out: Path) -> None:
    (out / "d" / "e").mkdir(parents=True)
    (out / "d" / "e" / "secret").write_text("left")
    (out / "d" / "e").chmod(0o500)  # its entries cannot be unlinked
    (out / "d").chmod(0o000)  # it cannot be opened


def _deep(out: Path) -> None:
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEEP):
        os.mkdir("a", dir_fd=fd)
        inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with open(os.open("secret", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as file:
        file.write("left")
    os.chmod(fd, 0o000)
    os.close(fd)


def _named_as_moved(out: Path) -> None:
    # Names the clearing gives the directories it moves up, taken already.
    for n in range(1, 4):
        (out / f".airlock-clearing-{n}").mkdir()
        (out / f".airlock-clearing-{n}" / "inner").mkdir()
        (out / f".airlock-clearing-{n}" / "inner" / "x").write_text("x")
    (out / ".airlock-clearing-4").write_text("a file")


LEFTOVERS: list[tuple[str, Callable[[Path], None]]] = [
    ("files, links and a pipe", _files_and_links),
    ("directories without their permissions", _locked),
    (f"{DEEP} levels deep", _deep),
    ("the names of directories moved up", _named_as_moved),
]


NOBODY = 65534


def _as_a_user(work: Callable[[Path], None]) -> None:
    """Run ``work`` in a directory of its own as a user without privileges, as a container's
    processes run: root would remove what a program took its permissions from regardless."""
    if os.geteuid() != 0:
        with tempfile.TemporaryDirectory() as root:
            work(Path(root))
        return
    root = Path(tempfile.mkdtemp())
    os.chown(root, NOBODY, NOBODY)
    try:
        child = os.fork()
        if child == 0:  # the child never returns to pytest
            status = 1
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                work(root)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(status)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the work as a user failed (above)"
    finally:
        # (coreutils, not the code under test: they go however deep what is left went)
        subprocess.run(["chmod", "-R", "u+rwx", str(root)], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(root)], check=False, capture_output=True)


def _empties(leave: Callable[[Path], None]) -> Callable[[Path], None]:
    def work(root: Path) -> None:
        out = root / "out"
        out.mkdir()
        leave(out)

        clearing.empty(str(out))

        assert list(out.iterdir()) == []
        assert (_outside(root) / "keep.txt").read_text() == "kept"

    return work


def _removes(leave: Callable[[Path], None]) -> Callable[[Path], None]:
    def work(root: Path) -> None:
        out = root / "out"
        out.mkdir()
        leave(out)
        (root / "beside").write_text("stays")

        clearing.remove(str(out))

        assert sorted(p.name for p in root.iterdir()) in (["beside"], ["beside", "outside"])
        assert (_outside(root) / "keep.txt").read_text() == "kept"

    return work


@pytest.mark.parametrize("leave", [c[1] for c in LEFTOVERS], ids=[c[0] for c in LEFTOVERS])
def test_every_leftover_goes_and_nothing_outside_is_touched(
    leave: Callable[[Path], None],
) -> None:
    _as_a_user(_empties(leave))


@pytest.mark.parametrize("leave", [c[1] for c in LEFTOVERS], ids=[c[0] for c in LEFTOVERS])
def test_one_directory_goes_with_everything_under_it_and_nothing_beside_it(
    leave: Callable[[Path], None],
) -> None:
    _as_a_user(_removes(leave))


def test_a_file_or_a_link_goes_and_what_it_named_stays(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    (tmp_path / "link").symlink_to(outside)
    (tmp_path / "file").write_text("x")

    clearing.remove(str(tmp_path / "link"))
    clearing.remove(str(tmp_path / "file"))
    clearing.remove(str(tmp_path / "nothing here"))

    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]
    assert (outside / "keep.txt").read_text() == "kept"
