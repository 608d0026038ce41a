"""Each limit stops its bomb with the right reason, and the host and the pool recover."""

from __future__ import annotations

import contextlib
import re
import textwrap
import time
from pathlib import Path

import docker
import psutil
import pytest

from airlock.sandbox import _outcome
from airlock.sandbox._owner import OWNER_LABEL, owner_labels
from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

BOMBS = {
    "fork_bomb": (
        """
        import os
        while True:
            os.fork()
        """,
        "pids",
    ),
    "thread_bomb": (
        """
        import threading, time
        while True:
            threading.Thread(target=time.sleep, args=(60,)).start()
        """,
        "pids",
    ),
    "memory_bomb": (
        """
        blocks = []
        while True:
            blocks.append(bytearray(8 * 1024 * 1024))
        """,
        "memory",
    ),
    "single_huge_allocation": (
        """
        data = bytearray(4 * 1024 * 1024 * 1024)
        """,
        "memory",
    ),
    "infinite_loop": (
        """
        while True:
            pass
        """,
        "timeout",
    ),
    "disk_fill": (
        """
        with open("/tmp/fill", "wb") as f:
            while True:
                f.write(b"x" * 1024 * 1024)
                f.flush()
        """,
        "disk",
    ),
    "file_count_fill": (  # empty files take no room, but an inode each, and clearing time
        """
        n = 0
        while True:
            open(f"/tmp/f{n}", "w").close()
            n += 1
        """,
        "disk",
    ),
    "out_file_count_fill": (  # the same in /out: the artifacts' limit, not /tmp's
        """
        n = 0
        while True:
            open(f"/out/f{n}", "w").close()
            n += 1
        """,
        "artifacts",
    ),
    "stdout_flood": (
        """
        import sys
        chunk = "y" * (1024 * 1024)
        for _ in range(100):
            sys.stdout.write(chunk)
        """,
        "output",
    ),
    "fd_level_flood": (
        """
        import os
        chunk = b"z" * (1024 * 1024)
        for _ in range(100):
            os.write(2, chunk)
        """,
        "output",
    ),
}


_CONTAINER_ID = re.compile(r"/docker[-/]([0-9a-f]{64})")


def _host_process_count() -> int:
    """Processes in this test process's containers, or in containers the engine no longer
    lists (a removed one's leftovers): another test process's containers, and the processes it
    starts, come and go meanwhile, and are none of this run's."""
    in_container: dict[int, str] = {}
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            found = _CONTAINER_ID.search(Path(f"/proc/{pid}/cgroup").read_text())
            if found:
                in_container[pid] = found[1]
    mine = "/".join(owner_labels()[OWNER_LABEL].split("/")[:3]) + "/"
    listed = docker.from_env().containers.list(all=True, ignore_removed=True)
    others = {c.id for c in listed if not c.labels.get(OWNER_LABEL, "").startswith(mine)}
    return sum(1 for container in in_container.values() if container not in others)


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_bomb_is_stopped_at_its_limit(sandbox: Sandbox, bomb: str) -> None:
    program, expected = BOMBS[bomb]
    sandbox.wait_pool()
    before = _host_process_count()
    result = sandbox.run(textwrap.dedent(program), language_mode="full", timeout_s=5)
    assert result.status == "limit_exceeded", (result.status, result.error)
    assert result.limit == expected
    assert not result.has_value
    if expected == "output":
        assert result.truncated
        assert len(result.stdout.encode()) <= sandbox.backend.profile.output_limit_bytes
        assert len(result.stderr.encode()) <= sandbox.backend.profile.output_limit_bytes
    # The host recovers: the container's processes are gone and the pool is full again.
    sandbox.wait_pool()
    deadline = time.monotonic() + 20
    while _host_process_count() > before + 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _host_process_count() <= before + 5
    assert sandbox.backend.pool.ready == sandbox.backend.pool.size


@pytest.mark.parametrize("late_s", [0.0, 0.5, 1.5])
def test_a_host_that_reads_the_counters_late_still_finds_the_limit(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, late_s: float
) -> None:
    """A fork that fails with EAGAIN reaches the host as the program's own error; only the
    cgroup's counters, read after ``done``, make it ``pids``. A loaded host reads them late:
    the container must still be there when it does."""
    read_now = _outcome.read_evidence

    def read_late(*args: object, **kwargs: object) -> object:
        time.sleep(late_s)
        return read_now(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_outcome, "read_evidence", read_late)
    sandbox.wait_pool()
    program = textwrap.dedent(BOMBS["fork_bomb"][0])
    result = sandbox.run(program, language_mode="full", timeout_s=5)
    assert (result.status, result.limit) == ("limit_exceeded", "pids"), result.error


def test_timeout_is_measured_from_the_request(sandbox: Sandbox) -> None:
    result = sandbox.run("while True:\n    pass\n", language_mode="full", timeout_s=1)
    assert result.limit == "timeout"
    assert 1.0 <= result.duration_s < 3.0


def test_resource_use_is_reported(sandbox: Sandbox) -> None:
    result = sandbox.run(
        "total = 0\nfor i in range(300000):\n    total += i\nblob = bytearray(40 * 1024 * 1024)\ntotal\n",
        language_mode="full",
    )
    assert result.ok, result.error
    assert result.value == sum(range(300000))
    assert result.cpu_time_s is not None
    assert result.cpu_time_s > 0
    assert result.peak_memory_bytes is not None
    assert result.peak_memory_bytes > 40 * 1024 * 1024
