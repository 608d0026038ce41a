"""Inputs, checked on the host before any container is created (no Docker needed), and the
profile settings of inputs, artifacts and the data image."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from airlock.policies import Grant, SandboxProfile, read
from airlock.sandbox import (
    INPUT_NAME,
    InputRefused,
    input_effect,
    resolve_inputs,
)

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
