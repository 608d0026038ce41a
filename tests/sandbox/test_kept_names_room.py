"""Names a program could not keep leave the next program nothing, never an older program's.

``/tmp`` is a small tmpfs (16 MiB by default) that holds the program's files and the file of
kept names. A program told "not kept for the next program: nothing" once left the names of
the program before it in place, and the next program read those stale values (a balance of
100 after one that set 40). The old names now go before the new are written, so names as
large as half of ``/tmp`` are kept again and again, and names that do not fit leave nothing.
On the host (the guest's ``airlock_kept``) and in a real kept container under each runtime.
"""

from __future__ import annotations

import builtins
import errno
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from airlock.sandbox import DockerBackend
from tests.bridge.records import ALICE
from tests.sandbox.guest_image import load_guest
from tests.sandbox.runtimes import RUNTIMES, started_backend

kept = load_guest("airlock_kept")
kept_file = load_guest("airlock_kept_file")

MiB = 1024 * 1024


def _keep(path: Path, namespace: dict[str, Any]) -> Any:
    writer = kept.KeptGlobals(str(path))
    writer.keep(namespace, fresh=set(), defined={}, program_file="<program>")
    return writer


def _read(path: Path) -> dict[str, bytes]:
    reader = kept.KeptGlobals(str(path))
    reader.read(memory=64 * MiB)
    return reader.data


def _no_room(_path: str, *_args: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _written_in_part(path: str, mode: str) -> Any:
    """A file of names cut short by a full ``/tmp``: its first bytes written, then none."""
    with builtins.open(path, mode) as file:
        file.write(kept_file.encode_names({}, {}, {})[:10])
    raise OSError(errno.ENOSPC, "No space left on device")


FAILURES: list[tuple[str, str, Any]] = [
    ("opening the new file", "open", _no_room),
    ("writing the new file", "open", _written_in_part),
    ("moving the new file in place", "replace", _no_room),
]
"""Where writing the names may fail for want of room, and how."""


@pytest.mark.parametrize(
    ("where", "failing"), [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES]
)
def test_names_that_could_not_be_written_leave_nothing_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, failing: Any
) -> None:
    path = tmp_path / "names"
    _keep(path, {"balance": 100})
    if where == "open":
        monkeypatch.setattr(kept, "open", failing, raising=False)
    else:
        monkeypatch.setattr(kept.os, "replace", failing)

    with pytest.raises(OSError, match="No space left"):
        _keep(path, {"balance": 40})

    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert _read(path) == {}


def test_the_old_names_are_gone_before_the_new_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "names"
    _keep(path, {"balance": 100})
    seen: list[bool] = []

    def watching(name: str, mode: str) -> Any:
        seen.append(path.exists())
        return builtins.open(name, mode)

    monkeypatch.setattr(kept, "open", watching, raising=False)
    _keep(path, {"balance": 40})

    # /tmp need not hold the old names and the new at once.
    assert seen == [False]
    assert sorted(_read(path)) == ["balance"]


# -- In a real kept container ---------------------------------------------------------------

FIRST = "balance = 100\nstatus = 'draft'\nblob = bytes(9_000_000)\nbalance"
SESSIONS: list[tuple[str, str, str, object, str | None]] = [
    (
        "names of half of /tmp, kept again",
        "balance = 40\nstatus = 'paid'\nbalance",
        "[balance, status, len(blob)]",
        [40, "paid", 9_000_000],
        None,
    ),
    (
        "names larger than /tmp",
        "balance = 40\nstatus = 'paid'\nblob = bytes(17_000_000)\nbalance",
        "[name in globals() for name in ('balance', 'status', 'blob')]",
        [False, False, False],
        "not kept for the next program: nothing (No space left on device)",
    ),
]
"""After :data:`FIRST`: a second program, the third, what the third answers and what the
second is told on its stderr."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=RUNTIMES)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[DockerBackend]:
    async with started_backend(request.param, timeout_s=8.0) as started:
        yield started


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("second_program", "third_program", "third_value", "told"),
    [c[1:] for c in SESSIONS],
    ids=[c[0] for c in SESSIONS],
)
async def test_the_next_program_never_gets_an_older_programs_names(
    backend: DockerBackend,
    second_program: str,
    third_program: str,
    third_value: object,
    told: str | None,
) -> None:
    kept_sandbox = backend.keep(ALICE, idle_timeout=60)
    try:
        first = await kept_sandbox.run(FIRST)
        second = await kept_sandbox.run(second_program)
        third = await kept_sandbox.run(textwrap.dedent(third_program))
    finally:
        await kept_sandbox.close()

    assert (first.status, first.value) == ("ok", 100), first
    assert (second.status, second.value) == ("ok", 40), second
    if told is None:
        assert "not kept" not in second.stderr, second.stderr
    else:
        assert told in second.stderr, second.stderr
    assert (third.status, third.value) == ("ok", third_value), third
    assert kept_sandbox.starts == 1
