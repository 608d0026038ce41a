"""The host stays in control of every run, whatever the program does.

Hostile programs in real containers, judged from the host: a program that stops reading
while the host still has results for it is gone (container removed, processes dead) by its
deadline plus a few seconds, and ``close()`` of a backend or a kept sandbox with such a run in
flight returns in a bounded time; the most expensive ``done`` frame the format allows costs
the host a bounded amount of memory and ends only its own run; a final value over the limit is
``result_too_large``; and no descriptor a program holds leads anywhere but its own capped
capture pipes, ``/dev/null`` and the bridge.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import random
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import docker
import psutil
import pytest

from airlock.bridge import MAX_ELEMENTS, BridgeLimits, ToolSession, count_elements
from airlock.harness._execute_code import program_result
from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, KeptSandbox, RunResult, SandboxClosed
from airlock.sandbox._container import MAX_VALUE_BYTES
from airlock.sandbox._owner import labelled_containers
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import IMAGE, require_docker
from tests.sandbox.guest_image import load_guest

T = TypeVar("T")
DEADLINE_S = 3.0
AFTER_DEADLINE_S = 5.0
"""How soon after its deadline a run's container must be gone (the bridge's grace included)."""
CLOSE_S = 10.0
"""How long close() of a backend or a kept sandbox may take with a hostile run in flight."""
FULL = SandboxProfile(language_mode="full", timeout_s=DEADLINE_S)

# Fires calls whose results (1 MB each) the host must send, never reads one, and spins: the
# bridge's send buffer fills and stays full.
STOPS_READING = textwrap.dedent("""
    conn = tools.records_blob_get._connection
    for _ in range(60):
        conn.submit({"type": "call", "tool": "records_blob_get", "args": {"size": 1_000_000}})
    while True:
        pass
""")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _session() -> ToolSession:
    return ToolSession(registry=build_registry(), principal=ALICE, grant=GRANT)


@pytest.fixture
async def backend() -> AsyncIterator[DockerBackend]:
    require_docker()
    backend = DockerBackend(image=IMAGE, profile=FULL, pool_size=0)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _containers(backend: DockerBackend) -> list[dict[str, Any]]:
    return labelled_containers(docker.from_env(), owner=backend._owner)


async def _wait_for_container(backend: DockerBackend, timeout: float = 30.0) -> tuple[str, int]:
    """The id and host pid of the backend's (one) running container, once it runs a program."""
    client = docker.from_env()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for entry in await asyncio.to_thread(labelled_containers, client, owner=backend._owner):
            try:
                attrs = await asyncio.to_thread(client.api.inspect_container, entry["Id"])
            except docker.errors.NotFound:  # removed since it was listed (a pool's spare)
                continue
            if attrs["State"]["Running"] and attrs["State"]["Pid"]:
                return str(entry["Id"]), int(attrs["State"]["Pid"])
        await asyncio.sleep(0.1)
    raise AssertionError("no container of the backend started")


async def _gone_within(backend: DockerBackend, pid: int, seconds: float) -> float:
    """Seconds until the backend has no container left and ``pid`` is dead; fails after
    ``seconds``."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if not await asyncio.to_thread(_containers, backend) and not psutil.pid_exists(pid):
            return time.monotonic() - began
        await asyncio.sleep(0.1)
    left = [(c["Id"][:12], c["State"]) for c in _containers(backend)]
    raise AssertionError(
        f"after {seconds} s: containers {left}, runner alive {psutil.pid_exists(pid)}"
    )


async def _bounded(work: Awaitable[T], seconds: float) -> tuple[T, float]:
    began = time.monotonic()
    result = await asyncio.wait_for(work, seconds)
    return result, time.monotonic() - began


# -- deadlines always kill -------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("kept", [False, True], ids=["fresh", "kept"])
async def test_a_program_that_stops_reading_is_gone_by_its_deadline(
    backend: DockerBackend, kept: bool
) -> None:
    runner: DockerBackend | KeptSandbox = backend.keep(ALICE, profile=FULL) if kept else backend
    began = time.monotonic()
    run = asyncio.create_task(runner.run(STOPS_READING, profile=FULL, tools=_session()))
    _, pid = await _wait_for_container(backend)
    result, _ = await _bounded(run, DEADLINE_S + AFTER_DEADLINE_S + 30)
    assert (result.status, result.limit) == ("limit_exceeded", "timeout"), result
    # Measured from the host: container removed and its processes dead, run deadline + 5 s.
    await _gone_within(
        backend, pid, max(began + DEADLINE_S + AFTER_DEADLINE_S - time.monotonic(), 0.5)
    )
    assert time.monotonic() - began <= DEADLINE_S + AFTER_DEADLINE_S
    if isinstance(runner, KeptSandbox):
        assert not runner.alive


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("kept", [False, True], ids=["fresh", "kept"])
async def test_close_with_a_run_that_stopped_reading_returns_in_bounded_time(kept: bool) -> None:
    require_docker()
    backend = DockerBackend(image=IMAGE, profile=FULL.model_copy(update={"timeout_s": 120}))
    await backend.start()
    keeper = backend.keep(ALICE) if kept else None
    runner: DockerBackend | KeptSandbox = keeper or backend
    run = asyncio.create_task(runner.run(STOPS_READING, tools=_session()))
    try:
        _, pid = await _wait_for_container(backend)
        await asyncio.sleep(1.0)  # the guest is spinning; the host's results are queued
        if keeper is not None:
            _, took = await _bounded(keeper.close(), CLOSE_S)
        else:
            _, took = await _bounded(backend.close(), CLOSE_S)
        assert took < CLOSE_S
        await _gone_within(backend, pid, 1.0)
        # The run in flight ends too, with its runner gone, long before its 120 s deadline:
        # cut off by the close, which it says, not judged as the program's or runner's end.
        with pytest.raises(SandboxClosed):
            await _bounded(run, CLOSE_S)
    finally:
        run.cancel()
        await backend.close()
    assert not _containers(backend)


# -- host cost is bounded by the profile ------------------------------------------------------

_FIND_BRIDGE = """
import os, socket, stat, struct, time
def _is_socket(fd):
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False
bridge = socket.socket(fileno=next(fd for fd in range(1024) if _is_socket(fd)))
"""
HOSTILE_DONE = (
    _FIND_BRIDGE
    + """
head = b'{"type":"done","result":{"status":"ok","exit_status":0,"has_value":true,"value":['
body = head + b"{}," * 4_000_000 + b"{}]}}"
bridge.sendall(struct.pack(">I", len(body)) + body)
time.sleep(30)
"""
)


def _peak_rss_since_reset() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _reset_peak_rss() -> int:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    return _peak_rss_since_reset()


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_most_expensive_done_frame_costs_little_and_ends_only_its_run(
    backend: DockerBackend,
) -> None:
    before = _reset_peak_rss()
    benign = "sum(tools.records_item_get(record_id=f'rec_{n}')['total'] for n in range(1, 41))\n"
    hostile, ok = await asyncio.gather(
        backend.run(HOSTILE_DONE, tools=_session()), backend.run(benign, tools=_session())
    )
    growth = _peak_rss_since_reset() - before
    # A 12 MB frame of 4 million empty objects: refused by its element count before it is
    # decoded (decoded, it would be about 850 MiB of Python objects).
    assert hostile.status == "protocol_error", hostile
    assert hostile.error is not None
    assert f"more than {MAX_ELEMENTS} values" in hostile.error.message
    assert growth < 64 * 2**20, f"host RSS grew by {growth / 2**20:.1f} MiB"
    assert (ok.status, ok.value) == ("ok", 8200), ok


# The largest done frame a profile allows (output at the 64 MiB maximum): its header alone.
HEADER_ALONE = (
    _FIND_BRIDGE
    + """
bridge.sendall(struct.pack(">I", 2 * 6 * (64 << 20) + MAX_VALUE_BYTES + 256 * 1024))
time.sleep(30)
"""
)
LARGEST_OUTPUT = FULL.model_copy(update={"output_limit_bytes": 64 << 20})


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_frame_header_alone_costs_the_host_little(backend: DockerBackend) -> None:
    before = _reset_peak_rss()
    benign = "sum(tools.records_item_get(record_id=f'rec_{n}')['total'] for n in range(1, 41))\n"
    program = f"MAX_VALUE_BYTES = {MAX_VALUE_BYTES}\n" + HEADER_ALONE
    hostile, ok = await asyncio.gather(
        backend.run(program, profile=LARGEST_OUTPUT, tools=_session()),
        backend.run(benign, tools=_session()),
    )
    growth = _peak_rss_since_reset() - before
    # The header claims 772 MiB, and the host allocated and zeroed all of it at once (+772
    # MiB, 1.9 s of the event loop), held until the deadline; now memory follows the bytes.
    assert (hostile.status, hostile.limit) == ("limit_exceeded", "timeout"), hostile
    assert growth < 64 * 2**20, f"host RSS grew by {growth / 2**20:.1f} MiB"
    assert (ok.status, ok.value) == ("ok", 8200), ok


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("'x' * (MAX + 1)", MAX_VALUE_BYTES + 3),
        ("['ab'] * (MAX // 4)", MAX_VALUE_BYTES // 4 * 5 + 1),
    ],
    ids=["bytes", "elements_and_bytes"],
)
async def test_a_final_value_over_the_limit_is_result_too_large(
    backend: DockerBackend, value: str, size: int
) -> None:
    program = f"MAX = {MAX_VALUE_BYTES}\n{value}\n"
    result = await backend.run(program)
    assert result.status == "error", result.reason()
    assert result.error is not None
    assert (result.error.type, result.error.code) == ("ResultTooLarge", "result_too_large")
    assert (result.error.size_bytes, result.error.limit_bytes) == (size, MAX_VALUE_BYTES)
    assert str(size) in result.error.message
    # The model is told result_too_large with the size and the limit, not protocol_error.
    answer = json.loads(program_result(result, stdout_bytes=100).content)
    assert answer["error"] == "result_too_large"
    assert (answer["size_bytes"], answer["limit_bytes"]) == (size, MAX_VALUE_BYTES)


@pytest.mark.docker
@pytest.mark.anyio
async def test_too_many_values_in_a_small_final_value_is_result_too_large(
    backend: DockerBackend,
) -> None:
    result = await backend.run(f"[0] * {MAX_ELEMENTS}\n")
    assert result.error is not None
    assert result.error.code == "result_too_large"
    assert f"more than {MAX_ELEMENTS - 1000} values" in result.error.message
    assert result.error.size_bytes == 2 * MAX_ELEMENTS + 1


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_largest_legitimate_done_frame_is_accepted(backend: DockerBackend) -> None:
    # Full stdout and stderr of NUL bytes (escaped six times over) and a final value at the
    # limit: the done frame's budget holds the worst a well-behaved program can send.
    cap = FULL.output_limit_bytes
    program = textwrap.dedent(f"""
        import os
        os.write(1, b"\\0" * {cap})
        os.write(2, b"\\0" * {cap})
        "x" * ({MAX_VALUE_BYTES} - 2)
    """)
    result = await backend.run(program)
    assert result.ok, result.reason()
    assert (len(result.stdout), len(result.stderr)) == (cap, cap)
    assert isinstance(result.value, str)
    assert len(result.value) == MAX_VALUE_BYTES - 2


SMALL_BYTES_IN = 1 << 20
# (case, program, status and limit) under a bridge whose bytes_in is 1 MiB: the done frame has
# a budget of its own (the output caps, JSON-escaped, and the value's limit), the frames before
# it count.
NUL_OUTPUT = f'import os\nos.write(1, b"\\0" * {FULL.output_limit_bytes})\n"fine"\n'
BYTES_IN_RUNS = [
    ("escaped_output_past_bytes_in", NUL_OUTPUT, ("ok", None)),
    ("log_lines_past_bytes_in", 'for _ in range(1000):\n    tools.log("x" * 1500)\n',
     ("limit_exceeded", "bytes")),
]  # fmt: skip


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "program", "ends"), BYTES_IN_RUNS, ids=[c[0] for c in BYTES_IN_RUNS]
)
async def test_output_within_its_cap_is_not_the_bridges_bytes(
    backend: DockerBackend, case: str, program: str, ends: tuple[str, str | None]
) -> None:
    session = _session()
    session.limits = BridgeLimits(max_bytes_in=SMALL_BYTES_IN)
    result = await backend.run(program, tools=session)
    assert (result.status, result.limit) == ends, result.reason()
    if result.ok:
        assert (len(result.stdout), result.value) == (FULL.output_limit_bytes, "fine")


# -- no output path around the cap ------------------------------------------------------------

FLOOD_EVERY_DESCRIPTOR = textwrap.dedent("""
    import os
    links = {}
    for fd in range(1024):
        try:
            links[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    chunk = b"w" * 65536
    wrote = {}
    for fd in sorted(links):
        if links[fd].startswith("socket:"):
            continue  # the bridge: writing there is a protocol error, tested elsewhere
        wrote[fd] = 0
        for _ in range(4):
            try:
                wrote[fd] += os.write(fd, chunk)
            except OSError:
                break
    opened = {}
    for name in os.listdir("/proc/self/fd"):
        path = f"/proc/self/fd/{name}"
        try:
            if os.readlink(path).startswith("socket:"):
                continue
            with open(path, "wb", buffering=0) as stream:
                opened[name] = stream.write(chunk)
        except OSError:
            pass
    {"links": links, "wrote": wrote, "opened": opened}
""")


@pytest.mark.docker
@pytest.mark.anyio
async def test_every_descriptor_a_program_holds_leads_only_to_its_capped_output(
    backend: DockerBackend,
) -> None:
    result = await backend.run(FLOOD_EVERY_DESCRIPTOR)
    assert result.ok, result.reason()
    assert isinstance(result.value, dict)
    links: dict[str, str] = result.value["links"]
    capture = {links["1"], links["2"]}  # the runner's capture pipes, capped
    sockets = [fd for fd, link in links.items() if link.startswith("socket:")]
    assert len(sockets) == 1, links  # the bridge, and nothing else
    elsewhere = {
        fd: link
        for fd, link in links.items()
        if link not in capture and link != "/dev/null" and fd not in sockets
    }
    assert elsewhere == {}, f"descriptors leading out of the run: {elsewhere}"
    # What reached the host is what the program wrote to its own stdout and stderr, capped.
    cap = FULL.output_limit_bytes
    assert set(result.stdout) <= {"w"}
    assert set(result.stderr) <= {"w"}
    assert 0 < len(result.stdout) <= cap
    assert 0 < len(result.stderr) <= cap


# -- the guest's count of a final value is the host's count of its frame ---------------------


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(8 if depth < 5 else 4)
    if pick == 0:
        return rng.choice([None, True, False, 0, -1.5, 10**20])
    if pick == 1:
        return "".join(rng.choice('ab,:[]{}"\\\n é') for _ in range(rng.randrange(8)))
    if pick in (2, 3):
        return rng.randrange(1000)
    if pick in (4, 5):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {
        "".join(rng.choice('k,:"{') for _ in range(rng.randrange(4))): _random_json(rng, depth + 1)
        for _ in range(rng.randrange(5))
    }


@pytest.mark.parametrize("seed", range(200))
def test_the_guest_counts_a_value_as_the_host_counts_its_frame(seed: int) -> None:
    output = load_guest("airlock_output")
    value = _random_json(random.Random(seed))
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    assert output.value_elements(value) == count_elements(text.encode())
    assert output.value_elements(value) <= len(text)


@pytest.mark.parametrize(
    ("value", "limit_bytes", "limit_elements", "refusal"),
    [
        ("x" * 100, 50, 1000, {"size_bytes": 102, "limit_bytes": 50}),
        ("x" * 100, 102, 1000, None),
        ([[]] * 30, 1000, 60, {"size_bytes": 91}),
        ([[]] * 30, 1000, 61, None),
        ({"k": [0, 1]}, 1000, 5, None),
        ({"k": [0, 1]}, 1000, 4, {"size_bytes": 11}),
    ],
)
def test_the_guest_refuses_a_final_value_over_its_limits(
    value: object, limit_bytes: int, limit_elements: int, refusal: dict[str, int] | None
) -> None:
    output = load_guest("airlock_output")
    text = json.dumps(value, separators=(",", ":"))
    error = output.too_large(value, text, limit_bytes, limit_elements)
    if refusal is None:
        assert error is None
        return
    assert error is not None
    assert (error["type"], error["code"]) == ("ResultTooLarge", "result_too_large")
    assert {k: error[k] for k in refusal} == refusal
    assert ("limit_bytes" in error) == ("limit_bytes" in refusal)


def test_a_result_from_the_runner_keeps_its_sizes_on_the_host() -> None:
    # The harness's view of a ResultTooLarge the sandbox reported (no Docker needed).
    result = RunResult.model_validate(
        {
            "status": "error",
            "exit_status": 1,
            "has_value": False,
            "duration_s": 0.1,
            "error": {
                "type": "ResultTooLarge",
                "message": "the final value is 9 bytes of JSON; the limit is 4",
                "code": "result_too_large",
                "size_bytes": 9,
                "limit_bytes": 4,
            },
        }
    )
    answer = json.loads(program_result(result, stdout_bytes=100).content)
    assert (answer["error"], answer["size_bytes"], answer["limit_bytes"]) == (
        "result_too_large",
        9,
        4,
    )
