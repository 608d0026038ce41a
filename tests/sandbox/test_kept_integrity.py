"""Nothing survives a program of a kept session but what is kept on purpose.

Hostile first programs in a real kept container, under each runtime: one leaves a thread,
a child process or a daemonized (double-forked, ``setsid``) grandchild that keeps trying to
send frames (a forged ``done``, tool calls) on the bridge and to open a connection of its own;
one patches modules (``json.dumps``, the bridge's ``send``); one writes half a frame; one
exits without reporting and leaves a child that dials the host's socket. The next program's
answer, call count and audit records are its own, the program after it gets its own answer
too (nothing shifted), and the leftover is gone, as the container's pid list shows from the
host. What a program leaves where the kept names wait (a link to ``/dev/zero``, a directory,
a pickle of integers that all hash alike) neither fails nor holds up the next program, and
the one after gets the names the next kept. Directories a program took its own permissions
from, or nested 3,000 deep, are gone from ``/out`` (and a reused container's ``/tmp``) before
the next program, and so are message queues. A program that stops reading does not hold up
the next program nor ``close()``. A program cannot reach into the runner (its memory,
descriptors, environment), which holds the next program's one-time token.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import AsyncIterator

import docker
import pytest

from airlock.bridge import ToolSession
from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DockerBackend, KeptSandbox, RunResult, SandboxClosed, StartTimedOut
from airlock.tools import AuditLog, MemoryAuditStore, Registry
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import IMAGE
from tests.sandbox.guest_image import load_guest
from tests.sandbox.runtimes import RUNTIMES, require_runtime

DEADLINE_S = 4.0
CLEARING_DEADLINE_S = 15.0
MARGIN_S = 6.0
"""How long past its deadline a call or a close may take (judging, removing a container)."""

# What a leftover does, forever: forge the next program's answer and make calls in its name
# on the bridge it inherited, and try a connection of its own to the host's socket.
_ATTACK = """
import json, os, socket, struct, time
def _frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body
def _attack(fd):
    forged = _frame({"type": "done", "result": {"status": "ok", "exit_status": 0,
        "has_value": True, "value": "forged"}})
    call = _frame({"type": "call", "id": 999, "tool": "records_item_get",
        "args": {"record_id": "rec_7"}})
    hello = _frame({"type": "hello", "version": 3, "pid": 1, "token": "guess"})
    while True:
        for data in (call, forged):
            try:
                os.write(fd, data)
            except OSError:
                pass
        try:
            own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            own.connect("/run/airlock/bridge.sock")
            own.sendall(hello + forged)
        except OSError:
            pass
        time.sleep(0.005)
BRIDGE = tools._connection.fileno()
"""

LEFTOVERS = {
    "thread": _ATTACK
    + textwrap.dedent("""
        import threading
        def _later():
            time.sleep(0.05)
            _attack(BRIDGE)
        threading.Thread(target=_later, daemon=False).start()
        "first"
    """),
    "child": _ATTACK
    + textwrap.dedent("""
        if os.fork() == 0:
            time.sleep(0.05)
            _attack(BRIDGE)
        "first"
    """),
    "daemon": _ATTACK
    + textwrap.dedent("""
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(0.05)
                _attack(BRIDGE)
            os._exit(0)
        "first"
    """),
    "patched-modules": textwrap.dedent("""
        import json, sys
        json.loads = lambda *args, **kwargs: {"type": "result", "id": 1, "ok": True,
            "value": "forged"}
        bridge = sys.modules["airlock_bridge"]
        send = bridge.Connection.send
        def forging(self, message):
            if message.get("type") == "done":
                message["result"]["value"] = "forged"
            send(self, message)
        bridge.Connection.send = forging
        "first"
    """),
    "half-frame-left": _ATTACK
    + textwrap.dedent("""
        if os.fork() == 0:
            time.sleep(0.05)
            os.write(BRIDGE, struct.pack(">I", 4000) + b'{"type": "done", "res')
            _attack(BRIDGE)
        "first"
    """),
    "exits-early": _ATTACK
    + textwrap.dedent("""
        if os.fork() == 0:
            os.close(BRIDGE)
            time.sleep(0.05)
            _attack(-1)
        os._exit(0)
    """),
    "half-frame": textwrap.dedent("""
        import os, struct
        os.write(tools._connection.fileno(), struct.pack(">I", 4000) + b'{"type": "call", "i')
        "first"
    """),
}
"""Hostile first programs, by what they leave."""

SECOND = textwrap.dedent("""
    import time
    total = tools.records_item_get(record_id="rec_2")["total"]
    time.sleep(0.3)  # a leftover, if any were alive, would act now
    total
""")

_NAMES = load_guest("airlock_kept").GLOBALS_FILE
# The program's own names would be written over what it left: it patches its process's keep.
_OWN_NAMES_BLOCKED = (
    "import os, sys\nsys.modules['airlock_kept'].KeptGlobals.keep = lambda *args, **kwargs: None\n"
)
# A pickle of a dictionary of 60,000 integers that all hash alike, made without building it:
# loading it would take minutes (tests/sandbox/test_kept_globals.py's colliding_integers).
_COLLIDING = textwrap.dedent("""
    parts = [b"\\x80\\x02}("]
    for n in range(1, 60_000):
        key = n * ((1 << 61) - 1)
        encoded = key.to_bytes((key.bit_length() + 8) // 8, "little", signed=True)
        parts.append(b"\\x8a" + bytes([len(encoded)]) + encoded + b"N")
""")
NAMES_IN_THE_WAY = {
    "link to /dev/zero": _OWN_NAMES_BLOCKED + f"os.symlink('/dev/zero', {_NAMES!r})\n'first'",
    "directory": _OWN_NAMES_BLOCKED
    + f"os.mkdir({_NAMES!r})\nopen({_NAMES!r} + '/x', 'w').write('x')\n'first'",
    "colliding integers": _OWN_NAMES_BLOCKED
    + _COLLIDING
    + f"open({_NAMES!r}, 'wb').write(b''.join(parts) + b'u.')\n'first'",
}
"""First programs that leave something else where the kept names wait, and keep their own
names from being written over it."""

FULL = SandboxProfile(language_mode="full", timeout_s=DEADLINE_S)
NEXT_THREADS = 3
"""Threads of the next program's process, forked ahead: its own, and the readers of its
stdout and stderr, started while it waits for its program."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=RUNTIMES)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[DockerBackend]:
    runtime: ContainerRuntime = request.param
    require_runtime(runtime)
    profile = FULL.model_copy(update={"runtime": runtime})
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _session(registry: Registry) -> ToolSession:
    return ToolSession(registry=registry, principal=ALICE, grant=GRANT)


def _pids(container_id: str) -> list[tuple[int, int, int, str]]:
    """The container's pid list as the engine shows it from inside: (pid, threads, start
    time in clock ticks, command) of every process but the lister itself."""
    lister = (
        "import os\n"
        "me = os.getpid()\n"
        "for p in sorted(int(e) for e in os.listdir('/proc') if e.isdigit()):\n"
        "    if p == me: continue\n"
        "    try:\n"
        "        cmd = open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode()\n"
        "        start = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[19]\n"
        "        print(p, len(os.listdir(f'/proc/{p}/task')), start, cmd.strip())\n"
        "    except OSError: pass\n"
    )
    container = docker.from_env().containers.get(container_id)
    for _ in range(5):
        # The runner ends every other process once a program's process exits: a lister
        # started just then is ended too, and tries again.
        code, output = container.exec_run(["python3", "-I", "-S", "-c", lister])
        if code == 0:
            break
        time.sleep(0.1)
    assert code == 0, output
    rows = []
    for line in output.decode().splitlines():
        pid, threads, start, command = line.split(" ", 3)
        rows.append((int(pid), int(threads), int(start), command))
    return rows


async def _only_the_runner(kept: KeptSandbox, since: int) -> None:
    """The container holds its runner (pid 1, one thread) and at most the next program's
    process, forked ahead after the last program (started at ``since`` or later, with
    :data:`NEXT_THREADS` threads at most), and nothing else, within 2 s."""
    container = kept._container
    assert container is not None
    rows: list[tuple[int, int, int, str]] = []
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        rows = await asyncio.to_thread(_pids, container.id)
        others = [row for row in rows if row[0] != 1]
        if len(others) <= 1 and all(row[1] <= NEXT_THREADS and row[2] >= since for row in others):
            break
        await asyncio.sleep(0.1)
    assert [(pid, threads) for pid, threads, _, _ in rows if pid == 1] == [(1, 1)], rows
    others = [row for row in rows if row[0] != 1]
    assert len(others) <= 1, rows
    assert all(threads <= NEXT_THREADS and start >= since for _, threads, start, _ in others), rows
    assert all("airlock_runner.py" in command for *_, command in rows), rows


def _calls(audit: AuditLog, session: ToolSession) -> list[tuple[str, str, str]]:
    return [
        (event.call_id, event.tool, event.outcome)
        for event in audit.events(run_id=session.run_id)
        if event.tool
    ]


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("leftover", sorted(LEFTOVERS))
async def test_what_a_program_leaves_cannot_reach_the_next(
    backend: DockerBackend, leftover: str
) -> None:
    audit = AuditLog(MemoryAuditStore())
    registry = build_registry(audit=audit)
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        first_session = _session(registry)
        first = await kept.run(LEFTOVERS[leftover], tools=first_session)
        second_session = _session(registry)
        began = time.monotonic()
        second = await kept.run(SECOND, tools=second_session)
        took = time.monotonic() - began
        third = await kept.run(
            "[40 + 2, int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])]",
            tools=_session(registry),
        )
        if kept.alive:
            await _only_the_runner(kept, since=third.value[1])
        await asyncio.sleep(0.3)  # a leftover that survived would have sent by now
        first_calls = _calls(audit, first_session)
        second_calls = _calls(audit, second_session)
    finally:
        await kept.close()

    assert (second.status, second.value, second.tool_calls) == ("ok", 20, 1), second
    assert (third.status, third.value[0]) == ("ok", 42), third
    # Not held up by what the first left (after a broken stream: a new container's start).
    assert took < (DEADLINE_S + MARGIN_S if leftover == "half-frame" else DEADLINE_S), took
    # The second program's audit records are its one call, nothing a leftover sent.
    assert [(tool, outcome) for _, tool, outcome in second_calls] == [("records_item_get", "ok")], (
        second_calls
    )
    assert all(call_id.startswith(second_session.run_id) for call_id, _, _ in second_calls)
    # Whatever the leftover sent while the first program still ran is the first's own.
    assert all(tool in ("records_item_get", "") for _, tool, _ in first_calls), first_calls
    if leftover == "exits-early":
        # Its process ended without a ``done``: the runner went on to the next program.
        assert first.error is not None, first
        assert first.error.type == "ProgramExited", first
        assert kept.starts == 1
    elif leftover == "half-frame" or (leftover == "half-frame-left" and kept.starts == 2):
        # The broken stream ends the first program only; the next starts afresh.
        assert first.status in ("protocol_error", "limit_exceeded"), first
        assert kept.starts == 2
    else:
        # Until its own ``done`` its process tree speaks for it: a forged answer there is
        # the first program's own doing.
        assert first.status == "ok", first
        assert first.value in ("first", "forged"), first
        assert kept.starts == 1


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("leftover", sorted(NAMES_IN_THE_WAY))
async def test_what_a_program_leaves_where_the_names_wait_harms_no_later_program(
    backend: DockerBackend, leftover: str
) -> None:
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        first = await kept.run(NAMES_IN_THE_WAY[leftover])
        began = time.monotonic()
        second = await kept.run("n = 7\n40 + 2")
        took = time.monotonic() - began
        third = await kept.run("n")
    finally:
        await kept.close()

    assert first.status == "ok", first
    # The next program's process reads that place before its program is known: it neither
    # waits on it, nor reads it until its memory runs out, nor dies.
    assert (second.status, second.value) == ("ok", 42), second
    assert took < DEADLINE_S, took
    # The way was cleared for the names the second program kept.
    assert (third.status, third.value) == ("ok", 7), third
    assert kept.starts == 1


@pytest.mark.docker
@pytest.mark.anyio
async def test_kept_names_come_back_and_patches_do_not(backend: DockerBackend) -> None:
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        first = await kept.run(
            textwrap.dedent("""
                import json
                rows = [{"n": 1}, {"n": 2}]
                def total(items, start=0):
                    return start + sum(item["n"] for item in items)
                from collections import Counter
                from math import sqrt
                json.dumps = lambda v, *a, _o=json.dumps, **k: "patched" if v == 1 else _o(v)
                open("/tmp/kept.txt", "w").write("file")
                class Point:
                    pass
                here = Point()
                "first"
            """)
        )
        second = await kept.run(
            "import os\n"
            "[total(rows), json.dumps(1), open('/tmp/kept.txt').read(), "
            "'here' in globals(), 'Point' in globals(), sqrt(16), Counter('aab')['a']]"
        )
    finally:
        await kept.close()
    assert first.status == "ok", first
    assert "not kept for the next program: Point (type), here (Point)" in first.stderr
    assert (second.status, second.value) == ("ok", [3, "1", "file", False, False, 4.0, 2]), second


# Marks the time in /tmp (kept for the next program) every millisecond, from a thread and a
# child process it leaves, and answers the time it ends at.
_MARKS_ON = """
import os, signal, threading, time
def mark(path):
    while True:
        with open(path + ".new", "w") as file:
            file.write(repr(time.time()))
        os.replace(path + ".new", path)  # (stopped or ended mid-write: the last one stays)
        time.sleep(0.001)
threading.Thread(target=mark, args=("/tmp/thread",), daemon=True).start()
if os.fork() == 0:
    mark("/tmp/child")
while not (os.path.exists("/tmp/thread") and os.path.exists("/tmp/child")):
    time.sleep(0.001)  # (a loaded machine may run the thread or the child late)
time.sleep(0.05)
time.time()
"""
_CONTINUES = _MARKS_ON.replace(
    "time.sleep(0.05)",
    "parent = os.getpid()\n"
    "if os.fork() == 0:\n"
    "    while True:\n"
    "        os.kill(parent, signal.SIGCONT)\n"
    "time.sleep(0.05)",
)
"""The same, with a child that keeps continuing the program's process once it stops."""


LEFT_RUNNING = {"marks": _MARKS_ON, "continued": _CONTINUES}
TOKEN_HELD_BACK_S = 1.0
"""How long the host's loop holds the next program's token back. What a program left is
stopped as it reports (every thread of its process), or ended by the clearing
``REPORTED_GRACE_S`` after that stop (a child that continues the stopped process lets its
thread run on until then): either way, long before the token. Waiting for the token, it
would mark past it."""


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("case", list(LEFT_RUNNING))
async def test_what_a_program_left_stops_when_it_reports_whatever_the_host_does(
    backend: DockerBackend, case: str
) -> None:
    """Its process stops (every thread of it) as it reports, and its runner ends what it
    left a moment later, without waiting for the host to send the next program's token,
    which a host busy with other work sends late."""
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        first = await kept.run(LEFT_RUNNING[case])
        time.sleep(TOKEN_HELD_BACK_S)  # the host's loop held up: no token goes out meanwhile
        second = await kept.run(
            "[float(open('/tmp/thread').read()), float(open('/tmp/child').read())]"
        )
    finally:
        await kept.close()
    assert first.status == "ok", first
    assert (second.status, kept.starts) == ("ok", 1), second
    marked_after = [mark - first.value for mark in second.value]
    assert max(marked_after) < TOKEN_HELD_BACK_S / 2, marked_after


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("connected_ahead", [False, True], ids=["clearing", "connected_ahead"])
async def test_a_program_that_finds_its_container_ended_since_the_last_runs_in_a_new_one(
    backend: DockerBackend, connected_ahead: bool
) -> None:
    """The container ended between programs (as its runner cleared it, or once the next
    program's process had connected ahead), and the host has not seen it yet (its loop held
    up): the next program never reached it, and runs in a new container."""
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        first = await kept.run("n = 1\n'first'")
        if connected_ahead:
            await asyncio.sleep(1.0)
        container = kept._container
        assert container is not None
        docker.from_env().api.kill(container.id)  # (a blocking call: the loop sees nothing)
        time.sleep(0.5)
        second = await kept.run("'n' in globals()")
    finally:
        await kept.close()
    assert first.status == "ok", first
    assert (second.status, second.value, kept.starts) == ("ok", False, 2), second


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_program_that_stops_reading_holds_up_neither_the_next_nor_close(
    backend: DockerBackend,
) -> None:
    registry = build_registry()
    kept = backend.keep(ALICE, idle_timeout=60)
    # Fires calls whose results (1 MB each) it never reads, and spins until its deadline.
    spins = textwrap.dedent("""
        conn = tools._connection
        for _ in range(40):
            conn.submit({"type": "call", "tool": "records_blob_get", "args": {"size": 1_000_000}})
        while True:
            pass
    """)
    # Fires the same calls and ends at once, leaving the host with results nobody reads.
    leaves = spins.replace("while True:\n    pass", '"left"')
    try:
        left = await kept.run(leaves, tools=_session(registry))
        began = time.monotonic()
        results = await asyncio.gather(
            kept.run(spins, tools=_session(registry)),
            kept.run("1 + 1", tools=_session(registry)),
            return_exceptions=True,
        )
        took = time.monotonic() - began
        assert took < DEADLINE_S + MARGIN_S, took
        closing = asyncio.create_task(kept.run(spins, tools=_session(registry)))
        await asyncio.sleep(1.0)
        began = time.monotonic()
        await asyncio.wait_for(kept.close(), MARGIN_S)
        closed_in = time.monotonic() - began
        # Cut off by the close, which it says (not judged as the program's or runner's end).
        with pytest.raises(SandboxClosed, match="kept sandbox was closed"):
            await asyncio.wait_for(closing, MARGIN_S)
    finally:
        await kept.close()
    assert left.status in ("ok", "error"), left
    spun, waited = results
    assert isinstance(spun, RunResult), spun
    assert (spun.status, spun.limit) == ("limit_exceeded", "timeout"), spun
    # The second call waited for the first within its own deadline, then gave up: as a
    # timeout when less was left than the least a program is given; with more left (the
    # first ended a little early on a loaded machine), its container's start was given what
    # was left, too little, and it timed out.
    if isinstance(waited, BaseException):
        assert isinstance(waited, StartTimedOut), repr(waited)
    else:
        assert waited.status == "limit_exceeded", waited
    assert closed_in < MARGIN_S


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("deadline_s", [0.001, 0.02])
async def test_a_deadline_over_before_the_program_starts_is_a_timeout(
    backend: DockerBackend, deadline_s: float
) -> None:
    # A program that waited out most of its deadline behind the one before it starts with
    # what is left: too little for the runner to ready its process is the program's limit,
    # not a broken runner.
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        short = kept.profile.model_copy(update={"timeout_s": deadline_s})
        result = await kept.run("1 + 1", profile=short)
    finally:
        await kept.close()
    assert (result.status, result.limit) == ("limit_exceeded", "timeout"), result


@pytest.mark.docker
@pytest.mark.anyio
async def test_reuse_keeps_one_container_per_principal_and_nothing_between_runs() -> None:
    require_runtime("runc")
    backend = DockerBackend(image=IMAGE, profile=FULL, pool_size=0, reuse=True, reuse_max=2)
    await backend.start()
    registry = build_registry()
    bob = ALICE.model_copy(update={"user_id": "bob"})
    carol = ALICE.model_copy(update={"user_id": "carol"})
    leaves = textwrap.dedent("""
        import os, time
        found = sorted(os.listdir("/tmp"))
        others = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())
        open("/tmp/left", "w").write("x")
        if os.fork() == 0:
            time.sleep(60)
        [found, others, open("/proc/1/stat").read().split()[21]]
    """)
    seen: list[tuple[str, RunResult]] = []
    try:
        for owner in (ALICE, bob, ALICE, bob, carol, ALICE):
            tools = ToolSession(registry=registry, principal=owner, grant=GRANT)
            seen.append((owner.user_id, await backend.run(leaves, tools=tools)))
    finally:
        await backend.close()
    for _, result in seen:
        assert result.status == "ok", result
        assert result.value[:2] == [[], [1]], result  # a clean /tmp, no leftover process
    # The runner's start time tells containers apart: one per principal while it is held.
    started = {(who, result.value[2]) for who, result in seen[:4]}
    assert len(started) == 2, started
    assert len({s for _, s in started}) == 2, started


# What a plain removal leaves behind, in /tmp and /out: directories a program took its own
# permissions from, and a tree deeper than a path can name, with a file at each bottom; and
# a message queue.
STUBBORN = textwrap.dedent("""
    import os
    for top in ("/tmp", "/out"):
        os.makedirs(f"{top}/d/e")
        open(f"{top}/d/e/secret", "w").write("left")
        os.chmod(f"{top}/d/e", 0o500)
        os.chmod(f"{top}/d", 0o000)
        fd = os.open(top, os.O_RDONLY)
        for _ in range(3000):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("secret", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
        os.close(fd)
    # A message queue made with a plain open: it outlives its process (not under gVisor).
    if os.path.isdir("/dev/mqueue"):
        os.close(os.open("/dev/mqueue/left", os.O_CREAT | os.O_RDWR, 0o600))
    "left"
""")
LOOK = textwrap.dedent("""
    import os
    queues = sorted(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else []
    [sorted(os.listdir("/tmp")), sorted(os.listdir("/out")), queues]
""")


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("keeps", [False, True], ids=["reused", "kept"])
async def test_what_a_program_leaves_in_files_and_queues_is_gone_before_the_next(
    runtime: ContainerRuntime, keeps: bool
) -> None:
    require_runtime(runtime)
    # The next program's wait for the clearing counts against its deadline; gVisor's ptrace
    # platform takes 2 to 4 s a 3000-deep tree on these machines, and a reused container
    # clears two. What is asserted is that nothing is left, not how fast it goes.
    deadline = CLEARING_DEADLINE_S if runtime == "runsc" else DEADLINE_S
    profile = FULL.model_copy(update={"runtime": runtime, "timeout_s": deadline})
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0, reuse=not keeps)
    await backend.start()
    try:
        if keeps:
            kept = backend.keep(ALICE, idle_timeout=60)
            first, second = await kept.run(STUBBORN), await kept.run(LOOK)
            await kept.close()
        else:
            first = await backend.run(STUBBORN, tools=_session(build_registry()))
            second = await backend.run(LOOK, tools=_session(build_registry()))
    finally:
        await backend.close()

    assert (first.status, first.value) == ("ok", "left"), first
    assert second.status == "ok", second
    tmp, out, queues = second.value
    assert (out, queues) == ([], []), second  # for every program
    # A reused container's /tmp starts empty too; a kept session's keeps its files.
    assert tmp == ([".airlock-globals", "a", "d"] if keeps else []), second


# Where a program could look for the next program's one-time token, or for the runner's own
# connection to the host: the runner (pid 1) holds both. Each probe must fail. (Under gVisor
# a program may list the runner's descriptors, and open its pipes; never its connection.)
RUNNER_PROBES = {
    "memory": "open('/proc/1/mem', 'rb').read(1)",
    "connection": textwrap.dedent("""
        for fd in os.listdir('/proc/1/fd'):
            if os.readlink(f'/proc/1/fd/{fd}').startswith('socket:'):
                os.close(os.open(f'/proc/1/fd/{fd}', os.O_RDWR))
                break
        else:
            raise OSError('no connection of the runner in sight')
    """),
    "ptrace": textwrap.dedent("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, 1, 0, 0) != 0:  # PTRACE_ATTACH
            raise OSError(ctypes.get_errno(), "ptrace")
    """),
    "limits": "import resource\nresource.prlimit(1, resource.RLIMIT_NOFILE, (40, 40))",
    "priority": "os.setpriority(os.PRIO_PROCESS, 1, 19)",
    "priority of the user": "os.setpriority(os.PRIO_USER, 0, 19)",
    "pidfd-getfd": textwrap.dedent("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        pidfd = libc.syscall(434, 1, 0)  # pidfd_open(1)
        if pidfd < 0 or libc.syscall(438, pidfd, 3, 0) < 0:  # pidfd_getfd(pidfd, 3)
            raise OSError(ctypes.get_errno(), "pidfd")
    """),
}


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("probe", sorted(RUNNER_PROBES))
async def test_a_program_cannot_reach_into_the_runner(backend: DockerBackend, probe: str) -> None:
    """The runner hands each program's process its token only on the control connection,
    which no program's process holds: its memory, descriptors and environment are out of
    reach, and the next program runs as its own."""
    registry = build_registry()
    kept = backend.keep(ALICE, idle_timeout=60)
    code = "import os\n" + textwrap.dedent(RUNNER_PROBES[probe])
    try:
        first = await kept.run(
            f"try:\n{textwrap.indent(code, '    ')}\n"
            "    got = 'reached'\n"
            "except OSError as exc:\n"
            "    got = type(exc).__name__\n"
            "got\n",
            tools=_session(registry),
        )
        second = await kept.run(SECOND, tools=_session(registry))
    finally:
        await kept.close()
    assert first.status == "ok", first
    assert first.value != "reached", first
    assert (second.status, second.value, second.tool_calls) == ("ok", 20, 1), second
