"""The host's side of a kept container's program connections (``ProgramLinks``), against a
runner played by the test: one token per program, and the next program's token only once
the previous result has been handed on, even when programs follow each other at once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import airlock_wire as wire
from airlock.bridge import encode_frame, read_frame
from airlock.sandbox._errors import SandboxFailure
from airlock.sandbox._program_link import ProgramLinks

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Runner:
    """Plays a kept runner: for each token on the control connection, connects to the host's
    socket (as this process: the runner's peer), says ``hello`` with the token, and answers
    the program it then receives with ``done``."""

    def __init__(self, control: socket.socket, path: str) -> None:
        self.control = control
        self.path = path
        self.tokens: list[str] = []
        self.programs: list[str] = []

    async def serve(self) -> None:
        reader, _writer = await asyncio.open_unix_connection(sock=self.control)
        while (frame := await read_frame(reader, max_bytes=1 << 16)) is not None:
            assert frame["type"] == wire.RUN
            self.tokens.append(frame["token"])
            program_reader, program_writer = await asyncio.open_unix_connection(self.path)
            hello = {"type": wire.HELLO, "version": wire.PROTOCOL_VERSION, "pid": 1}
            program_writer.write(encode_frame({**hello, "token": frame["token"]}))
            run = await read_frame(program_reader, max_bytes=1 << 16)
            if run is None:
                continue  # the host let this process go unused
            self.programs.append(run["program"])
            result = {"status": "ok", "exit_status": 0, "has_value": True, "value": 1}
            program_writer.write(encode_frame({"type": wire.DONE, "result": result}))


@pytest.fixture
async def links() -> AsyncIterator[tuple[ProgramLinks, _Runner, socket.socket]]:
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "bridge.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(16)
        listener.setblocking(False)
        host_end, runner_end = socket.socketpair()
        said, control = await asyncio.open_unix_connection(sock=host_end)
        runner = _Runner(runner_end, path)
        task = asyncio.create_task(runner.serve())
        links = ProgramLinks(
            (said, control),
            listener,
            runtime="runc",
            runner_pid=os.getpid(),  # the runner's connections come from this process
            container_id="test",
            hello_s=5.0,
        )
        try:
            yield links, runner, runner_end
        finally:
            links.close()
            control.transport.abort()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            listener.close()


async def _run(links: ProgramLinks, program: str) -> Any:
    async def serve(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> Any:
        return await read_frame(reader, max_bytes=1 << 16)

    frame = encode_frame({"type": wire.RUN, "program": program})
    deadline = time.monotonic() + 5.0
    return await links.serve(frame, serve, deadline=deadline, keep=True, mode="full", tools=None)


async def _until(condition: Any) -> None:
    """Let the loop turn until ``condition()`` holds (a few seconds at most)."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)


def _token_waiting(runner_end: socket.socket) -> bool:
    try:
        return bool(runner_end.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


@pytest.mark.parametrize("programs", [1, 2, 5])
async def test_programs_back_to_back_each_take_one_token_of_their_own(
    links: tuple[ProgramLinks, _Runner, socket.socket], programs: int
) -> None:
    link, runner, _ = links
    for n in range(programs):
        done = await _run(link, f"program {n}")
        assert done is not None
        assert done["type"] == wire.DONE
    # The next program's token, once this turn of the loop is over.
    await _until(lambda: len(runner.tokens) > programs)
    assert runner.programs == [f"program {n}" for n in range(programs)]
    # One per program and one for the next: none sent twice, none wasted.
    assert len(runner.tokens) == programs + 1
    assert len(set(runner.tokens)) == programs + 1


async def test_the_next_token_leaves_once_the_result_is_handed_on(
    links: tuple[ProgramLinks, _Runner, socket.socket],
) -> None:
    link, runner, runner_end = links
    await _run(link, "first")
    await _until(lambda: len(runner.tokens) == 2)  # the runner read the next one's token
    assert len(runner.tokens) == 2
    assert not _token_waiting(runner_end)
    await _run(link, "second")
    # The caller has the result and the loop has not turned: no token was written yet.
    assert not _token_waiting(runner_end)
    await asyncio.sleep(0)
    assert _token_waiting(runner_end)


async def test_close_before_the_next_token_sends_none(
    links: tuple[ProgramLinks, _Runner, socket.socket],
) -> None:
    link, runner, runner_end = links
    await _run(link, "only")
    link.close()
    await asyncio.sleep(0.05)
    assert len(runner.tokens) == 1
    assert not _token_waiting(runner_end)


EXIT_REASON = "it could not clear the container in 3 s: 1 thread(s) it did not begin with"
LAST_FRAMES: dict[str, tuple[bytes, str]] = {
    # what the runner sent last on its control connection -> what the run is told
    "nothing": (b"", "or it was killed"),
    "its reason": (
        encode_frame({"type": wire.EXIT, "status": 5, "reason": EXIT_REASON}),
        f"it said: {EXIT_REASON})",
    ),
    "another frame": (encode_frame({"type": wire.HELLO, "reason": "x"}), "or it was killed"),
    "a cut frame": (encode_frame({"type": wire.EXIT, "reason": "x"})[:-3], "or it was killed"),
    "a frame over the limit": (
        encode_frame({"type": wire.EXIT, "reason": "x" * 20 * wire.MAX_EXIT_REASON_CHARS}),
        "or it was killed",
    ),
    "a reason too long": (
        encode_frame({"type": wire.EXIT, "reason": "y" * 5000}),
        "it said: " + "y" * wire.MAX_EXIT_REASON_CHARS + ")",
    ),
    # It leaves the token unread: closed so, its end of the connection resets the host's.
    "its reason, then a reset": (
        encode_frame({"type": wire.EXIT, "status": 5, "reason": EXIT_REASON}),
        f"it said: {EXIT_REASON})",
    ),
    "a cut frame, then a reset": (
        encode_frame({"type": wire.EXIT, "reason": "x"})[:-3],
        "or it was killed",
    ),
}


@pytest.mark.parametrize("last", list(LAST_FRAMES))
@pytest.mark.parametrize("when", ["before the run", "while the run waits"])
async def test_a_runner_that_exits_fails_the_wait_at_once_with_a_typed_error(
    when: str, last: str
) -> None:
    # The runner's control connection ends (its zygote could not clear the container and
    # exited): the run fails now, as a sandbox failure, not at the connection's deadline,
    # and is told why when the runner said so.
    sent, told = LAST_FRAMES[last]
    with tempfile.TemporaryDirectory() as directory:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(Path(directory) / "bridge.sock"))
        listener.listen(16)
        listener.setblocking(False)
        host_end, runner_end = socket.socketpair()
        said, control = await asyncio.open_unix_connection(sock=host_end)
        links = ProgramLinks(
            (said, control),
            listener,
            runtime="runc",
            runner_pid=os.getpid(),
            container_id="c0ffee",
            hello_s=5.0,
        )
        try:
            links.prepare(keep=True, mode="full")

            def last_words() -> None:
                if not last.endswith("a reset"):
                    runner_end.recv(1 << 16)  # the token, as the runner reads it
                runner_end.sendall(sent)
                runner_end.close()

            if when == "before the run":
                last_words()
                await asyncio.sleep(0.05)
            else:
                asyncio.get_running_loop().call_later(0.2, last_words)
            began = time.monotonic()
            with pytest.raises(SandboxFailure) as raised:
                await asyncio.wait_for(links.take(time.monotonic() + 5.0), 3.0)
            took = time.monotonic() - began
        finally:
            links.close()
            control.transport.abort()
            runner_end.close()
            listener.close()
    assert took < 1.0, took
    assert "exited" in str(raised.value), raised.value
    assert "'c0ffee'" in str(raised.value), raised.value
    assert told in str(raised.value), raised.value
    assert (raised.value.code, raised.value.retryable) == ("sandbox_runner_exited", True)
