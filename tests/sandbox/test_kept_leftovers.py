"""What one program of a kept or reused container can leave for the next, in real containers.

Sockets a program parks where no process holds them (sent with ``SCM_RIGHTS`` over a socket
that is itself in flight) outlive its processes: the zygote finds them after clearing and,
if the kernel does not free them (gVisor never does), gives up on the container. No program
names a socket: the second layer refuses ``bind``, and ``SO_PASSCRED`` and ``SO_PASSPIDFD``,
with which Linux names ("autobinds") a socket that sends or connects. A kept ``def result``
never answers for a later program.
"""

from __future__ import annotations

import logging
import textwrap

import pytest

from airlock.bridge import ToolSession
from airlock.policies import ContainerRuntime, LanguageMode, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult, SandboxFailure
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.conftest import IMAGE
from tests.sandbox.runtimes import RUNTIMES, require_runtime, runtime_sandbox


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


PARKS_SOCKETS = textwrap.dedent(r"""
    import array, os, socket, time
    held, refused = [], []
    for i in range(3):
        named, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            named.bind(f"\0left-{i}-secret-of-run-one".encode())
        except OSError as exc:
            refused.append(exc.errno)
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                            array.array("i", [named.fileno(), a.fileno(), b.fileno()]))])
        held.append((named, peer, a, b))
    if os.fork() == 0:  # the last holder, ended by the runner's clearing
        time.sleep(30)
    refused
""")
LISTS_SOCKETS = "[line.split()[6:] for line in open('/proc/net/unix').readlines()[1:]]"


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_a_reused_container_carries_no_socket_to_the_next_run(
    runtime: ContainerRuntime,
) -> None:
    require_runtime(runtime)
    profile = SandboxProfile(language_mode="full", timeout_s=8, runtime=runtime)
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0, reuse=True)
    await backend.start()
    registry = build_registry()

    async def run(program: str) -> RunResult:
        tools = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
        return await backend.run(program, tools=tools)

    try:
        await run(LISTS_SOCKETS)
        before = await run(LISTS_SOCKETS)  # a cleared container's own: the bridge's
        first = await run(PARKS_SOCKETS)
        try:
            second = await run(LISTS_SOCKETS)
        except SandboxFailure:
            # The runner gave up on the container before this run came to it (gVisor frees
            # no parked socket): nothing of the first run is in the one that follows.
            second = await run(LISTS_SOCKETS)
    finally:
        await backend.close()

    assert before.status == "ok", before
    assert (second.status, len(second.value)) == ("ok", len(before.value)), (before, second)
    assert [row for row in second.value if row[1:2] and row[1].startswith("@")] == [], second
    assert (first.status, first.value) == ("ok", [1, 1, 1]), first  # EPERM: no names


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_runner_that_gives_up_on_its_container_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # gVisor never frees the sockets a program parks: the kept runner gives up on its
    # container as the next program comes, and says so before it exits. The program never
    # reached it and runs in a new container; the operator's log says what was left.
    require_runtime("runsc")
    profile = SandboxProfile(language_mode="full", timeout_s=8, runtime="runsc")
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0)
    await backend.start()
    registry = build_registry()
    kept = backend.keep(ALICE, idle_timeout=60)
    caplog.set_level(logging.WARNING, logger="airlock.sandbox")
    try:
        parks = await kept.run(
            PARKS_SOCKETS, tools=ToolSession(registry=registry, principal=ALICE, grant=GRANT)
        )
        after = await kept.run(
            "'after'", tools=ToolSession(registry=registry, principal=ALICE, grant=GRANT)
        )
        starts = kept.starts
    finally:
        await kept.close()
        await backend.close()

    assert parks.status == "ok", parks
    assert (after.status, after.value, starts) == ("ok", "after", 2), after
    told = [record.getMessage() for record in caplog.records if "exited" in record.getMessage()]
    assert len(told) == 1, told
    assert "it said: it could not clear the container in 3 s: " in told[0], told
    assert "socket(s) no process holds" in told[0], told


# How a program could have Linux name its socket: an option that passes credentials, then a
# call that autobinds a socket with it set (connect names it even when it fails).
_SO_PASSCRED, _SO_PASSPIDFD = 16, 76
_DGRAM, _STREAM, _SEQPACKET = 2, 1, 5
AUTOBINDS: dict[str, tuple[int, int, str]] = {
    f"{option_name} {kind_name} {trigger}": (option, kind, trigger)
    for option_name, option in (("SO_PASSCRED", _SO_PASSCRED), ("SO_PASSPIDFD", _SO_PASSPIDFD))
    for kind_name, kind, trigger in (
        ("dgram", _DGRAM, "send"),
        ("seqpacket", _SEQPACKET, "send"),
        ("dgram", _DGRAM, "connect"),
        ("stream", _STREAM, "connect"),
    )
}
TRIES_AUTOBIND = f"""
import socket
outcomes = {{}}
for case, (option, kind, trigger) in {AUTOBINDS!r}.items():
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    try:
        a.setsockopt(socket.SOL_SOCKET, option, 1)
        refused = 0
    except OSError as exc:
        refused = exc.errno
    try:
        a.send(b"x") if trigger == "send" else a.connect(b"\\0nowhere")
    except OSError:
        pass
    outcomes[case] = [refused, repr(a.getsockname())]
    a.close()
    b.close()
outcomes
"""


@pytest.fixture(scope="module", params=RUNTIMES)
def autobinds(request: pytest.FixtureRequest) -> dict[str, object]:
    runtime: ContainerRuntime = request.param
    with runtime_sandbox(runtime) as box:
        result = box.run(TRIES_AUTOBIND, language_mode="full")
    assert result.status == "ok", (result.error, result.stderr)
    assert isinstance(result.value, dict)
    return result.value


@pytest.mark.docker
@pytest.mark.parametrize("case", list(AUTOBINDS))
def test_no_socket_of_a_program_is_named_by_autobind(
    autobinds: dict[str, object], case: str
) -> None:
    assert autobinds[case] == [1, "''"]  # EPERM, and getsockname(): unnamed


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["full", "restricted"])
async def test_a_kept_def_cannot_take_the_place_of_result(mode: LanguageMode) -> None:
    require_runtime("runc")
    profile = SandboxProfile(language_mode=mode, timeout_s=8)
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0)
    await backend.start()
    registry = build_registry()
    kept = backend.keep(ALICE, idle_timeout=60)
    try:
        await kept.run(
            "def result(value):\n    tools.records_item_get(record_id='rec_7')\n'first'",
            tools=ToolSession(registry=registry, principal=ALICE, grant=GRANT),
        )
        second = await kept.run(
            "result(tools.records_item_get(record_id='rec_2')['total'])",
            tools=ToolSession(registry=registry, principal=ALICE, grant=GRANT),
        )
    finally:
        await kept.close()
        await backend.close()

    assert (second.status, second.value, second.tool_calls) == ("ok", 20, 1), second
