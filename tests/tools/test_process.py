"""The one liveness check: a process mark survives pid reuse; what cannot be judged is unknown."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

from airlock.tools import ProcessMark
from airlock.tools._step_owner import owner_alive, owner_token


def _exited_child() -> ProcessMark:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mark = ProcessMark.of(child.pid)
    finally:
        child.kill()
        child.wait()
    return mark


def _reused(mark: ProcessMark) -> ProcessMark:
    """This process's pid, started at another time: what a reused pid looks like."""
    boot, namespace, ticks = (mark.start or "b:n:0").split(":")
    return dataclasses.replace(
        mark, created=(mark.created or 0) - 3600, start=f"{boot}:{namespace}:{int(ticks) + 1}"
    )


_BEFORE_BOOT = 1.0  # 1970: before any boot of this machine


CASES: dict[str, tuple[Callable[[], ProcessMark], str]] = {
    "this process": (ProcessMark.of, "alive"),
    "an exited process": (_exited_child, "dead"),
    "a reused pid": (lambda: _reused(ProcessMark.of()), "dead"),
    "a reused pid, wall clock only": (
        lambda: dataclasses.replace(ProcessMark.of(), created=1.0, start=None),
        "dead",
    ),
    "an earlier boot": (
        lambda: dataclasses.replace(
            ProcessMark.of(), created=_BEFORE_BOOT, start="another-boot:1:1"
        ),
        "dead",
    ),
    "another machine of this hostname, started since this boot": (
        lambda: dataclasses.replace(ProcessMark.of(), start="another-boot:1:1"),
        "unknown",
    ),
    "another boot, no wall-clock start": (
        lambda: dataclasses.replace(ProcessMark.of(), created=None, start="another-boot:1:1"),
        "unknown",
    ),
    "another PID namespace": (
        lambda: dataclasses.replace(
            ProcessMark.of(), start=f"{(ProcessMark.of().start or 'b:n:1').split(':')[0]}:1:1"
        ),
        "unknown",
    ),
    "another host": (
        lambda: dataclasses.replace(ProcessMark.of(), host="elsewhere.example"),
        "unknown",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_mark_tells_its_process_apart(case: str) -> None:
    make, expected = CASES[case]
    assert make().state() == expected


# mark -> its judgement: what `state` reads as dead, told apart where another machine of this
# hostname could be behind it (the write path waits for the lease on those)
JUDGEMENTS: dict[str, tuple[Callable[[], ProcessMark], str]] = {
    "this process": (ProcessMark.of, "alive"),
    "an exited process": (_exited_child, "dead"),
    "a reused pid": (lambda: _reused(ProcessMark.of()), "dead"),
    "another kernel, started before this boot": (CASES["an earlier boot"][0], "other_boot"),
    "another kernel, started since this boot": (
        CASES["another machine of this hostname, started since this boot"][0],
        "unknown",
    ),
    "a reused pid, wall clock only": (CASES["a reused pid, wall clock only"][0], "unseen"),
    "an exited process, wall clock only": (
        lambda: dataclasses.replace(_exited_child(), start=None),
        "unseen",
    ),
    "another host": (CASES["another host"][0], "unknown"),
}


@pytest.mark.parametrize("case", list(JUDGEMENTS), ids=list(JUDGEMENTS))
def test_a_judgement_keeps_apart_what_another_machine_could_be(case: str) -> None:
    make, expected = JUDGEMENTS[case]
    mark = make()
    assert mark.judge() == expected
    assert mark.state() == ("dead" if expected in ("other_boot", "unseen") else expected)


def test_a_token_reads_back_as_the_same_mark() -> None:
    mark = ProcessMark.of()
    assert ProcessMark.parse(mark.token()) == mark
    assert mark.token().endswith(f":{os.getpid()}")


@pytest.mark.parametrize(
    ("token", "parsed"),
    [
        ("host:42", ProcessMark(host="host", pid=42, created=None)),
        ("host@12.5@b:n:7:42", ProcessMark(host="host", pid=42, created=12.5, start="b:n:7")),
        ("host", None),
        (":42", None),
        ("host:pid", None),
        ("host@not-a-time@:42", None),
    ],
    ids=["bare", "full", "no-pid", "no-host", "pid-not-a-number", "bad-start-time"],
)
def test_parse_reads_tokens_and_refuses_what_it_cannot_read(
    token: str, parsed: ProcessMark | None
) -> None:
    assert ProcessMark.parse(token) == parsed


def test_the_write_path_owner_check_uses_the_mark() -> None:
    assert owner_alive(owner_token()) is True
    assert owner_alive(_exited_child().token()) is False
    assert owner_alive(_reused(ProcessMark.of()).token()) is False
    assert owner_alive(f"elsewhere.example:{os.getpid()}") is None
    assert owner_alive(f"{socket.gethostname()}:nonsense") is None
    assert owner_alive(None) is None
