"""Whoever reads the bridge socket in the guest and stops (a synchronous call with its answer,
a thread waiting for its future, the reader thread of a second event loop) hands on every
answer it read past its own: an event loop watching the socket wakes for new bytes only, so
an answer left in the connection's buffer would never reach its call, and the program would
wait until the run's deadline.

The host here answers two calls in one write, the second call's answer first: the reader of
the second call takes both from the socket, while the loop that made the first call is held
(its thread is busy), so only that reader can read them."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import airlock_wire as wire
from airlock.bridge._codec import encode_result
from tests.sandbox.guest_image import load_guest

guest = load_guest("airlock_bridge")
frames = load_guest("airlock_frames")

STUBS = [{"name": "records_item_get", "params": [{"name": "record_id", "annotation": "str"}]}]
CALL = {"type": wire.CALL, "tool": "records_item_get", "args": {"record_id": "rec_2"}}


def _answer_together(listener: socket.socket, calls: int, done: threading.Event) -> None:
    """Read ``calls`` call frames, then answer them all in one write, the last one first."""
    connection, _ = listener.accept()
    with connection:
        ids: list[int] = []
        received = bytearray()
        while len(ids) < calls:
            data = connection.recv(65536)
            if not data:
                return
            received += data
            while (frame := frames.split_frame(received)) is not None:
                if frame["type"] == wire.CALL:
                    ids.append(frame["id"])
        connection.sendall(b"".join(encode_result(i, True, {"id": i}) for i in reversed(ids)))
        done.wait(30)  # the connection stays open: the answers are all there is


@pytest.fixture
def connection(tmp_path: Path) -> Iterator[Any]:
    path = tmp_path / "bridge.sock"
    done = threading.Event()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        host = threading.Thread(target=_answer_together, args=(listener, 2, done), daemon=True)
        host.start()
        connected = guest.Connection(str(path))
        try:
            yield connected
        finally:
            done.set()
            connected.close()
            host.join(10)


def _sync_call(connection: Any) -> Any:
    return connection.call(dict(CALL))


def _waiting_thread(connection: Any) -> Any:
    return connection.wait(connection.submit(dict(CALL)))


def _second_loop(connection: Any) -> Any:
    async def program() -> Any:
        return await guest.Tools(connection, STUBS).records_item_get.aio(record_id="rec_2")

    return asyncio.run(program())


@pytest.mark.parametrize(
    "other_reader",
    [_sync_call, _waiting_thread, _second_loop],
    ids=["a synchronous call", "a thread waiting for its future", "a second event loop"],
)
def test_a_reader_that_stops_hands_on_the_answers_it_read_past_its_own(
    connection: Any, other_reader: Callable[[Any], Any]
) -> None:
    tools = guest.Tools(connection, STUBS)

    async def program() -> tuple[list[Any], Any]:
        first = tools.records_item_get.aio(record_id="rec_1")  # this loop watches the socket
        await asyncio.sleep(0)  # its frame leaves
        others: list[Any] = []
        reader = threading.Thread(target=lambda: others.append(other_reader(connection)))
        reader.start()
        reader.join(10)  # the loop's thread is held: only the other reader reads meanwhile
        return others, await asyncio.wait_for(first, 5)

    others, first = asyncio.run(program())
    assert others == [{"id": 2}]
    assert first == {"id": 1}
    assert not connection._received  # nothing left behind in the buffer
