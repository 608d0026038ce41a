"""The second seccomp layer, which the runner loads before a program runs: each of its rules
refuses its call from inside a run, alone (the runner as a host process, without Docker's
profile) and with the outer layer (in a container, under each runtime), in both language
modes, while a normal program still works; a layer that cannot load runs nothing; the
filter the host renders for doctor and the inventory is the one the image loads; and the layer
the image ships compiled is the one its libseccomp compiles (the runner alone, without those
files, compiles its own).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from airlock.policies import ContainerRuntime, LanguageMode, SandboxProfile
from airlock.sandbox import describe_guest_filter
from tests.conftest import IMAGE
from tests.sandbox.guest_image import GUEST_DIR, load_guest
from tests.sandbox.runtimes import RUNTIMES, RuntimeSandbox, require_runtime, runtime_sandbox
from tests.sandbox.syscalls import ARCH_COLUMN, GUEST_CALLS, guest_call_program, guest_rule_keys
from tests.sandbox.test_guest_runner import ALLOWED, run_in_process

MODES: tuple[LanguageMode, ...] = ("restricted", "full")
RULES = load_guest("airlock_seccomp").RULES
# The calls need ctypes and os, which a profile may allow in restricted mode too: the layer,
# not the import list, must be what refuses them.
IMPORTS = ALLOWED | {"ctypes", "os", "threading"}


def _here(name: str) -> bool:
    import platform

    return GUEST_CALLS[name][0][ARCH_COLUMN[platform.machine()]] is not None


def _cases() -> list[tuple[LanguageMode, str, int]]:
    return [
        (mode, key, rule.errno)
        for mode in MODES
        for key, rule in zip(guest_rule_keys(RULES), RULES, strict=True)
        if mode in rule.modes and _here(key)
    ]


CASES = _cases()
IDS = [f"{mode}-{name}" for mode, name, _ in CASES]


def _names(mode: LanguageMode) -> list[str]:
    return sorted({name for m, name, _ in CASES if m == mode})


# -- the layer alone: the runner as a host process -----------------------------------------


@pytest.fixture(scope="module")
def alone() -> dict[LanguageMode, dict[str, object]]:
    outcomes: dict[LanguageMode, dict[str, object]] = {}
    for mode in MODES:
        result = run_in_process(
            guest_call_program(_names(mode)), mode=mode, allowed_imports=IMPORTS
        )
        assert result["status"] == "ok", result["error"]
        outcomes[mode] = result["value"]
    return outcomes


@pytest.mark.parametrize(("mode", "call", "errno"), CASES, ids=IDS)
def test_the_layer_alone_refuses_its_calls(
    alone: dict[LanguageMode, dict[str, object]], mode: LanguageMode, call: str, errno: int
) -> None:
    assert alone[mode][call] == [-1, errno]


# setsockopt is refused for two options at one level, each read as the kernel reads an int
# (the register's upper bits ignored); every other option or level reaches the kernel, which
# answers EBADF for no descriptor.
SETSOCKOPTS = {
    "SOL_SOCKET, SO_PASSCRED": (1, 16, 1),
    "SOL_SOCKET, SO_PASSPIDFD": (1, 76, 1),
    "SOL_SOCKET, SO_PASSCRED with upper bits": (1, 0x1_0000_0010, 1),
    "SOL_SOCKET with upper bits, SO_PASSCRED": (0x1_0000_0001, 16, 1),
    "SOL_SOCKET, SO_SNDBUF": (1, 7, 9),
    "SOL_SOCKET, SO_PASSSEC": (1, 34, 9),
    "SOL_IP, 16": (0, 16, 9),
    "SOL_TCP, 76": (6, 76, 9),
}
SETSOCKOPT_PROGRAM = """
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
number = {"x86_64": 54, "aarch64": 208}[platform.machine()]
value = ctypes.c_int(1)
outcomes = {}
for case, (level, option, _) in CASES.items():
    ctypes.set_errno(0)
    rc = libc.syscall(number, ctypes.c_long(-1), ctypes.c_long(level), ctypes.c_long(option),
                      ctypes.byref(value), ctypes.c_long(4))
    outcomes[case] = [rc, ctypes.get_errno()]
outcomes
"""


@pytest.fixture(scope="module")
def setsockopts() -> dict[LanguageMode, dict[str, object]]:
    outcomes: dict[LanguageMode, dict[str, object]] = {}
    for mode in MODES:
        program = f"CASES = {SETSOCKOPTS!r}\n{SETSOCKOPT_PROGRAM}"
        result = run_in_process(program, mode=mode, allowed_imports=IMPORTS | {"platform"})
        assert result["status"] == "ok", result["error"]
        outcomes[mode] = result["value"]
    return outcomes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(SETSOCKOPTS))
def test_setsockopt_is_refused_only_for_passing_credentials(
    setsockopts: dict[LanguageMode, dict[str, object]], mode: LanguageMode, case: str
) -> None:
    assert setsockopts[mode][case] == [-1, SETSOCKOPTS[case][2]]


def test_processes_stay_allowed_in_full_mode_alone() -> None:
    program = (
        "import os\npid = os.fork()\nif pid == 0:\n    os._exit(7)\nos.waitpid(pid, 0)[1] >> 8\n"
    )
    result = run_in_process(program, mode="full")
    assert result["value"] == 7


NORMAL_PROGRAM = """
import asyncio, json, threading
box = []
worker = threading.Thread(target=box.append, args=(1,))
worker.start()
worker.join()
async def twice(x):
    await asyncio.sleep(0)
    return x * 2
async def main():
    return await asyncio.gather(twice(1), twice(2))
{"thread": box, "gathered": asyncio.run(main()), "json": json.loads("[1]")}
"""
NORMAL_VALUE = {"thread": [1], "gathered": [2, 4], "json": [1]}


@pytest.mark.parametrize("mode", MODES)
def test_threads_and_asyncio_work_under_the_layer_alone(mode: LanguageMode) -> None:
    result = run_in_process(NORMAL_PROGRAM, mode=mode, allowed_imports=IMPORTS)
    assert result["status"] == "ok", result["error"]
    assert result["value"] == NORMAL_VALUE


@pytest.fixture
def guest_without_libseccomp() -> Iterator[Path]:
    """The guest's modules with a ``pyseccomp`` that cannot be imported, as in an image
    built without libseccomp."""
    home = Path(tempfile.mkdtemp(prefix="airlock-guest-broken-"))
    try:
        for source in GUEST_DIR.glob("*.py"):
            shutil.copy(source, home / source.name)
        (home / "lib").mkdir()
        (home / "lib" / "pyseccomp.py").write_text(
            "raise RuntimeError('Unable to find libseccomp')\n"
        )
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_no_layer_no_run(guest_without_libseccomp: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    program = f"open({str(marker)!r}, 'w').write('the program ran')\n1\n"
    result = _run_with_runner(guest_without_libseccomp / "airlock_runner.py", program)
    assert result["status"] == "error"
    assert result["error"]["type"] == "ConfinementError"
    assert "Unable to find libseccomp" in result["error"]["message"]
    assert "the program did not run" in result["error"]["message"]
    assert not marker.exists()


def _run_with_runner(runner: Path, program: str) -> dict[str, object]:
    import json
    import socket
    import struct

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bridge.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(1)
        child = subprocess.Popen([sys.executable, "-I", str(runner), path], env={})
        try:
            listener.settimeout(30)
            conn, _ = listener.accept()
            stream = conn.makefile("rwb")

            def recv() -> dict[str, object]:
                (size,) = struct.unpack(">I", stream.read(4))
                message: dict[str, object] = json.loads(stream.read(size))
                return message

            assert recv()["type"] == "hello"
            body = json.dumps({"type": "run", "program": program, "mode": "full",
                               "allowed_imports": [], "output_limit": 4096, "tools": []}).encode()  # fmt: skip
            stream.write(struct.pack(">I", len(body)) + body)
            stream.flush()
            done = recv()
            assert done["type"] == "done"
            result = done["result"]
            assert isinstance(result, dict)
            return result
        finally:
            child.wait(timeout=30)
            listener.close()


# -- both layers: in a container, under each runtime ---------------------------------------


@pytest.fixture(scope="module", params=RUNTIMES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[RuntimeSandbox]:
    runtime: ContainerRuntime = request.param
    with runtime_sandbox(runtime) as box:
        yield box


@pytest.fixture(scope="module")
def contained(sandbox: RuntimeSandbox) -> dict[LanguageMode, dict[str, object]]:
    outcomes: dict[LanguageMode, dict[str, object]] = {}
    for mode in MODES:
        result = sandbox.run(
            guest_call_program(_names(mode)), language_mode=mode, allowed_imports=IMPORTS
        )
        assert result.status == "ok", (result.error, result.stderr)
        assert isinstance(result.value, dict)
        outcomes[mode] = result.value
    return outcomes


@pytest.mark.docker
@pytest.mark.parametrize(("mode", "call", "errno"), CASES, ids=IDS)
def test_each_call_of_the_layer_is_refused_in_a_run(
    contained: dict[LanguageMode, dict[str, object]], mode: LanguageMode, call: str, errno: int
) -> None:
    assert contained[mode][call] == [-1, errno]


@pytest.mark.docker
@pytest.mark.parametrize("mode", MODES)
def test_a_normal_program_still_works(sandbox: RuntimeSandbox, mode: LanguageMode) -> None:
    result = sandbox.run(NORMAL_PROGRAM, language_mode=mode, allowed_imports=IMPORTS)
    assert result.status == "ok", (result.error, result.stderr)
    assert result.value == NORMAL_VALUE


@pytest.mark.docker
def test_a_child_cannot_be_spawned_in_either_mode(sandbox: RuntimeSandbox) -> None:
    program = textwrap.dedent("""
        import subprocess
        try:
            subprocess.run(["/bin/true"])
            outcome = "spawned"
        except OSError as exc:
            outcome = exc.errno
        outcome
    """)
    for mode in MODES:
        result = sandbox.run(program, language_mode=mode, allowed_imports=IMPORTS | {"subprocess"})
        assert result.status == "ok", (mode, result.limit, result.error, result.stderr)
        assert result.value == 1, mode  # EPERM: fork (restricted) or execve (full) refused


# -- what the host renders is what the image loads ----------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_host_renders_the_rules_of_the_mode(mode: LanguageMode) -> None:
    layer = describe_guest_filter(mode)
    assert [r.syscall for r in layer.rules] == [r.syscall for r in RULES if mode in r.modes]
    assert layer.pfc is not None, "pyseccomp and libseccomp are installed with the project"
    for rule in layer.rules:
        assert f'"{rule.syscall}"' in layer.pfc


@pytest.mark.docker
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_image_loads_the_filter_the_host_renders(runtime: ContainerRuntime) -> None:
    require_runtime(runtime)
    script = (
        "import sys; sys.path[:0] = ['/opt/airlock', '/opt/airlock/lib']; import airlock_seccomp"
        " as s; print(s.export_pfc('restricted') + '\\f' + s.export_pfc('full'), end='')"
    )
    client = docker.from_env()
    output = client.containers.run(
        IMAGE,
        entrypoint=["python3", "-I", "-S", "-c", script],
        network_mode="none",
        runtime=runtime,
        remove=True,
    ).decode()
    restricted, full = output.split("\f")
    assert restricted == describe_guest_filter("restricted").pfc
    assert full == describe_guest_filter("full").pfc


# The image ships the layer compiled (airlock_confine loads it with one system call); where
# a file is missing the runner compiles the rules itself; a runner that warmed up made the
# files ready to load before it forked (the files gone after: what loads is what it made
# ready, not a compilation). Each way, in a process of its own: the modes loaded one after
# the other, and whether fork() and socket() are refused after.
LOADED_LAYERS = {
    "full": (("full",), {"fork": "allowed", "socket": "EPERM"}),
    "restricted": (("restricted",), {"fork": "EPERM", "socket": "EPERM"}),
    "full, then restricted (a kept program)": (
        ("full", "restricted"),
        {"fork": "EPERM", "socket": "EPERM"},
    ),
    "restricted, then full": (("restricted", "full"), {"fork": "EPERM", "socket": "EPERM"}),
}
LAYER_PROBE = """
import errno, os, socket, sys
sys.path[:0] = ['/opt/airlock', '/opt/airlock/lib']
import airlock_confine
if sys.argv[1] == "made ready, then forked":
    airlock_confine.ready()
    child = os.fork()
    if child:
        os._exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
if sys.argv[1] != "compiled in the image":
    airlock_confine.FILTER_DIR = "/nonexistent"
for mode in sys.argv[2:]:
    airlock_confine.confine(mode, refuse=lambda result: print(result) or sys.exit(9))
outcome = {}
try:
    pid = os.fork()
except OSError as exc:
    outcome["fork"] = errno.errorcode[exc.errno]
else:
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    outcome["fork"] = "allowed"
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
except OSError as exc:
    outcome["socket"] = errno.errorcode[exc.errno]
else:
    outcome["socket"] = "allowed"
print(sorted(outcome.items()), [m for m in ("airlock_seccomp", "pyseccomp") if m in sys.modules])
"""


@pytest.mark.docker
@pytest.mark.parametrize(
    "source", ["compiled in the image", "compiled here", "made ready, then forked"]
)
@pytest.mark.parametrize("layers", list(LOADED_LAYERS))
def test_the_layer_holds_whether_compiled_in_the_image_or_by_the_runner(
    source: str, layers: str
) -> None:
    require_runtime("runc")
    modes, refused = LOADED_LAYERS[layers]
    output = docker.from_env().containers.run(
        IMAGE,
        entrypoint=["python3", "-I", "-S", "-c", LAYER_PROBE, source, *modes],
        network_mode="none",
        security_opt=["no-new-privileges:true"],
        remove=True,
    )
    compiled_here = ["airlock_seccomp", "pyseccomp"] if source == "compiled here" else []
    assert output.decode().strip() == f"{sorted(refused.items())} {compiled_here}"


@pytest.mark.docker
def test_the_image_ships_the_layer_as_its_libseccomp_compiles_it() -> None:
    require_runtime("runc")
    script = """
import os, sys, tempfile
sys.path[:0] = ['/opt/airlock', '/opt/airlock/lib']
import airlock_confine as c, airlock_seccomp as s
names = sorted(os.listdir(c.FILTER_DIR))
for mode, after in (("full", None), ("restricted", None), ("restricted", "full")):
    with tempfile.TemporaryFile() as fresh, open(os.path.join(c.FILTER_DIR, c.filter_name(mode, after)), "rb") as shipped:
        s.build(mode, after).export_bpf(fresh)
        fresh.seek(0)
        print(c.filter_name(mode, after), fresh.read() == shipped.read())
print(names)
"""
    output = docker.from_env().containers.run(
        IMAGE, entrypoint=["python3", "-I", "-S", "-c", script], network_mode="none", remove=True
    )
    assert output.decode().splitlines() == [
        "full.bpf True",
        "restricted.bpf True",
        "restricted-after-full.bpf True",
        "['full.bpf', 'restricted-after-full.bpf', 'restricted.bpf']",
    ]


def test_profiles_choose_no_weaker_layer() -> None:
    # The layer follows the language mode only: no profile field can turn it off.
    assert not {"guest_seccomp", "second_layer"} & set(SandboxProfile.model_fields)
