"""The documented call forms at the host's limits, and the forms around them: the image's own
guest half against the real host server, in process.

A ``gather`` of more awaitable calls than the host's ``max_in_flight``, and a ``batch`` of
more items than its ``max_batch_items``, are documented ways to fan out: the guest keeps
within the limits (it holds the extra frames, splits the batch), so neither ends the run. A
batch item that does not bind is the item's ``InvalidInput``, and an ``.aio`` call made where
no event loop runs is sent when a loop awaits it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import BridgeLimits
from tests.bridge.test_guest_calls import bridge, total
from tests.sandbox.guest_image import load_guest

errors = load_guest("airlock_errors")
frames = load_guest("airlock_frames")
LIMITS = BridgeLimits(max_in_flight=16, max_batch_items=10, max_call_frame_bytes=2000)


def run_frame(limits: BridgeLimits) -> dict[str, Any]:
    return {"max_in_flight": limits.max_in_flight, "max_batch_items": limits.max_batch_items}


@pytest.mark.parametrize("tool", ["records_item_get", "records_slow_get"])
def test_a_gather_past_max_in_flight_ends_ok_with_every_result(tmp_path: Path, tool: str) -> None:
    count = LIMITS.max_in_flight + 44

    async def program(tools: Any) -> list[Any]:
        function = getattr(tools, tool)
        ids = range(1, count + 1)
        return await asyncio.gather(*(function.aio(record_id=f"rec_{n}") for n in ids))

    with bridge(tmp_path, limits=LIMITS) as (tools, connection, session, host):
        connection.take_limits(run_frame(LIMITS))
        records = asyncio.run(program(tools))
        assert not connection._pending
    assert host.outcome == {"type": "done", "result": None}
    assert [total(r) for r in records] == [n * 10 for n in range(1, count + 1)]
    assert session.calls == count


def slow(tools: Any, n: int) -> int:
    return total(tools.records_slow_get(record_id=f"rec_{n}"))


async def gather_and_to_thread(tools: Any) -> list[int]:
    calls = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(1, 31)]
    *records, aside = await asyncio.gather(*calls, asyncio.to_thread(slow, tools, 31))
    return [total(r) for r in records] + [aside]


async def gather_and_a_thread(tools: Any) -> list[int]:
    aside: list[int] = []
    thread = threading.Thread(target=lambda: aside.append(slow(tools, 31)))
    calls = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(1, 31)]
    thread.start()
    records = await asyncio.gather(*calls)
    await asyncio.to_thread(thread.join)
    return [total(r) for r in records] + aside


async def gather_and_a_sync_call_in_the_loop(tools: Any) -> list[int]:
    # The sync call blocks the loop whose calls hold every slot: it must read their answers
    # (and send their frames) itself, or nobody would.
    calls = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(1, 31)]
    await asyncio.sleep(0)
    inline = slow(tools, 31)
    return [total(r) for r in await asyncio.gather(*calls)] + [inline]


async def thread_pool(tools: Any) -> list[int]:
    with ThreadPoolExecutor(max_workers=31) as pool:
        return list(pool.map(lambda n: slow(tools, n), range(1, 32)))


async def pool_and_a_batch(tools: Any) -> list[int]:
    with ThreadPoolExecutor(max_workers=20) as pool:
        singles = pool.map(lambda n: slow(tools, n), range(1, 21))
        items = [{"record_id": f"rec_{n}"} for n in range(21, 32)]
        batched = await asyncio.to_thread(tools.records_slow_get.batch, items)
        return list(singles) + [total(r) for r in batched]


async def two_loops_and_a_sync_call(tools: Any) -> list[int]:
    # This loop watches the socket, so another loop's calls are read by a reader thread.
    # They take every slot, and their frames wait for their loop's next turn; its thread,
    # blocked in a sync call (the reader holds the read lock), must send them itself.
    first = await tools.records_slow_get.aio(record_id="rec_1")
    count = LIMITS.max_in_flight

    def another_loop() -> list[int]:
        async def fan_out() -> list[int]:
            calls = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(2, count + 2)]
            time.sleep(0.05)  # (the reader thread has the read lock by then)
            inline = slow(tools, count + 2)
            return [total(r) for r in await asyncio.gather(*calls)] + [inline]

        return asyncio.run(fan_out())

    fanned = await asyncio.to_thread(another_loop)
    rest = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(count + 3, 32)]
    return [total(first), *fanned, *[total(r) for r in await asyncio.gather(*rest)]]


# (case, a program whose sync calls from threads meet the awaitable calls' max_in_flight)
MIXED: list[Callable[[Any], Awaitable[list[int]]]] = [
    gather_and_to_thread,
    gather_and_a_thread,
    gather_and_a_sync_call_in_the_loop,
    thread_pool,
    pool_and_a_batch,
    two_loops_and_a_sync_call,
]


@pytest.mark.parametrize("program", MIXED, ids=[p.__name__ for p in MIXED])
def test_calls_from_threads_and_loops_share_max_in_flight(
    tmp_path: Path, program: Callable[[Any], Awaitable[list[int]]]
) -> None:
    with bridge(tmp_path, limits=LIMITS) as (tools, connection, session, host):
        connection.take_limits(run_frame(LIMITS))
        values = asyncio.run(program(tools))  # type: ignore[arg-type]
        assert not connection._pending
        assert connection._outbox._sent == 0
    assert host.outcome == {"type": "done", "result": None}
    assert values == [n * 10 for n in range(1, 32)]
    assert session.calls == 31


@pytest.mark.parametrize("size", [0, 1, 10, 11, 25], ids=lambda n: f"{n}_items")
def test_a_batch_past_max_batch_items_ends_ok_in_order(tmp_path: Path, size: int) -> None:
    items = [{"record_id": f"rec_{n}"} for n in range(1, size + 1)]
    with bridge(tmp_path, limits=LIMITS) as (tools, connection, session, host):
        connection.take_limits(run_frame(LIMITS))
        records = tools.records_item_get.batch(items)
    assert host.outcome == {"type": "done", "result": None}
    assert [total(r) for r in records] == [n * 10 for n in range(1, size + 1)]
    assert session.calls == size


GOOD = {"record_id": "rec_1"}
# (case, the items, with return_errors: what stands in each place; without: the error's field)
ITEMS: list[tuple[str, list[Any], list[Any], str | None]] = [
    ("all_good", [GOOD, {"record_id": "rec_2"}], [10, 20], None),
    ("an_extra_argument", [GOOD, {"record_id": "rec_2", "extra": 1}, GOOD],
     [10, "1", 10], "1"),
    ("a_missing_argument", [GOOD, {}], [10, "1"], "1"),
    ("none", [GOOD, None], [10, "1"], "1"),
    ("a_string", [GOOD, "rec_1"], [10, "1"], "1"),
    ("an_int", [5, GOOD], ["0", 10], "0"),
    ("a_list_of_pairs", [[("record_id", "rec_1")]], ["0"], "0"),
    ("an_int_too_long", [GOOD, {"record_id": 10**40}], [10, "1.record_id"], "1.record_id"),
    ("all_bad", [None, 1], ["0", "1"], "0"),
    ("past_one_frame", [GOOD] * 12 + [{"record_id": 10**40}], [10] * 12 + ["12.record_id"],
     "12.record_id"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "items", "placed", "raised"), ITEMS, ids=[row[0] for row in ITEMS]
)
def test_a_batch_item_that_does_not_bind_is_its_own_invalid_input(
    tmp_path: Path, case: str, items: list[Any], placed: list[Any], raised: str | None
) -> None:
    def seen(outcome: Any) -> Any:
        if isinstance(outcome, errors.InvalidInput):
            return outcome.issues[0]["field"]
        return total(outcome)

    with bridge(tmp_path, limits=LIMITS) as (tools, connection, session, host):
        connection.take_limits(run_frame(LIMITS))
        outcomes = tools.records_item_get.batch(items, return_errors=True)
        assert [seen(o) for o in outcomes] == placed
        called = session.calls
        if raised is None:
            tools.records_item_get.batch(items)
        else:
            with pytest.raises(errors.InvalidInput) as caught:
                tools.records_item_get.batch(items)
            assert caught.value.issues[0]["field"] == raised
            assert f"item {raised.split('.')[0]}" in caught.value.message
            assert session.calls == called  # raised before any frame left
    assert host.outcome == {"type": "done", "result": None}
    assert called == sum(1 for p in placed if isinstance(p, int))


# (case, the items, the error raised: its type, the item its message names, its issues' fields)
REFUSED = [
    ("schema", [GOOD, {"record_id": "rec_x"}], errors.InvalidInput, 1, ["1.record_id"]),
    ("not_found", [GOOD, GOOD, {"record_id": "rec_999999"}], errors.NotFound, 2, None),
    ("another_tenants", [{"record_id": "rec_999"}, GOOD], errors.NotFound, 0, None),
    ("past_one_frame", [GOOD] * 11 + [{"record_id": "rec_x"}], errors.InvalidInput, 11,
     ["11.record_id"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "items", "kind", "index", "fields"), REFUSED, ids=[row[0] for row in REFUSED]
)
def test_a_batch_item_the_host_refuses_is_raised_naming_its_index(
    tmp_path: Path, case: str, items: list[Any], kind: type, index: int, fields: list[str] | None
) -> None:
    with bridge(tmp_path, limits=LIMITS) as (tools, connection, _, host):
        connection.take_limits(run_frame(LIMITS))
        with pytest.raises(kind) as caught:
            tools.records_item_get.batch(items)
        placed = tools.records_item_get.batch(items, return_errors=True)[index]
    assert host.outcome == {"type": "done", "result": None}
    error = caught.value
    assert error.message == f"item {index}: {placed.message}", case
    assert (error.code, error.retryable) == (placed.code, placed.retryable)
    if fields is not None:
        assert [issue["field"] for issue in error.issues] == fields
        assert [i["reason"] for i in error.issues] == [i["reason"] for i in placed.issues]


@pytest.fixture
def call_bytes() -> Iterator[int]:
    """The guest held to ``LIMITS.max_call_frame_bytes``, as its ``run`` frame holds it."""
    frames.limit_calls(LIMITS.max_call_frame_bytes)
    try:
        yield LIMITS.max_call_frame_bytes
    finally:
        frames.limit_calls(None)


LONG = "rec_" + "9" * 600  # a frame of its own holds it; the host refuses it (not an id)
HUGE = "rec_" + "9" * 2500  # no frame holds it


def test_a_batch_past_max_call_frame_bytes_goes_in_frames_that_fit(
    tmp_path: Path, call_bytes: int
) -> None:
    ids = ["rec_1", LONG, "rec_3", LONG, LONG, LONG, "rec_7", HUGE, "rec_9"]
    items = [{"record_id": i} for i in ids]
    assert len(frames.to_json(items)) > call_bytes  # one frame would not hold them

    def seen(outcome: Any) -> Any:
        if isinstance(outcome, errors.ToolError):
            return outcome.issues[0]["field"]
        return total(outcome)

    with bridge(tmp_path, limits=LIMITS) as (tools, connection, session, host):
        connection.take_limits(run_frame(LIMITS))
        outcomes = tools.records_item_get.batch(items, return_errors=True)
        called = session.calls
        with pytest.raises(errors.InvalidInput) as caught:
            tools.records_item_get.batch([{"record_id": "rec_1"}, {"record_id": HUGE}])
        assert session.calls == called  # raised before any frame left, as its message says
    assert host.outcome == {"type": "done", "result": None}
    host_refused = seen(outcomes[1])
    assert [seen(o) for o in outcomes] == [10, host_refused, 30, *[host_refused] * 3, 70, "7", 90]
    assert "item 7:" in outcomes[7].message
    assert "over the bridge's limit of 2000" in outcomes[7].message
    assert called == 8  # the one no frame holds was never sent
    assert caught.value.issues[0]["field"] == "1"


def test_aio_made_where_no_loop_runs_is_sent_when_awaited(tmp_path: Path) -> None:
    with bridge(tmp_path) as (tools, _, session, host):
        futures = [tools.records_item_get.aio(record_id=f"rec_{n}") for n in range(1, 4)]
        single = tools.records_item_get.aio(record_id="rec_7")
        unawaited = tools.records_item_get.aio(record_id="rec_9")
        assert session.calls == 0  # nothing sent yet

        async def main() -> list[Any]:
            return [*await asyncio.gather(*futures), await single, await single]

        records = asyncio.run(main())
        del unawaited
    assert [total(r) for r in records] == [10, 20, 30, 70, 70]
    assert session.calls == 4  # the one never awaited was never sent
    assert host.outcome == {"type": "done", "result": None}


class Interrupted(Exception):
    """What a program's signal handler raises in the middle of a call."""


def interrupt_once(connection: Any, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Make the next call of ``connection`` raise :class:`Interrupted` at ``where``."""
    if where == "before_the_frame_leaves":
        target, name = connection._outbox, "send"
    else:
        target, name = connection, "_recv"
    real = getattr(target, name)
    armed = [True]

    def interrupted(*args: Any) -> Any:
        if not armed[0]:
            return real(*args)
        armed[0] = False
        if where == "after_its_answer_was_read":
            real(*args)
        raise Interrupted(where)

    monkeypatch.setattr(target, name, interrupted)


INTERRUPTIONS = ["before_the_frame_leaves", "while_it_waits", "after_its_answer_was_read"]


@pytest.mark.parametrize("where", INTERRUPTIONS)
def test_a_sync_call_a_signal_handler_interrupts_gives_its_slot_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # More interruptions than slots: a slot kept by any of them would leave the last call
    # waiting for one until the run's deadline.
    with bridge(tmp_path, limits=LIMITS) as (tools, connection, _, host):
        connection.take_limits(run_frame(LIMITS))
        for n in range(1, LIMITS.max_in_flight + 5):
            interrupt_once(connection, monkeypatch, where)
            with pytest.raises(Interrupted):
                tools.records_item_get(record_id=f"rec_{n}")
            monkeypatch.undo()
        answered: list[int] = []
        last = threading.Thread(target=lambda: answered.append(slow(tools, 7)), daemon=True)
        last.start()
        last.join(timeout=10)
        assert answered == [70], "the last call found no free slot"
        assert connection._outbox._sent == 0
        assert not connection._pending
    assert host.outcome == {"type": "done", "result": None}
