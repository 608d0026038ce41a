"""The guest's output capture (``airlock_output.StreamCapture``), on the host.

Each test captures a descriptor of its own (a copy of ``/dev/null``), not the test process's
stdout or stderr: the capture works on any descriptor, the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sandbox.guest_image import load_guest

output = load_guest("airlock_output")


@pytest.fixture
def target() -> Iterator[int]:
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# More than a pipe holds (64 KiB): the reader thread must empty it while the program writes.
SIZES = [0, 1, 4096, 300_000]


@pytest.mark.parametrize("end_thread", [True, False], ids=["thread_ended", "thread_left"])
@pytest.mark.parametrize("size", SIZES)
def test_everything_written_before_close_is_captured(
    target: int, size: int, end_thread: bool
) -> None:
    data = bytes(i % 251 for i in range(size))
    capture = output.StreamCapture(target, 1 << 20, None)
    _write(target, data)
    capture.close(end_thread=end_thread)
    assert bytes(capture.data) == data
    assert not capture.truncated


@pytest.mark.parametrize("end_thread", [True, False], ids=["thread_ended", "thread_left"])
def test_the_descriptor_leads_where_it_led_again_after_close(target: int, end_thread: bool) -> None:
    before = os.fstat(target)
    capture = output.StreamCapture(target, 1024, None)
    assert os.fstat(target).st_ino != before.st_ino  # the pipe meanwhile
    capture.close(end_thread=end_thread)
    after = os.fstat(target)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    os.write(target, b"after the run")
    assert bytes(capture.data) == b""


def test_crossing_the_limit_calls_on_overflow_once_with_the_first_bytes(target: int) -> None:
    calls: list[Any] = []
    capture = output.StreamCapture(target, 10_000, lambda: calls.append(True))
    # Within what a pipe holds: in the guest, on_overflow ends the process, and nothing
    # reads the pipe after it.
    _write(target, b"x" * 50_000)
    capture.close()
    assert calls == [True]
    assert capture.truncated
    assert bytes(capture.data) == b"x" * 10_000


def test_arm_sets_the_limit_of_a_capture_started_ahead(target: int) -> None:
    calls: list[Any] = []
    capture = output.StreamCapture(target, 1 << 20, None)
    capture.arm(5, lambda: calls.append(True))
    os.write(target, b"0123456789")
    capture.close()
    assert (bytes(capture.data), capture.truncated, calls) == (b"01234", True, [True])


def test_close_without_end_thread_waits_for_no_thread(target: int) -> None:
    capture = output.StreamCapture(target, 1024, None)
    os.write(target, b"out")
    capture.close(end_thread=False)
    assert bytes(capture.data) == b"out"
    # The reader sleeps on (it saw no end of the pipe): close() did not wait for it.
    assert capture._ended.locked()
    ended = output.StreamCapture(target, 1024, None)
    ended.close(end_thread=True)
    assert not ended._ended.locked()
