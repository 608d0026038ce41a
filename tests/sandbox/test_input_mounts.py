"""A file system mounted under a directory input, through real containers (root, to mount).

A directory input is bind-mounted read-only and not recursively. A file system mounted
somewhere under it on the host (a tmpfs, an NFS share, a USB disk) is refused when the input
is checked, whichever way the input is given; and one mounted after the check is not in the
container at all. A recursive bind would carry it in, writable under runc and crun: the
engine's read-only flag covers the top mount only.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

import airlock.sandbox._docker as docker_backend
import airlock.sandbox._inputs as inputs_module
from airlock.policies import ContainerRuntime
from airlock.sandbox import DockerBackend, InputRefused, resolve_inputs
from tests.bridge.records import ALICE
from tests.conftest import IMAGE
from tests.sandbox.runtimes import RUNTIMES, RuntimeSandbox, runtime_sandbox

pytestmark = pytest.mark.docker


def _require_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("mounting a tmpfs needs root (CI=true: the CI runs as root)")
        pytest.skip("mounting a tmpfs needs root")


@pytest.fixture(scope="module", params=RUNTIMES)
def sandbox(request: pytest.FixtureRequest) -> Iterator[RuntimeSandbox]:
    runtime: ContainerRuntime = request.param
    with runtime_sandbox(runtime) as box:
        yield box


@pytest.fixture(scope="module")
def runc() -> Iterator[RuntimeSandbox]:
    with runtime_sandbox("runc") as box:
        yield box


@contextmanager
def _tmpfs(at: Path) -> Iterator[Path]:
    """A world-writable tmpfs mounted at ``at`` (made), unmounted afterwards."""
    at.mkdir(parents=True, exist_ok=True)
    options = "mode=1777,size=1m"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(at)], check=True)
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=False)


@contextmanager
def _bind(at: Path) -> Iterator[Path]:
    """Another directory of the same file system bind-mounted at ``at`` (made): the same
    device number as the directory around it."""
    elsewhere = at.parent / f"{at.name}.elsewhere"
    elsewhere.mkdir(mode=0o755)
    (elsewhere / "q3.txt").write_text("third quarter")
    (elsewhere / "q3.txt").chmod(0o644)
    at.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(elsewhere), str(at)], check=True)
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], check=False)


def _reports(tmp: Path) -> Path:
    folder = tmp / "reports"
    folder.mkdir()
    (folder / "q1.txt").write_text("first quarter")
    (folder / "q1.txt").chmod(0o644)
    folder.chmod(0o755)
    return folder


def _run(box: RuntimeSandbox, folder: Path) -> object:
    profile = box.backend.profile.model_copy(update={"language_mode": "full"})
    return box.loop.call(box.backend.run("1", profile=profile, inputs={"reports": folder}))


def _keep(box: RuntimeSandbox, folder: Path) -> object:
    return box.backend.keep(ALICE, inputs={"reports": folder})


def _pool(box: RuntimeSandbox, folder: Path) -> object:
    return DockerBackend(image=IMAGE, pool_size=1, inputs={"reports": folder})


# (where under the input the tmpfs is mounted, how the input is given): every way refuses.
GIVEN: dict[str, Callable[[RuntimeSandbox, Path], object]] = {
    "run": _run,
    "keep": _keep,
    "pool": _pool,
}
# What is mounted there: a file system of its own, or (the same device number, so only the
# host's mount table tells) a bind mount of a directory beside the input.
MOUNTS: dict[str, Callable[[Path], AbstractContextManager[Path]]] = {
    "tmpfs": _tmpfs,
    "bind": _bind,
}
SUBMOUNTS = [
    (kind, at, way)
    for kind in MOUNTS
    for at in ("scratch", "a/b/scratch", "a/.hidden mount")
    for way in GIVEN
]


@pytest.mark.parametrize(
    ("kind", "at", "way"), SUBMOUNTS, ids=[f"{k}-{a}-{w}" for k, a, w in SUBMOUNTS]
)
def test_another_file_system_inside_a_directory_input_is_refused(
    runc: RuntimeSandbox, tmp_path: Path, kind: str, at: str, way: str
) -> None:
    # The check is the host's, before any container: one runtime is enough.
    _require_root()
    folder = _reports(tmp_path)
    (folder / at).parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    for path in folder.rglob("*"):
        if path.is_dir():
            path.chmod(0o755)
    with MOUNTS[kind](folder / at), pytest.raises(InputRefused) as raised:
        GIVEN[way](runc, folder)
    refused = raised.value
    assert (refused.name, refused.reason) == ("reports", "kind")
    assert "another file system" in refused.message
    assert repr(str(folder / at)) in refused.message


MOUNTED_AFTER = textwrap.dedent("""
    import errno, os
    def attempt(path):
        try:
            with open(path, "w") as f:
                f.write("written from inside the sandbox")
            return "crossed"
        except OSError as exc:
            return errno.errorcode[exc.errno]
    {
        "write": attempt("/data/reports/scratch/planted.txt"),
        "listing": sorted(os.listdir("/data/reports/scratch")),
        "mounts": [line.split()[4] for line in open("/proc/self/mountinfo")
                   if line.split()[4].startswith("/data")],
    }
""")


def test_a_file_system_mounted_after_the_check_is_not_in_the_container(
    sandbox: RuntimeSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require_root()
    folder = _reports(tmp_path)
    (folder / "scratch").mkdir(mode=0o755)
    (folder / "scratch").chmod(0o755)
    checked = resolve_inputs({"reports": folder}, limit_bytes=1 << 20)
    # Mounted between the check and the container's start: what the check cannot see.
    monkeypatch.setattr(docker_backend, "resolve_inputs", lambda *_a, **_k: checked)
    with _tmpfs(folder / "scratch") as scratch:
        (scratch / "host.txt").write_text("on the tmpfs")
        profile = sandbox.backend.profile.model_copy(update={"language_mode": "full"})
        result = sandbox.loop.call(
            sandbox.backend.run(MOUNTED_AFTER, profile=profile, inputs={"reports": folder})
        )
        assert result.ok, result.error
        value = result.value
        assert isinstance(value, dict)
        assert value["write"] in {"EROFS", "EACCES", "EPERM"}
        assert value["listing"] == []  # the directory beneath the tmpfs, not the tmpfs
        assert "/data/reports/scratch" not in value["mounts"]
        assert sorted(p.name for p in scratch.iterdir()) == ["host.txt"]


def test_without_the_mount_table_another_file_system_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host without /proc/self/mountinfo: the device number is all there is to go by.
    _require_root()
    monkeypatch.setattr(inputs_module, "MOUNTINFO", str(tmp_path / "no-mountinfo"))
    folder = _reports(tmp_path)
    with _tmpfs(folder / "scratch"), pytest.raises(InputRefused) as raised:
        resolve_inputs({"reports": folder}, limit_bytes=1 << 20)
    assert (raised.value.name, raised.value.reason) == ("reports", "kind")
    assert repr(str(folder / "scratch")) in raised.value.message


@contextmanager
def _overlay(tmp: Path) -> Iterator[Path]:
    """An overlay whose lower layer is on this file system and whose upper layer is on a
    tmpfs: its files report either layer's device number, with nothing mounted under it."""
    lower, merged = tmp / "lower", tmp / "merged"
    (lower / "data").mkdir(parents=True)
    (lower / "data" / "a.csv").write_text("1,2\n")
    for path in (tmp, lower, lower / "data", lower / "data" / "a.csv"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    merged.mkdir(mode=0o755)
    with _tmpfs(tmp / "up") as up:
        (up / "upper").mkdir()
        (up / "work").mkdir()
        (up / "upper" / "data").mkdir(mode=0o755)
        (up / "upper" / "data" / "b.csv").write_text("3,4\n")
        (up / "upper" / "data" / "b.csv").chmod(0o644)
        layers = f"lowerdir={lower},upperdir={up / 'upper'},workdir={up / 'work'}"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers, str(merged)], check=True)
        try:
            yield merged / "data"
        finally:
            subprocess.run(["umount", "-l", str(merged)], check=False)


def test_a_directory_on_an_overlay_of_two_file_systems_is_given(
    runc: RuntimeSandbox, tmp_path: Path
) -> None:
    _require_root()
    with _overlay(tmp_path) as data:
        assert {os.lstat(data / n).st_dev for n in ("a.csv", "b.csv")} != {os.lstat(data).st_dev}
        [given] = resolve_inputs({"tables": data}, limit_bytes=1 << 20)
        assert given.size_bytes == 8
        profile = runc.backend.profile.model_copy(update={"language_mode": "full"})
        program = (
            "import os\n{n: open('/data/tables/' + n).read() for n in os.listdir('/data/tables')}"
        )
        result = runc.loop.call(runc.backend.run(program, profile=profile, inputs={"tables": data}))
        assert result.ok, result.error
        assert result.value == {"a.csv": "1,2\n", "b.csv": "3,4\n"}
