"""Files in and files out, through real containers: inputs mounted read-only at ``/data``,
artifacts left in ``/out`` and received over the bridge, judged from the host.

Programs try to write their inputs, reach inputs they were not given, escape ``/out`` with
links, overflow its limits, and forge the frames that carry artifacts; the host asserts that
nothing crossed, and that a file cut short (the runner dies, the run is cancelled) leaves
neither a file nor an open descriptor. The inputs tests run under both runtimes; the rest under ``runc`` (the
frames and their checks are the runtime's business no more than the bridge's).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import textwrap
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.policies import ContainerRuntime, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult
from tests.bridge.records import ALICE
from tests.conftest import IMAGE, LoopThread
from tests.sandbox.runtimes import RUNTIMES, RuntimeSandbox, runtime_sandbox

pytestmark = pytest.mark.docker

FULL = {"language_mode": "full"}


@pytest.fixture(scope="module", params=RUNTIMES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[RuntimeSandbox]:
    runtime: ContainerRuntime = request.param
    with runtime_sandbox(runtime) as box:
        yield box


@pytest.fixture(scope="module")
def runc() -> Iterator[RuntimeSandbox]:
    with runtime_sandbox("runc") as box:
        yield box


def run(
    box: RuntimeSandbox,
    program: str,
    *,
    inputs: dict[str, Path] | None = None,
    artifacts: Path | None = None,
    **profile: Any,
) -> RunResult:
    chosen = box.backend.profile.model_copy(update={**FULL, **profile})
    chosen = SandboxProfile.model_validate(chosen.model_dump())
    return box.loop.call(
        box.backend.run(
            textwrap.dedent(program), profile=chosen, inputs=inputs, artifacts=artifacts
        )
    )


@pytest.fixture
def given(tmp_path: Path) -> dict[str, Path]:
    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,10\nsouth,20\n")
    data.chmod(0o644)
    folder = tmp_path / "reports"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "q1.txt").write_text("first quarter")
    (folder / "q1.txt").chmod(0o644)
    return {"sales.csv": data, "reports": folder}


WRITES = """
import errno, os
def attempt(action):
    try:
        action()
        return "crossed"
    except OSError as exc:
        return errno.errorcode[exc.errno]
{
    "read": open("/data/sales.csv").read(),
    "listing": sorted(os.listdir("/data")),
    "in_folder": open("/data/reports/q1.txt").read(),
    "overwrite": attempt(lambda: open("/data/sales.csv", "w").write("x")),
    "append": attempt(lambda: open("/data/sales.csv", "a").write("x")),
    "unlink": attempt(lambda: os.unlink("/data/sales.csv")),
    "rename": attempt(lambda: os.rename("/data/reports/q1.txt", "/data/reports/q2.txt")),
    "create": attempt(lambda: open("/data/reports/new.txt", "w").write("x")),
    "mkdir": attempt(lambda: os.mkdir("/data/reports/sub")),
    "chmod": attempt(lambda: os.chmod("/data/sales.csv", 0o777)),
    "truncate": attempt(lambda: os.truncate("/data/sales.csv", 0)),
    "new_input": attempt(lambda: open("/data/extra.csv", "w").write("x")),
}
"""


def test_inputs_are_read_only(sandbox: RuntimeSandbox, given: dict[str, Path]) -> None:
    before = {name: path.stat().st_mtime_ns for name, path in given.items()}
    result = run(sandbox, WRITES, inputs=given)
    assert result.ok, result.error
    value = result.value
    assert isinstance(value, dict)
    assert value["read"] == "region,amount\nnorth,10\nsouth,20\n"
    assert value["listing"] == ["reports", "sales.csv"]
    assert value["in_folder"] == "first quarter"
    for attempt in ("overwrite", "append", "unlink", "rename", "create", "mkdir", "chmod",
                    "truncate", "new_input"):  # fmt: skip
        assert value[attempt] in {"EROFS", "EACCES", "EPERM"}, attempt
    assert {name: path.stat().st_mtime_ns for name, path in given.items()} == before
    assert given["sales.csv"].read_text() == "region,amount\nnorth,10\nsouth,20\n"
    assert sorted(p.name for p in given["reports"].iterdir()) == ["q1.txt"]


def test_a_run_without_inputs_sees_none(sandbox: RuntimeSandbox) -> None:
    result = run(sandbox, "import os\nos.path.exists('/data') and os.listdir('/data')")
    assert result.ok, result.error
    assert result.value in (None, False, [])


def test_a_pooled_container_with_inputs_serves_only_runs_that_ask_for_them(
    given: dict[str, Path],
) -> None:
    loop = LoopThread()
    profile = SandboxProfile(language_mode="full")
    backend = DockerBackend(image=IMAGE, pool_size=1, profile=profile, inputs=given)
    try:
        loop.call(backend.start())
        loop.call(backend.pool.wait_ready(1))
        listing = "import os\nsorted(os.listdir('/data')) if os.path.exists('/data') else []"
        bare = loop.call(backend.run(listing))
        assert (bare.value, bare.pooled) == ([], False)  # never a container with inputs
        loop.call(backend.pool.wait_ready(1))
        asked = loop.call(backend.run(listing, inputs=given))
        assert (asked.value, asked.pooled) == (["reports", "sales.csv"], True)
        one = loop.call(backend.run(listing, inputs={"sales.csv": given["sales.csv"]}))
        assert (one.value, one.pooled) == (["sales.csv"], False)
    finally:
        loop.call(backend.close())
        loop.stop()


def _unchanged(given: dict[str, Path]) -> None:
    pass


def _file_replaced(given: dict[str, Path]) -> None:
    new = given["sales.csv"].with_name("sales.csv.new")  # as editors and `cp`-then-`mv` do
    new.write_text("region,amount\nnorth,99999\n")
    new.chmod(0o644)
    os.replace(new, given["sales.csv"])


def _file_written_in_place(given: dict[str, Path]) -> None:
    with given["sales.csv"].open("a") as file:  # the same inode: the mount shows it live
        file.write("east,30\n")


def _directory_replaced(given: dict[str, Path]) -> None:
    folder = given["reports"]
    folder.rename(folder.with_name("reports.old"))
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "q1.txt").write_text("restated")
    (folder / "q1.txt").chmod(0o644)


# (what the operator does to the inputs once the pool is warm, whether the next run may take
# the pooled container, what it reads): a pooled container mounts the inodes that were at the
# paths when it started, so one made before a replacement would serve the old file.
REPLACED = [
    ("unchanged", _unchanged, True, ["region,amount\nnorth,10\nsouth,20\n", "first quarter"]),
    ("file_replaced", _file_replaced, False, ["region,amount\nnorth,99999\n", "first quarter"]),
    ("file_written_in_place", _file_written_in_place, True, [
        "region,amount\nnorth,10\nsouth,20\neast,30\n", "first quarter"]),
    ("directory_replaced", _directory_replaced, False, [
        "region,amount\nnorth,10\nsouth,20\n", "restated"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "change", "pooled", "reads"), REPLACED, ids=[r[0] for r in REPLACED]
)
def test_a_pooled_container_serves_only_the_inputs_still_at_their_paths(
    given: dict[str, Path],
    case: str,
    change: Callable[[dict[str, Path]], None],
    pooled: bool,
    reads: list[str],
) -> None:
    loop = LoopThread()
    profile = SandboxProfile(language_mode="full")
    backend = DockerBackend(image=IMAGE, pool_size=1, profile=profile, inputs=given)
    program = "[open('/data/sales.csv').read(), open('/data/reports/q1.txt').read()]"
    try:
        loop.call(backend.start())
        loop.call(backend.pool.wait_ready(1))
        change(given)
        first = loop.call(backend.run(program, inputs=given))
        assert (first.value, first.pooled) == (reads, pooled)
        loop.call(backend.pool.wait_ready(1))  # refilled with what is at the paths now
        second = loop.call(backend.run(program, inputs=given))
        assert (second.value, second.pooled) == (reads, True)
    finally:
        loop.call(backend.close())
        loop.stop()


OUT = """
import os
os.makedirs("/out/charts/by region", exist_ok=True)
open("/out/charts/by region/north.csv", "w").write("north,10\\n")
open("/out/report.txt", "w").write("REPORT-MARKER " * 1000)
open("/out/.hidden", "w").write("h")
os.symlink("/etc/passwd", "/out/passwd")
os.symlink("/data", "/out/data")
os.symlink("/run/airlock/bridge.sock", "/out/bridge")
"done"
"""


def test_artifacts_come_back_as_files_on_the_host(runc: RuntimeSandbox, tmp_path: Path) -> None:
    store = tmp_path / "store" / "run-1"
    result = run(runc, OUT, artifacts=store)
    assert result.ok, result.error
    refs = {ref.name: ref for ref in result.artifacts}
    assert sorted(refs) == ["_hidden", "charts/by_region/north.csv", "report.txt"]
    report = Path(refs["report.txt"].path)
    assert report.read_text() == "REPORT-MARKER " * 1000
    assert refs["report.txt"].sha256 == hashlib.sha256(report.read_bytes()).hexdigest()
    assert refs["report.txt"].media_type == "text/plain"
    assert refs["charts/by_region/north.csv"].uri == (
        "airlock://artifacts/run-1/charts/by_region/north.csv"
    )
    assert {s.name: s.reason for s in result.artifacts_skipped} == {
        "bridge": "a symbolic link",
        "data": "a symbolic link",
        "passwd": "a symbolic link",
    }
    stored = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    assert stored == sorted(refs)
    assert not any(p.is_symlink() for p in store.rglob("*"))


UNSEARCHABLE = """
import os
os.makedirs("/out/tables")
for name in ("a.csv", "b.csv", "c.csv"):
    open("/out/tables/" + name, "w").write("1,2\\n")
open("/out/top.csv", "w").write("x")
os.chmod("/out/tables", 0o400)  # listable, but no entry in it can be looked at
"done"
"""


def test_files_in_a_directory_made_unsearchable_are_counted_as_skipped(
    runc: RuntimeSandbox, tmp_path: Path
) -> None:
    result = run(runc, UNSEARCHABLE, artifacts=tmp_path / "run")
    assert (result.status, result.value) == ("ok", "done"), result.error
    assert [ref.name for ref in result.artifacts] == ["top.csv"]
    assert {s.name: s.reason for s in result.artifacts_skipped} == {
        f"tables/{name}": "not readable (EACCES)" for name in ("a.csv", "b.csv", "c.csv")
    }
    assert result.artifacts_skipped_count == 3


MANY = """
import os
for n in range(300):  # more than the runner may hold open at once (nofile 256)
    open(f"/out/part-{n:03d}.csv", "w").write(str(n))
for n in range(30):
    os.symlink("/etc/passwd", f"/out/link{n:02d}")
open("/out/a_b.csv", "w").write("a_b.csv")
open("/out/a b.csv", "w").write("a b.csv")
open("/out/Q1 report", "w").write("Q1 report")
os.mkdir("/out/Q1:report")
open("/out/Q1:report/chart.png", "w").write("Q1:report/chart.png")
"done"
"""


def test_many_files_come_back_each_under_its_own_name(runc: RuntimeSandbox, tmp_path: Path) -> None:
    result = run(runc, MANY, artifacts=tmp_path / "run", artifact_limit_files=1000)
    assert (result.status, result.value) == ("ok", "done"), result.error
    stored = {ref.name: Path(ref.path).read_text() for ref in result.artifacts}
    assert len(stored) == 304
    assert {name: stored[name] for name in stored if not name.startswith("part-")} == {
        "a_b.csv": "a_b.csv",
        "a_b-2.csv": "a b.csv",
        "Q1_report": "Q1 report",
        "Q1_report-2/chart.png": "Q1:report/chart.png",
    }
    assert (len(result.artifacts_skipped), result.artifacts_skipped_count) == (20, 30)


def test_without_a_store_nothing_comes_back(runc: RuntimeSandbox) -> None:
    result = run(runc, "open('/out/a.txt', 'w').write('x')")
    assert result.ok, result.error
    assert result.artifacts == ()


LIMITS = [
    (
        "files",
        "for n in range(6):\n    open(f'/out/f{n}.txt', 'w').write('x')\n",
        {"artifact_limit_files": 5},
        "the program left 6 files in /out; the limit is 5 files",
    ),
    (
        "sparse_bytes",
        "f = open('/out/holes.bin', 'wb')\nf.truncate(10 * 2**30)\nf.close()\n",
        {"artifact_limit_bytes": 2**20},
        "the files in /out hold 10240.0 MiB (10737418240 bytes); the limit is 1.0 MiB",
    ),
    (  # distinct names of one length in a script the runner replaces: all clean to __.csv
        "many_clashing_names",
        "for n in range(10_000):\n"
        "    open(f'/out/{chr(0x4E00 + n)}{chr(0x4E00 + n * 7 % 20000)}.csv', 'w').close()\n",
        {},
        "the program left 10000 files in /out; the limit is 64 files",
    ),
    (
        "tmpfs_full",
        "open('/out/big.bin', 'wb').write(b'x' * 3 * 2**20)\n",
        {"artifact_limit_bytes": 2**20},
        "the program filled /out; the artifact limit is 1.0 MiB and 64 files",
    ),
    (  # the ENOSPC caught: the file cut short is past the limit, and not sent either
        "tmpfs_full_caught",
        "try:\n    open('/out/big.bin', 'wb').write(b'x' * 3 * 2**20)\n"
        "except OSError as e:\n    print('caught', e)\n'finished'\n",
        {"artifact_limit_bytes": 2**20},
        "the files in /out hold 1.3 MiB (1314816 bytes); the limit is 1.0 MiB",
    ),
    (  # no inode left (directories hold no file): a file may have failed to be made
        "inodes_full",
        "import os\ntry:\n    for n in range(5000):\n        os.mkdir(f'/out/d{n}')\n"
        "except OSError as e:\n    print('caught', e)\n'finished'\n",
        {"artifact_limit_bytes": 2**20},
        "the program filled /out; the artifact limit is 1.0 MiB and 64 files",
    ),
]

AT_THE_LIMIT = [
    ("one_file_of_the_limit", "open('/out/all.bin', 'wb').write(b'x' * 2**20)\n", 1),
    (  # each file takes whole pages: 64 of them hold more pages than bytes
        "every_file_just_under_a_page_boundary",
        "for n in range(64):\n    open(f'/out/f{n}.bin', 'wb').write(b'x' * (2**14 - 1))\n",
        64,
    ),
]


@pytest.mark.parametrize(
    ("case", "program", "files"), AT_THE_LIMIT, ids=[c[0] for c in AT_THE_LIMIT]
)
def test_files_that_hold_the_limit_come_back(
    runc: RuntimeSandbox, tmp_path: Path, case: str, program: str, files: int
) -> None:
    store = tmp_path / "run"
    result = run(runc, program + "'done'\n", artifacts=store, artifact_limit_bytes=2**20)
    assert (result.status, result.value) == ("ok", "done"), result.error
    assert len(result.artifacts) == files
    assert sum(path.stat().st_size for path in store.rglob("*") if path.is_file()) <= 2**20


@pytest.mark.parametrize(
    ("case", "program", "settings", "message"), LIMITS, ids=[c[0] for c in LIMITS]
)
def test_artifacts_over_a_limit_fail_the_run_naming_amount_and_limit(
    runc: RuntimeSandbox,
    tmp_path: Path,
    case: str,
    program: str,
    settings: dict[str, int],
    message: str,
) -> None:
    store = tmp_path / "run"
    result = run(runc, program, artifacts=store, **settings)
    assert (result.status, result.limit) == ("limit_exceeded", "artifacts")
    assert result.error is not None
    assert result.error.message.startswith(message), result.error.message
    assert result.artifacts == ()
    assert not store.exists()


FORGED = """
import base64, json, os, struct
def frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body
# The bridge is the one descriptor the runner kept: find it and speak for the runner.
fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
bridge = next(fd for fd in fds if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"))
os.write(bridge, frame({"type": "artifact", "name": NAME, "offset": 0,
                        "data": base64.b64encode(b"owned").decode(), "end": True}))
import time
time.sleep(5)
"""


@pytest.mark.parametrize(
    "name", ["../../escape.txt", "/etc/cron.d/x", ".ssh/authorized_keys", "a/../../b"]
)
def test_a_forged_artifact_frame_ends_the_run_and_writes_nothing(
    runc: RuntimeSandbox, tmp_path: Path, name: str
) -> None:
    store = tmp_path / "store" / "run"
    result = run(runc, FORGED.replace("NAME", repr(name)), artifacts=store)
    assert result.status == "protocol_error"
    assert result.error is not None
    assert "artifact name" in result.error.message
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# The runner's first piece of a 1 MiB file, as it sends it, and then the runner is gone (the
# program's process exits) or the host stops waiting (the run is cancelled): either way the
# file was begun and never ended.
PARTIAL = """
import base64, os, time
piece = base64.b64encode(b"P" * 262144).decode()
tools._connection.send({"type": "artifact", "name": "charts/big.bin", "offset": 0,
                        "data": piece, "end": False})
THEN
"""

# (case, kept, how the program goes on, how the run ends: the error's type, or how it is
# cancelled)
MID_TRANSFER = [
    ("runner_dies", False, "os._exit(0)", "RunnerDied"),
    ("kept_program_dies", True, "os._exit(0)", "ProgramExited"),
    ("cancelled", False, "time.sleep(60)", "once"),
    # anyio's cancel scope (the MCP server's) cancels again at every await until the run
    # returns: the cleanup's own awaits are cancelled too.
    ("cancelled_by_a_scope", False, "time.sleep(60)", "scope"),
    ("cancelled_again_and_again", False, "time.sleep(60)", "repeatedly"),
]
CANCELS = ("once", "scope", "repeatedly")


def _held_under(root: Path) -> list[str]:
    """What this process holds open under ``root`` (a removed file still shows)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            held.append(target)
    return held


async def _begun(store: Path) -> None:
    for _ in range(300):
        if (store / "charts" / "big.bin").exists():
            return
        await asyncio.sleep(0.05)


async def _cancel_once_begun(work: Coroutine[Any, Any, RunResult], store: Path, how: str) -> None:
    if how == "scope":
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:

                async def cancel() -> None:
                    await _begun(store)
                    scope.cancel()

                group.start_soon(cancel)
                await work
        assert scope.cancelled_caught
        return
    task = asyncio.ensure_future(work)
    await _begun(store)
    task.cancel()
    while how == "repeatedly" and not task.done():
        await asyncio.sleep(0)
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("case", "kept", "then", "ending"), MID_TRANSFER, ids=[c[0] for c in MID_TRANSFER]
)
def test_a_transfer_cut_short_leaves_no_file_and_no_descriptor(
    runc: RuntimeSandbox, tmp_path: Path, case: str, kept: bool, then: str, ending: str
) -> None:
    store = tmp_path / "store" / "run"
    program = PARTIAL.replace("THEN", then)
    profile = SandboxProfile.model_validate(
        runc.backend.profile.model_copy(update=FULL).model_dump()
    )
    if kept:
        keeper = runc.backend.keep(ALICE, profile=profile)
        try:
            result = runc.loop.call(keeper.run(program, profile=profile, artifacts=store))
        finally:
            runc.loop.call(keeper.close())
    elif ending in CANCELS:
        work = runc.backend.run(program, profile=profile, artifacts=store)
        runc.loop.call(_cancel_once_begun(work, store, ending))
    else:
        result = run(runc, program, artifacts=store)
    if ending not in CANCELS:
        assert result.status == "error", result
        assert result.error is not None
        assert result.error.type == ending
        assert result.artifacts == ()
    assert not store.exists()
    assert _held_under(tmp_path) == []


def test_a_forged_frame_in_a_run_that_collects_nothing_ends_it(runc: RuntimeSandbox) -> None:
    result = run(runc, FORGED.replace("NAME", repr("fine.txt")))
    assert result.status == "protocol_error"
    assert result.error is not None
    assert result.error.message == "this run collects no artifacts"


def test_top_level_await_runs_and_a_misplaced_statement_names_its_line(
    runc: RuntimeSandbox,
) -> None:
    awaited = run(
        runc,
        """
        import asyncio
        async def double(x):
            await asyncio.sleep(0)
            return 2 * x
        values = await asyncio.gather(*(double(n) for n in range(3)))
        sum(values) + await double(10)
        """,
        language_mode="restricted",
    )
    assert (awaited.status, awaited.value) == ("ok", 26)
    for program, line, message in [
        ("x = 1\nreturn x\n", 2, "'return' outside function"),
        ("for i in range(2):\n    pass\nbreak\n", 3, "'break' outside loop"),
        ("def f():\n    await g()\n", 2, "'await' outside async function"),
        ("yield 1\n", 1, "'yield' outside function"),
    ]:
        for mode in ("full", "restricted"):
            result = run(runc, program, language_mode=mode)
            assert result.status == "error", (program, mode, result)
            assert result.error is not None
            assert (result.error.type, result.error.line) == ("SyntaxError", line)
            assert message in result.error.message


def test_the_data_image_has_its_packages_loaded_and_keeps_both_seccomp_layers(
    tmp_path: Path,
) -> None:
    with runtime_sandbox("runc", "data") as box:
        result = run(
            box,
            """
            import ctypes, os, sys, socket, threading
            loaded = [m for m in ("numpy", "pandas", "pyarrow", "matplotlib.pyplot")
                      if m in sys.modules]
            import numpy as np, pandas as pd, pyarrow as pa, pyarrow.compute as pc
            import matplotlib
            import matplotlib.pyplot as plt
            frame = pd.DataFrame({"g": list("abab"), "v": np.arange(4)})
            table = pa.table({"v": list(range(100000))})
            figure, axes = plt.subplots()
            axes.plot([1, 2, 3])
            figure.savefig("/out/line.png")
            def errno_of(call):
                try:
                    call()
                    return 0
                except OSError as exc:
                    return exc.errno
            {
                "loaded_before": loaded,
                "sum": int(frame.groupby("g")["v"].sum()["b"]),
                "arrow": pc.sum(table["v"]).as_py(),
                "backend": matplotlib.get_backend(),
                "environ": dict(os.environ),
                "execve": errno_of(lambda: os.execv("/bin/true", ["/bin/true"])),
                "socket": errno_of(lambda: socket.socket(socket.AF_UNIX)),
                "threads": threading.active_count(),
            }
            """,
            artifacts=tmp_path / "run",
        )
    assert result.ok, (result.error, result.stderr)
    value = result.value
    assert isinstance(value, dict)
    assert value["loaded_before"] == ["numpy", "pandas", "pyarrow", "matplotlib.pyplot"]
    assert (value["sum"], value["arrow"]) == (4, 4999950000)
    assert value["backend"].lower() == "agg"
    assert value["environ"] == {}
    assert (value["execve"], value["socket"]) == (1, 1)
    [chart] = result.artifacts
    assert chart.media_type == "image/png"
    assert Path(chart.path).read_bytes().startswith(b"\x89PNG")


def test_a_missing_data_image_says_how_to_build_it() -> None:
    async def attempt() -> None:
        async with DockerBackend(
            image=IMAGE,
            data_image="airlock-no-such-image:never",
            profile=SandboxProfile(image="data"),
        ) as backend:
            await backend.run("1")

    from airlock.sandbox import ImageMissing

    with pytest.raises(ImageMissing, match="make image-data"):
        asyncio.run(attempt())
