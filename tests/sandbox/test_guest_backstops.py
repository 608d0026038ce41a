"""The guest ends its program itself when the host cannot: the runner as a process on the host.

A host killed mid-run closes the bridge (the kernel does): the runner then exits, and in a
container, where it is the init, the container stops with it. A host that stays connected but
does nothing (stuck) cannot end the program either: the run frame's ``deadline_s`` does, even
in a long call into C that holds the interpreter lock. The container tests are in
``test_host_crash.py``; these cover the runner's logic quickly.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge.airlock_wire import WARM_UP_IMPORTS
from airlock.sandbox.guest import airlock_deadline as deadline
from tests.sandbox.guest_image import RUNNER

SPIN = "x = 0\nwhile True:\n    x += 1\n"
SLEEP = "import time\ntime.sleep(60)\n"
BACKTRACK = "import re\nre.match('(a*)*b', 'a' * 40)\n"
"""One call into C, holding the interpreter lock for hours: no Python thread runs meanwhile."""


class _Host:
    """The test's end of one runner's bridge."""

    def __init__(self, child: subprocess.Popen[bytes], conn: socket.socket) -> None:
        self.child = child
        self.conn = conn
        self.stream = conn.makefile("rwb")

    def recv(self) -> dict[str, Any]:
        (size,) = struct.unpack(">I", self.stream.read(4))
        return json.loads(self.stream.read(size))  # type: ignore[no-any-return]

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.stream.write(struct.pack(">I", len(body)) + body)
        self.stream.flush()

    def run(self, program: str, mode: str, deadline_s: float | None) -> None:
        self.send(
            {"type": "run", "program": program, "mode": mode,
             "allowed_imports": sorted(WARM_UP_IMPORTS), "output_limit": 4096, "tools": [],
             **({"deadline_s": deadline_s} if deadline_s is not None else {})}
        )  # fmt: skip

    def hang_up(self) -> None:
        self.stream.close()
        self.conn.close()


@pytest.fixture
def host() -> Iterator[_Host]:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bridge.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(1)
        child = subprocess.Popen([sys.executable, "-I", str(RUNNER), path], env={})
        try:
            listener.settimeout(30)
            conn, _ = listener.accept()
            peer = _Host(child, conn)
            assert peer.recv()["type"] == "hello"
            yield peer
        finally:
            child.kill()
            child.wait(timeout=30)
            listener.close()


# (case, program, mode, run frame's deadline_s, what the host does once it runs, the latest
#  the runner may exit after that (s))
ENDS = [
    ("spin_host_hangs_up", SPIN, "restricted", None, "hang_up", 3.0),
    ("sleep_host_hangs_up", SLEEP, "full", None, "hang_up", 3.0),
    ("spin_host_stuck", SPIN, "restricted", 1.5, "nothing", 4.0),
    ("sleep_host_stuck", SLEEP, "full", 1.5, "nothing", 4.0),
    ("c_call_host_stuck", BACKTRACK, "restricted", 1.5, "nothing", 4.0),
    ("c_call_host_hangs_up", BACKTRACK, "restricted", 1.5, "hang_up", 4.0),
]


@pytest.mark.parametrize(
    ("case", "program", "mode", "deadline_s", "action", "within_s"),
    ENDS,
    ids=[row[0] for row in ENDS],
)
def test_the_runner_ends_the_program_without_the_host(
    host: _Host,
    case: str,
    program: str,
    mode: str,
    deadline_s: float | None,
    action: str,
    within_s: float,
) -> None:
    host.run(program, mode, deadline_s)
    time.sleep(0.5)  # the program runs
    assert host.child.poll() is None, f"{case}: the runner exited before anything happened"
    began = time.monotonic()
    if action == "hang_up":
        host.hang_up()
    try:
        host.child.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: the program still runs {within_s} s after the host {action}")
    assert time.monotonic() - began <= within_s


@pytest.mark.parametrize("mode", ["restricted", "full"])
def test_a_program_that_ends_in_time_is_not_ended(host: _Host, mode: str) -> None:
    host.run("x = sum(range(300_000))\n'fine'\n", mode, 1.5)
    done = host.recv()
    assert done["type"] == "done"
    assert (done["result"]["status"], done["result"]["value"]) == ("ok", "fine")


# (case, the deadline_s a kept program's process reports, whether the zygote then has one)
REPORTS = [
    ("seconds", 1.5, True),
    ("whole_seconds", 2, True),
    ("none", None, False),
    ("bool", True, False),
    ("zero", 0, False),
    ("negative", -1.0, False),
    ("nan", float("nan"), False),
    ("infinite", float("inf"), False),
    ("too_long", 1e9, False),
    ("text", "5", False),
]


@pytest.mark.parametrize(
    ("case", "deadline_s", "counted"), REPORTS, ids=[row[0] for row in REPORTS]
)
def test_the_zygote_counts_a_kept_programs_reported_deadline(
    case: str, deadline_s: object, counted: bool
) -> None:
    read_end, write_end = os.pipe()
    countdown = deadline.Countdown(read_end)
    before = time.monotonic()
    deadline.report(write_end, deadline_s)
    # The program's process holds no end left to write more on.
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.write(write_end, b"x" * 8)
    countdown.read()
    assert countdown.pipe is None
    if not counted:
        assert (countdown.ends_at, countdown.wait_ms(), countdown.passed) == (None, -1, False)
        return
    assert isinstance(deadline_s, (int, float))
    assert countdown.ends_at is not None
    assert before + deadline_s <= countdown.ends_at <= time.monotonic() + deadline_s
    assert 0 < countdown.wait_ms() <= deadline_s * 1000 + 1
    assert not countdown.passed


def test_a_kept_programs_deadline_passes() -> None:
    read_end, write_end = os.pipe()
    countdown = deadline.Countdown(read_end)
    deadline.report(write_end, 0.05)
    countdown.read()
    time.sleep(0.06)
    assert (countdown.passed, countdown.wait_ms()) == (True, 0)


# (case, the deadline_s reported, whether the process stopped before the report was read)
STOPS = [
    ("after_the_report", 30.0, False),
    ("before_the_report", 30.0, True),
    ("no_deadline", None, False),
    ("deadline_sooner", 0.001, False),
]


@pytest.mark.parametrize(("case", "deadline_s", "stopped_first"), STOPS, ids=[r[0] for r in STOPS])
def test_a_kept_program_that_reported_ends_a_moment_later_never_past_its_deadline(
    case: str, deadline_s: float | None, stopped_first: bool
) -> None:
    read_end, write_end = os.pipe()
    countdown = deadline.Countdown(read_end)
    deadline.report(write_end, deadline_s)
    if stopped_first:
        countdown.reported()
        countdown.read()
    else:
        countdown.read()
        countdown.reported()
    assert countdown.ends_at is not None
    assert countdown.ends_at <= time.monotonic() + deadline.REPORTED_GRACE_S
    if deadline_s is not None:  # never past its deadline
        assert countdown.ends_at <= time.monotonic() + deadline_s
    assert 0 <= countdown.wait_ms() <= deadline.REPORTED_GRACE_S * 1000 + 1
