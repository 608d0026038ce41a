"""The host's artifact receiver once its run was ended: a piece whose worker thread outlived
the run (it was cancelled while the piece was on its way) is refused and makes nothing. A
store the host cannot write is the host's failure (a SandboxError, logged), never a refusal
that would end the run as the program's fault."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.bridge import ArtifactRefused
from airlock.sandbox import SandboxError
from airlock.sandbox._artifacts import ArtifactReceiver, ArtifactStoreFailed

LATE = [
    ("same_file", "tables/a.csv", 4),
    ("new_file", "b.csv", 0),
    ("new_folder", "charts/c.png", 0),
]


@pytest.mark.parametrize(("case", "name", "offset"), LATE, ids=[c[0] for c in LATE])
def test_a_piece_after_discard_is_refused_and_makes_nothing(
    tmp_path: Path, case: str, name: str, offset: int
) -> None:
    receiver = ArtifactReceiver(tmp_path / "run", max_files=4, max_bytes=100)
    receiver.receive("tables/a.csv", 0, b"1234", end=False)
    receiver.discard()
    with pytest.raises(ArtifactRefused) as refused:
        receiver.receive(name, offset, b"5", end=True)
    assert (refused.value.limit, refused.value.message) == (
        False,
        f"artifact {name!r}: the run was ended",
    )
    assert list(tmp_path.iterdir()) == []
    receiver.discard()  # twice is fine


def _root_is_a_file(tmp_path: Path) -> Path:
    (tmp_path / "store").write_text("not a directory")
    return tmp_path / "store" / "run"


def _run_directory_exists(tmp_path: Path) -> Path:
    (tmp_path / "run").mkdir()
    return tmp_path / "run"


HOST_FAILURES = [
    ("root_is_a_file", _root_is_a_file),
    ("run_directory_exists", _run_directory_exists),
]


@pytest.mark.parametrize(("case", "place"), HOST_FAILURES, ids=[c[0] for c in HOST_FAILURES])
def test_a_store_the_host_cannot_make_is_the_hosts_failure_never_the_programs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, place: Any
) -> None:
    directory = place(tmp_path)
    receiver = ArtifactReceiver(directory, max_files=4, max_bytes=100)
    with (
        caplog.at_level(logging.ERROR, logger="airlock.sandbox"),
        pytest.raises(ArtifactStoreFailed) as failed,
    ):
        receiver.receive("a.csv", 0, b"1", end=True)
    assert isinstance(failed.value, SandboxError)
    assert (failed.value.code, failed.value.retryable) == ("artifact_store_failed", False)
    assert str(directory) in str(failed.value)  # the operator's message names the place
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    receiver.discard()


def test_a_full_disk_while_writing_is_the_hosts_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = ArtifactReceiver(tmp_path / "run", max_files=4, max_bytes=100)
    receiver.receive("a.csv", 0, b"1", end=True)

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(ArtifactStoreFailed, match="No space left on device"):
        receiver.receive("b.csv", 0, b"2", end=True)
    monkeypatch.undo()
    receiver.discard()
    assert list(tmp_path.iterdir()) == []


def test_a_name_that_clashes_with_another_stays_the_programs_doing(tmp_path: Path) -> None:
    receiver = ArtifactReceiver(tmp_path / "run", max_files=4, max_bytes=100)
    receiver.receive("a", 0, b"1", end=True)
    with pytest.raises(ArtifactRefused) as refused:
        receiver.receive("a/b", 0, b"2", end=True)
    assert refused.value.limit is False
    receiver.discard()


def _held(directory: Path) -> list[str]:
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory)):
                held.append(fd)
    return held


async def _by_a_scope(discard: Callable[[], Awaitable[None]]) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()  # cancelled at every await inside, as the MCP server's scope does
        await discard()
    assert scope.cancelled_caught


async def _again_and_again(discard: Callable[[], Awaitable[None]]) -> None:
    task = asyncio.ensure_future(discard())
    await asyncio.sleep(0)  # begun
    while not task.done():
        task.cancel()
        await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await task


CANCELLATIONS = [("by_a_scope", _by_a_scope), ("again_and_again", _again_and_again)]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "cancel"), CANCELLATIONS, ids=[c[0] for c in CANCELLATIONS])
async def test_a_discard_cancelled_meanwhile_still_removes_everything(
    tmp_path: Path, case: str, cancel: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]
) -> None:
    receiver = ArtifactReceiver(tmp_path / "run", max_files=4, max_bytes=2**20)
    receiver.receive("done.csv", 0, b"1", end=True)
    receiver.receive("charts/big.bin", 0, b"P" * 1000, end=False)  # begun, never ended
    # The one worker thread is busy: the removal waits its turn while the caller is
    # cancelled.
    loop = asyncio.get_running_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    busy = loop.run_in_executor(None, time.sleep, 0.2)
    await cancel(receiver.discard_whatever_happens)
    assert _held(tmp_path) == []
    assert list(tmp_path.iterdir()) == []
    await busy


# (case, pieces received as (name, offset, bytes, end), whether nothing is open, what finish
# lists or refuses): with nothing open, finishing costs no file's close, and runs on the loop.
FINISHES = [
    ("no file", [], True, []),
    ("one file ended", [("a.csv", 0, b"12", True)], True, ["a.csv"]),
    (
        "two pieces ended",
        [("t/b.csv", 0, b"1", False), ("t/b.csv", 1, b"2", True)],
        True,
        ["t/b.csv"],
    ),
    ("one file begun", [("a.csv", 0, b"12", False)], False, None),
    ("one ended, one begun", [("a.csv", 0, b"1", True), ("b.csv", 0, b"2", False)], False, None),
]


@pytest.mark.parametrize(
    ("case", "pieces", "nothing_open", "listed"), FINISHES, ids=[row[0] for row in FINISHES]
)
def test_nothing_open_says_whether_finishing_has_files_to_close(
    tmp_path: Path,
    case: str,
    pieces: list[tuple[str, int, bytes, bool]],
    nothing_open: bool,
    listed: list[str] | None,
) -> None:
    receiver = ArtifactReceiver(tmp_path / "run", max_files=4, max_bytes=100)
    for name, offset, data, end in pieces:
        receiver.receive(name, offset, data, end=end)
    assert receiver.nothing_open is nothing_open, case
    if listed is None:
        with pytest.raises(ArtifactRefused, match="was never finished"):
            receiver.finish()
        assert receiver.nothing_open  # (the files begun are closed)
    else:
        assert [ref.name for ref in receiver.finish()] == listed, case
