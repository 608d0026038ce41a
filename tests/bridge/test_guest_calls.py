"""How a program's calls travel: the image's own guest half (``load_guest``) against the real
host server (:func:`serve_run`), over a Unix socket, with no container in between.

Awaitable calls made on a running event loop are served by that loop (their frames leave
together once per turn, the loop reads their results); calls from other threads and other
loops, synchronous calls made in the middle, cancelled calls, a loop that ends with calls
unanswered, and a run the host ends must all still get exactly their own answers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, ToolSession, serve_run
from airlock.bridge import airlock_wire as wire
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.sandbox.guest_image import load_guest

guest = load_guest("airlock_bridge")
connections = load_guest("airlock_connection")
errors = load_guest("airlock_errors")

STUBS = [
    {"name": name, "params": [{"name": "record_id", "annotation": "str"}]}
    for name in ("records_item_get", "records_slow_get")
]


class Host:
    """A host serving one run on a loop of its own thread; ``outcome`` once the run ends."""

    def __init__(self, path: Path, session: ToolSession) -> None:
        self.path = path
        self.session = session
        self.outcome: Any = None
        self.reads = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the host did not start"

    async def _main(self) -> None:
        ended = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.outcome = await serve_run(
                reader,
                writer,
                session=self.session,
                deadline=time.monotonic() + 60,
                max_done_bytes=1 << 20,
            )
            writer.close()
            ended.set()

        server = await asyncio.start_unix_server(serve, path=str(self.path))
        self._ready.set()
        async with server:
            await ended.wait()

    def join(self) -> None:
        self._thread.join(20)
        assert not self._thread.is_alive(), "the host did not end"


@contextmanager
def bridge(
    tmp_path: Path, *, limits: BridgeLimits | None = None
) -> Iterator[tuple[Any, Any, ToolSession, Host]]:
    """A served run: the guest's tools namespace and connection, the session, the host."""
    session = ToolSession(
        registry=build_registry(slow_s=0.2),
        principal=ALICE,
        grant=GRANT,
        limits=limits or BridgeLimits(max_in_flight=1000),
    )
    host = Host(tmp_path / "bridge.sock", session)
    connection = guest.Connection(str(host.path))
    yield guest.Tools(connection, STUBS), connection, session, host
    with contextlib.suppress(OSError):  # the host may have ended the run itself
        connection.send({"type": wire.DONE, "result": None})
    host.join()


def audited_ok(session: ToolSession) -> int:
    events = session.registry.audit.events(run_id=session.run_id)
    return sum(1 for e in events if e.outcome == "ok")


def total(record: dict[str, Any]) -> int:
    return int(record["total"])


def test_bounded_gather_is_served_by_the_loop(tmp_path: Path) -> None:
    ids = [f"rec_{n}" for n in range(1, 301)]

    async def program(tools: Any) -> list[Any]:
        gate = asyncio.Semaphore(64)

        async def one(record_id: str) -> Any:
            async with gate:
                return await tools.records_item_get.aio(record_id=record_id)

        return await asyncio.gather(*(one(i) for i in ids))

    with bridge(tmp_path) as (tools, connection, session, _):
        threads = threading.active_count()
        records = asyncio.run(program(tools))
        # Served by the loop: no reader thread, and nothing left watching or pending.
        assert threading.active_count() == threads
        assert connection._watcher is None or connection._watcher.is_closed()
        assert not connection._pending
    assert [r["record_id"] for r in records] == ids
    assert [total(r) for r in records] == [int(i[4:]) * 10 for i in ids]
    assert audited_ok(session) == len(ids)


def test_awaiting_one_call_after_another_watches_the_socket_once(tmp_path: Path) -> None:
    watched: list[str] = []

    class Counting(asyncio.SelectorEventLoop):
        def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
            watched.append("add")
            super().add_reader(fd, callback, *args)

        def remove_reader(self, fd: Any) -> bool:
            watched.append("remove")
            return super().remove_reader(fd)

    async def program(tools: Any) -> list[Any]:
        return [await tools.records_item_get.aio(record_id=f"rec_{n}") for n in range(1, 21)]

    with bridge(tmp_path) as (tools, connection, session, _):
        with asyncio.Runner(loop_factory=Counting) as runner:
            records = runner.run(program(tools))
        # A sync call afterwards reads its own answer: the closed loop watches nothing.
        assert total(tools.records_item_get(record_id="rec_7")) == 70
        assert not connection._pending
    assert [total(r) for r in records] == [n * 10 for n in range(1, 21)]
    assert watched == ["add"]  # not an add and a remove (two system calls) per call
    assert audited_ok(session) == 21


def test_calls_made_in_one_turn_leave_in_one_write(tmp_path: Path) -> None:
    sends: list[int] = []

    async def program(tools: Any, connection: Any) -> list[Any]:
        sendall = connection._sock.sendall

        class Counting:  # the socket, with its writes counted
            def __getattr__(self, name: str) -> Any:
                return getattr(connection._sock_real, name)

            def sendall(self, data: bytes) -> None:
                sends.append(len(data))
                sendall(data)

        connection._sock_real, connection._sock = connection._sock, Counting()
        try:
            return await asyncio.gather(
                *(tools.records_item_get.aio(record_id=f"rec_{n}") for n in range(1, 41))
            )
        finally:
            connection._sock = connection._sock_real

    with bridge(tmp_path) as (tools, connection, _, _host):
        records = asyncio.run(program(tools, connection))
    assert [r["record_id"] for r in records] == [f"rec_{n}" for n in range(1, 41)]
    assert len(sends) == 1, f"40 calls made in one turn went out in {len(sends)} writes"


def test_a_loop_of_single_calls_is_one_write_and_one_read_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []

    class Counted(concurrent.futures.Future[object]):
        def __init__(self) -> None:
            made.append(self)
            super().__init__()

    # The connection imports its thread-safe future class when it first needs one.
    monkeypatch.setattr(concurrent.futures, "Future", Counted)
    with bridge(tmp_path) as (tools, connection, session, _host):
        threads = threading.active_count()
        records = [tools.records_item_get(record_id=f"rec_{n}") for n in range(1, 51)]
        batch = tools.records_item_get.batch([{"record_id": "rec_7"}, {"record_id": "rec_8"}])
        assert threading.active_count() == threads
        assert connection._watcher is None
        assert not connection._pending
    assert [total(r) for r in records] == [n * 10 for n in range(1, 51)]
    assert [total(r) for r in batch] == [70, 80]
    assert made == []  # no future, no thread, no selector: this thread reads its answer
    assert audited_ok(session) == 52


def _refers_to_itself() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), _refers_to_itself()], ids=["nan", "inf", "cycle"]
)
def test_a_value_json_cannot_hold_fails_the_call_and_not_the_run(
    tmp_path: Path, value: Any
) -> None:
    with bridge(tmp_path) as (tools, _, session, _host):
        with pytest.raises(ValueError, match="JSON"):
            tools.records_item_get(record_id=value)
        assert total(tools.records_item_get(record_id="rec_2")) == 20
    assert audited_ok(session) == 1


def test_sync_calls_in_a_coroutine_and_in_threads_meanwhile(tmp_path: Path) -> None:
    async def program(tools: Any) -> tuple[list[Any], list[int], list[int]]:
        pending = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(1, 9)]
        # A synchronous call while awaitable ones wait: it reads their results too.
        inline = [total(tools.records_item_get(record_id=f"rec_{n}")) for n in range(20, 25)]
        from_threads: list[int] = []

        def worker(n: int) -> None:
            from_threads.append(total(tools.records_item_get(record_id=f"rec_{n}")))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(30, 36)]
        for t in threads:
            t.start()
        awaited = await asyncio.gather(*pending)
        await asyncio.to_thread(lambda: [t.join() for t in threads])
        return awaited, inline, sorted(from_threads)

    with bridge(tmp_path) as (tools, _, session, _host):
        awaited, inline, from_threads = asyncio.run(program(tools))
    assert [total(r) for r in awaited] == [n * 10 for n in range(1, 9)]
    assert inline == [n * 10 for n in range(20, 25)]
    assert from_threads == [n * 10 for n in range(30, 36)]
    assert audited_ok(session) == 8 + 5 + 6


def test_two_loops_at_once_each_get_their_own_answers(tmp_path: Path) -> None:
    results: dict[int, list[int]] = {}

    def run_loop(base: int, tools: Any, started: threading.Barrier) -> None:
        async def program() -> list[int]:
            started.wait(10)  # both loops are running before either calls
            records = await asyncio.gather(
                *(tools.records_slow_get.aio(record_id=f"rec_{base + n}") for n in range(10))
            )
            return [total(r) for r in records]

        results[base] = asyncio.run(program())

    with bridge(tmp_path) as (tools, _, session, _host):
        started = threading.Barrier(2)
        threads = [
            threading.Thread(target=run_loop, args=(base, tools, started)) for base in (100, 200)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert results == {base: [(base + n) * 10 for n in range(10)] for base in (100, 200)}
    assert audited_ok(session) == 20


def test_a_cancelled_call_and_a_loop_that_ends_early_leave_later_calls_right(
    tmp_path: Path,
) -> None:
    unanswered: list[Any] = []

    async def cancelled(tools: Any) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(tools.records_slow_get.aio(record_id="rec_1"), 0.01)

    async def abandoned(tools: Any) -> None:
        # The loop ends while this call is unanswered; its answer arrives later.
        unanswered.append(tools.records_slow_get.aio(record_id="rec_2"))

    async def afterwards(tools: Any) -> list[Any]:
        return await asyncio.gather(
            *(tools.records_item_get.aio(record_id=f"rec_{n}") for n in range(10, 15))
        )

    with bridge(tmp_path) as (tools, connection, session, _):
        asyncio.run(cancelled(tools))
        asyncio.run(abandoned(tools))
        assert total(tools.records_item_get(record_id="rec_7")) == 70
        records = asyncio.run(afterwards(tools))
        time.sleep(0.3)  # both slow answers are in by now; a synchronous call reads them
        assert total(tools.records_item_get(record_id="rec_8")) == 80
        assert not connection._pending
    assert [total(r) for r in records] == [n * 10 for n in range(10, 15)]
    # The cancelled call was running on the host: it ran to its end there (audited ok),
    # unanswered, and nothing after it went astray.
    assert audited_ok(session) == 1 + 1 + 5 + 2
    events = session.registry.audit.events(run_id=session.run_id)
    assert [e.outcome for e in events if e.call_id.endswith(":1")] == ["ok"]


def test_pending_calls_fail_when_the_host_ends_the_run(tmp_path: Path) -> None:
    async def program(tools: Any) -> list[Any]:
        return await asyncio.gather(
            *(tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(1, 11)),
            return_exceptions=True,
        )

    session_limits = BridgeLimits(max_in_flight=4)
    with bridge(tmp_path, limits=session_limits) as (tools, connection, _, host):
        outcomes = asyncio.run(program(tools))
        with pytest.raises(errors.RunAborted):
            tools.records_item_get(record_id="rec_1")
        assert connection._watcher is None
    assert all(isinstance(o, errors.RunAborted) for o in outcomes)
    assert {o.code for o in outcomes} == {"limit_exceeded"}
    assert host.outcome.code == "limit_exceeded"


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda f: f._arguments((), {"record_id": "rec_1"}), {"record_id": "rec_1"}),
        (lambda f: f._arguments(("rec_1",), {}), {"record_id": "rec_1"}),
    ],
    ids=["keywords", "positional"],
)
def test_arguments_bind_as_the_signature_does(
    call: Callable[[Any], dict[str, Any]], expected: dict[str, Any]
) -> None:
    function = guest.ToolFunction(None, STUBS[0])
    assert call(function) == expected


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"record_id": "rec_1", "other": 1}, {"other": 1}],
    ids=["missing", "extra", "wrong"],
)
def test_arguments_that_do_not_fit_the_signature_are_refused(kwargs: dict[str, Any]) -> None:
    function = guest.ToolFunction(None, STUBS[0])
    with pytest.raises(errors.InvalidInput):
        function._arguments((), kwargs)


class Unreachable:
    """A connection a call must not use."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the connection was used: {name}")


@pytest.mark.parametrize("kind", ["ToolFunction", "ProposalFunction"])
def test_an_empty_batch_is_answered_in_the_sandbox(kind: str) -> None:
    # Nothing to call: no frame (the host would count it as a call, and answer it).
    function = getattr(guest, kind)(Unreachable(), STUBS[0])
    assert function.batch([]) == []
    assert function.batch([], return_errors=True) == []


def test_calls_queued_on_a_loop_that_ended_before_sending_them_still_go(
    tmp_path: Path,
) -> None:
    message = {"type": wire.CALL, "tool": "records_item_get", "args": {"record_id": "rec_3"}}

    async def afterwards(tools: Any) -> Any:
        return await asyncio.wait_for(tools.records_item_get.aio(record_id="rec_4"), 10)

    with bridge(tmp_path) as (tools, connection, session, _):
        ended = asyncio.new_event_loop()
        orphan = connection.submit_on_loop(message, ended)  # its sending was due on `ended`
        ended.close()
        record = asyncio.run(afterwards(tools))
        assert not orphan.done()  # nobody can wait on a closed loop: it is left alone
    assert total(record) == 40
    assert audited_ok(session) == 2  # both frames reached the host
