"""Inputs, checked on the host before any container is created (no Docker needed), and the
profile settings of inputs, artifacts and the data image."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

import airlock.sandbox._inputs as inputs_module
from airlock.policies import Grant, SandboxProfile, read
from airlock.sandbox import (
    INPUT_NAME,
    InputRefused,
    input_effect,
    resolve_inputs,
)
from airlock.sandbox._hardening import container_config, same_files

BAD_NAMES = [
    "",
    ".hidden",
    "..",
    ".",
    "a/b",
    "../etc",
    "a b.csv",
    "x" * 129,
    "caf\u00e9.csv",
    "a\nb",
    "*",
    "sales.csv/",
    "sales.csv\n",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_an_input_name_that_is_not_one_safe_part_is_refused(tmp_path: Path, name: str) -> None:
    data = tmp_path / "f"
    data.write_text("1")
    data.chmod(0o644)
    assert INPUT_NAME.fullmatch(name) is None
    with pytest.raises(InputRefused) as raised:
        resolve_inputs({name: data}, limit_bytes=100)
    assert raised.value.reason == "name"
    assert repr(name) in str(raised.value)


def _file(tmp: Path) -> Path:
    path = tmp / "data.csv"
    path.write_text("a,b\n1,2\n")
    path.chmod(0o644)
    return path


def _folder(tmp: Path) -> Path:
    folder = tmp / "folder"
    folder.mkdir()
    folder.chmod(0o755)
    return folder


def _missing(tmp: Path) -> Path:
    return tmp / "nope.csv"


def _link(tmp: Path) -> Path:
    link = tmp / "link.csv"
    link.symlink_to(_file(tmp))
    return link


def _fifo(tmp: Path) -> Path:
    path = tmp / "pipe"
    os.mkfifo(path)
    return path


def _fifo_inside(tmp: Path) -> Path:
    folder = _folder(tmp)
    os.mkfifo(folder / "pipe")
    return folder


def _socket_inside(tmp: Path) -> Path:
    folder = _folder(tmp)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "engine.sock"))  # a docker.sock given by mistake
    listener.close()
    return folder


def _unreadable(tmp: Path) -> Path:
    path = _file(tmp)
    path.chmod(0o600)
    return path


def _unreadable_folder(tmp: Path) -> Path:
    folder = _folder(tmp)
    folder.chmod(0o700)
    return folder


def _unreadable_inside(tmp: Path) -> Path:
    folder = _folder(tmp)
    secret = folder / "secret.txt"
    secret.write_text("s")
    secret.chmod(0o600)
    return folder


REFUSED: list[tuple[str, Callable[[Path], Path], str, str]] = [
    ("missing", _missing, "missing", "does not exist"),
    ("link", _link, "link", "is a symbolic link"),
    ("fifo", _fifo, "kind", "device, fifo or socket"),
    ("fifo_in_directory", _fifo_inside, "kind", "device, fifo or socket"),
    ("socket_in_directory", _socket_inside, "kind", "device, fifo or socket"),
    ("not_world_readable", _unreadable, "unreadable", "chmod o+r"),
    ("directory_not_world_readable", _unreadable_folder, "unreadable", "chmod o+rx"),
    ("file_in_directory_not_readable", _unreadable_inside, "unreadable", "secret.txt"),
]


@pytest.mark.parametrize(
    ("case", "make", "reason", "message"), REFUSED, ids=[r[0] for r in REFUSED]
)
def test_an_input_that_cannot_be_mounted_safely_is_refused(
    tmp_path: Path, case: str, make: Callable[[Path], Path], reason: str, message: str
) -> None:
    with pytest.raises(InputRefused) as raised:
        resolve_inputs({"given": make(tmp_path)}, limit_bytes=1 << 20)
    assert raised.value.reason == reason
    assert raised.value.name == "given"
    assert message in str(raised.value)


def test_a_file_removed_while_its_directory_is_checked_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path)
    (folder / "gone.csv").write_text("a\n")
    real = os.lstat

    def lstat(path: str) -> os.stat_result:
        if path.endswith("gone.csv"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return real(path)

    monkeypatch.setattr(os, "lstat", lstat)
    with pytest.raises(InputRefused) as raised:
        resolve_inputs({"given": folder}, limit_bytes=1 << 20)
    assert (raised.value.name, raised.value.reason) == ("given", "unreadable")
    assert "gone.csv" in str(raised.value)
    assert "was removed while the input was checked" in str(raised.value)


def _nested(top: Path, depth: int) -> None:
    """``depth`` directories ``d`` inside each other under ``top``, each made relative to the
    one above (no long path is built here)."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            os.chmod("d", 0o755, dir_fd=fd)
            deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        with open(os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as out:
            out.write("bottom")
    finally:
        os.close(fd)


# (levels of directories, what the check says): deeper than Python's recursion limit is
# walked like any tree; a path the host itself cannot name (over PATH_MAX) is refused.
DEPTHS: list[tuple[int, str | None]] = [(3, None), (1100, None), (2100, "unreadable")]


@pytest.mark.parametrize(("depth", "reason"), DEPTHS, ids=[str(d[0]) for d in DEPTHS])
def test_a_deep_directory_is_walked_without_recursion(
    tmp_path: Path, depth: int, reason: str | None
) -> None:
    folder = _folder(tmp_path)
    _nested(folder, depth)
    try:
        if reason is None:
            [given] = resolve_inputs({"tree": folder}, limit_bytes=100)
            assert given.size_bytes == len("bottom")
        else:
            with pytest.raises(InputRefused) as raised:
                resolve_inputs({"tree": folder}, limit_bytes=100)
            assert (raised.value.name, raised.value.reason) == ("tree", reason)
            assert "longer than this host's limit" in str(raised.value)
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=True)  # shutil.rmtree recurses


def test_a_link_that_vanishes_while_it_is_refused_is_still_refused_as_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = _link(tmp_path)

    def readlink(path: str) -> str:
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(os, "readlink", readlink)
    with pytest.raises(InputRefused) as raised:
        resolve_inputs({"given": link}, limit_bytes=100)
    assert (raised.value.name, raised.value.reason) == ("given", "link")
    assert "is a symbolic link" in str(raised.value)


def _mountinfo_line(point: str) -> str:
    """One line of ``/proc/self/mountinfo`` for a mount at ``point``, escaped as the kernel
    escapes it (space, tab, newline and backslash as octal)."""
    escaped = "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in point)
    return f"97 29 0:52 / {escaped} rw,relatime shared:55 - tmpfs tmpfs rw,size=1024k\n"


# (mount points in the host's table, relative to the input unless absolute; the one
# refused, if any):
# only a mount point strictly under the input is refused, however its name is escaped.
MOUNT_TABLES: list[tuple[str, list[str], str | None]] = [
    ("nothing_under", ["/", "/proc"], None),
    ("the_input_itself", [""], None),
    ("a_sibling_sharing_its_prefix", ["../folder2", "../folder.d/x"], None),
    ("under_it", ["reports"], "reports"),
    ("deep_under_it", ["a/b/c"], "a/b/c"),
    ("escaped_space", ["q1 report"], "q1 report"),
    ("escaped_tab_newline_backslash", ["a\tb\nc\\d"], "a\tb\nc\\d"),
    ("the_first_of_several", ["z", "m/n", "b"], "b"),
]


@pytest.mark.parametrize(
    ("case", "points", "refused"), MOUNT_TABLES, ids=[m[0] for m in MOUNT_TABLES]
)
def test_a_mount_point_under_a_directory_input_is_refused_from_the_mount_table(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    points: list[str],
    refused: str | None,
) -> None:
    folder = _folder(tmp_path)
    table = tmp_path / "mountinfo"
    table.write_text("".join(_mountinfo_line(os.path.normpath(folder / p)) for p in points))
    monkeypatch.setattr(inputs_module, "MOUNTINFO", str(table))
    if refused is None:
        assert [i.name for i in resolve_inputs({"given": folder}, limit_bytes=100)] == ["given"]
        return
    with pytest.raises(InputRefused) as raised:
        resolve_inputs({"given": folder}, limit_bytes=100)
    assert (raised.value.name, raised.value.reason) == ("given", "kind")
    assert repr(str(folder / refused)) in raised.value.message
    assert "a bind mount" in raised.value.message


def test_without_a_mount_table_a_directory_input_is_still_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inputs_module, "MOUNTINFO", str(tmp_path / "absent"))
    folder = _folder(tmp_path)
    (folder / "a.csv").write_text("12345")
    (folder / "a.csv").chmod(0o644)
    [given] = resolve_inputs({"given": folder}, limit_bytes=100)
    assert given.size_bytes == 5


def test_input_mounts_are_read_only_and_not_recursive(tmp_path: Path) -> None:
    # A recursive bind would carry a file system mounted under a directory input into the
    # container, and the engine's read-only flag covers the top mount only; crun reads the
    # default propagation, rprivate, as a recursive bind.
    inputs = resolve_inputs(
        {"data.csv": _file(tmp_path), "folder": _folder(tmp_path)}, limit_bytes=100
    )
    config = container_config(
        SandboxProfile(), image="img", socket_dir=Path("/s"), labels={}, inputs=inputs
    )
    assert [(m["Target"], m["ReadOnly"], m["BindOptions"]) for m in config["mounts"]] == [
        ("/data/data.csv", True, {"NonRecursive": True, "Propagation": "private"}),
        ("/data/folder", True, {"NonRecursive": True, "Propagation": "private"}),
    ]


def _replace_file(file: Path, folder: Path) -> None:
    new = file.with_name("new.csv")
    new.write_text("a,b\n3,4\n")
    os.replace(new, file)


def _write_in_place(file: Path, folder: Path) -> None:
    with file.open("a") as out:
        out.write("5,6\n")


def _replace_folder(file: Path, folder: Path) -> None:
    folder.rename(folder.with_name("old"))
    folder.mkdir()
    folder.chmod(0o755)


def _add_to_folder(file: Path, folder: Path) -> None:
    (folder / "more.csv").write_text("1")
    (folder / "more.csv").chmod(0o644)


# (what changes on the host after a container was made with the inputs, whether the
# container still shows the same files): a mount holds the inode that was at the path.
CHANGES: list[tuple[str, Callable[[Path, Path], None], bool]] = [
    ("nothing", lambda file, folder: None, True),
    ("file_replaced", _replace_file, False),
    ("file_written_in_place", _write_in_place, True),  # the mounted inode shows the edit
    ("directory_replaced", _replace_folder, False),
    ("file_added_to_directory", _add_to_folder, True),  # the mounted directory shows it
]


@pytest.mark.parametrize(("case", "change", "same"), CHANGES, ids=[c[0] for c in CHANGES])
def test_an_input_replaced_on_the_host_is_not_the_one_a_container_mounted(
    tmp_path: Path, case: str, change: Callable[[Path, Path], None], same: bool
) -> None:
    file, folder = _file(tmp_path), _folder(tmp_path)
    given = {"data.csv": file, "folder": folder}
    made = resolve_inputs(given, limit_bytes=1 << 20)
    change(file, folder)
    assert same_files(made, resolve_inputs(given, limit_bytes=1 << 20)) is same


def test_links_inside_a_directory_stay_and_resolve_in_the_container(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "a.csv").write_text("12345")
    (folder / "a.csv").chmod(0o644)
    (folder / "passwd").symlink_to("/etc/passwd")  # resolves to the container's own file
    [given] = resolve_inputs({"reports": folder}, limit_bytes=100)
    assert (given.name, given.directory, given.size_bytes) == ("reports", True, 5)
    assert given.mount_path == "/data/reports"


def test_the_real_path_is_mounted(tmp_path: Path) -> None:
    real = _folder(tmp_path)
    via = tmp_path / "via"
    via.symlink_to(real)
    data = real / "x.csv"
    data.write_text("1")
    data.chmod(0o644)
    # A link above the input resolves on the host (the operator's layout); the input
    # itself is not a link.
    [given] = resolve_inputs({"x.csv": via / "x.csv"}, limit_bytes=100)
    assert given.source == data.resolve()


def test_inputs_over_the_limit_are_refused_naming_the_size_and_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_bytes(b"x" * 3_000_000)
    big.chmod(0o644)
    small = _file(tmp_path)
    with pytest.raises(InputRefused) as raised:
        resolve_inputs({"big.csv": big, "small.csv": small}, limit_bytes=2 * 2**20)
    refused = raised.value
    assert (refused.reason, refused.name) == ("size", "big.csv")
    assert (refused.size_bytes, refused.limit_bytes) == (3_000_008, 2 * 2**20)
    assert "2.9 MiB (3000008 bytes)" in refused.message
    assert "the limit is 2.0 MiB (2097152 bytes)" in refused.message
    assert "input_limit_bytes" in refused.message


def test_reading_an_input_is_an_effect_the_grant_must_cover() -> None:
    assert input_effect("sales.csv") == read("file:sales.csv")
    assert str(input_effect("sales.csv")) == "read(file:sales.csv)"
    one = Grant(effects=(read("file:sales.csv"),))
    every = Grant(effects=(read("file:*"),))
    other = Grant(effects=(read("billing:invoice/*"),))
    assert one.covers(input_effect("sales.csv"))
    assert not one.covers(input_effect("salaries.csv"))
    assert every.covers(input_effect("salaries.csv"))
    assert not other.covers(input_effect("sales.csv"))


def test_the_data_image_runs_full_mode_with_room_by_default() -> None:
    profile = SandboxProfile(image="data")
    assert (profile.language_mode, profile.memory_bytes) == ("full", 2**30)
    assert SandboxProfile(image="data", memory_bytes=2**29).memory_bytes == 2**29
    assert SandboxProfile().image == "base"
    with pytest.raises(ValidationError, match="full mode only"):
        SandboxProfile(image="data", language_mode="restricted")


@pytest.mark.parametrize(
    "settings",
    [
        {"artifact_limit_bytes": 2**19},  # below 1 MiB: a tmpfs of size 0 would be unlimited
        {"artifact_limit_bytes": 2**31},
        {"artifact_limit_files": 0},
        {"input_limit_bytes": -1},
        {"image": "gpu"},
    ],
    ids=repr,
)
def test_profile_settings_out_of_range_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SandboxProfile.model_validate(settings)
