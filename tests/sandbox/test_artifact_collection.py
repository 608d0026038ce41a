"""The guest's side of artifacts, run on the host against a directory standing for ``/out``:
what is collected, how it is named, what is skipped, and the limits' messages."""

from __future__ import annotations

import base64
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import airlock_wire as wire
from tests.sandbox.guest_image import load_guest

artifacts = load_guest("airlock_artifacts")
NAME = re.compile(wire.ARTIFACT_NAME)

NAMES = [
    ("chart.png", "chart.png"),
    ("a b.png", "a_b.png"),
    (".hidden", "_hidden"),
    ("..dots", "_.dots"),
    ("caf\u00e9.csv", "caf_.csv"),
    ("semi;colon&amp", "semi_colon_amp"),
    ("x" * 200, "x" * 128),
    ("-dash", "-dash"),
]


@pytest.mark.parametrize(("given", "named"), NAMES, ids=[n for n, _ in NAMES])
def test_a_file_is_named_by_a_safe_path(tmp_path: Path, given: str, named: str) -> None:
    (tmp_path / given).write_text("1")
    found, skipped, _ = artifacts.collect(str(tmp_path))
    artifacts.close_all(found)
    assert [a.name for a in found] == [named]
    assert NAME.match(named)
    assert skipped == []


def test_nested_files_keep_their_path_and_clashes_get_a_number(tmp_path: Path) -> None:
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "a b.csv").write_text("1")
    (tmp_path / "tables" / "a_b.csv").write_text("2")
    (tmp_path / "tables" / "sub dir").mkdir()
    (tmp_path / "tables" / "sub dir" / "x.txt").write_text("3")
    found, _, _ = artifacts.collect(str(tmp_path))
    artifacts.close_all(found)
    assert [a.name for a in found] == ["tables/a_b-2.csv", "tables/a_b.csv", "tables/sub_dir/x.txt"]
    assert all(NAME.match(a.name) for a in found)


def _skipped(tmp_path: Path) -> dict[str, str]:
    found, skipped, count = artifacts.collect(str(tmp_path))
    artifacts.close_all(found)
    assert count == len(skipped)
    return {s["name"]: s["reason"] for s in skipped}


def test_links_devices_fifos_and_sockets_are_skipped_never_read(tmp_path: Path) -> None:
    (tmp_path / "passwd").symlink_to("/etc/passwd")
    (tmp_path / "etc").symlink_to("/etc")
    (tmp_path / "dangling").symlink_to("/nonexistent")
    os.mkfifo(tmp_path / "pipe")  # a reader would block on it
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "sock"))
    listener.close()
    device = os.getuid() == 0  # only root makes device files (the program cannot: seccomp)
    if device:
        os.mknod(tmp_path / "null", 0o600 | 0o020000, os.makedev(1, 3))
    (tmp_path / "ok.txt").write_text("ok")
    found, skipped, _ = artifacts.collect(str(tmp_path))
    artifacts.close_all(found)
    assert [a.name for a in found] == ["ok.txt"]
    assert {s["name"]: s["reason"] for s in skipped} == {
        "passwd": "a symbolic link",
        "etc": "a symbolic link",
        "dangling": "a symbolic link",
        "pipe": "a fifo",
        "sock": "a socket",
    } | ({"null": "a device file"} if device else {})


def test_too_deep_a_tree_is_skipped_below_the_limit(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["d"] * 10)
    deep.mkdir(parents=True)
    (deep / "x.txt").write_text("1")
    assert _skipped(tmp_path) == {"d/d/d/d/d/d/d/d": "deeper than 8 directories"}


def test_the_limits_name_the_amount_and_the_limit(tmp_path: Path) -> None:
    for n in range(5):
        (tmp_path / f"f{n}.txt").write_bytes(b"x" * 1000)
    found, _, _ = artifacts.collect(str(tmp_path))
    files = artifacts.refusal(found, max_files=4, max_bytes=10**6)
    size = artifacts.refusal(found, max_files=10, max_bytes=4999)
    assert artifacts.refusal(found, max_files=5, max_bytes=5000) is None
    artifacts.close_all(found)
    assert files["message"].startswith("the program left 5 files in /out; the limit is 4 files")
    assert size["message"].startswith("the files in /out hold 5000 bytes; the limit is 4999 bytes")
    assert (size["size_bytes"], size["limit_bytes"]) == (5000, 4999)


def test_a_sparse_file_counts_its_full_size(tmp_path: Path) -> None:
    # A tmpfs of 32 MiB holds a 10 GiB file of holes: its size, not its blocks, is counted.
    with open(tmp_path / "holes.bin", "wb") as file:
        file.truncate(10 * 2**30)
    found, _, _ = artifacts.collect(str(tmp_path))
    refused = artifacts.refusal(found, max_files=10, max_bytes=32 * 2**20)
    artifacts.close_all(found)
    assert refused is not None
    assert refused["size_bytes"] == 10 * 2**30


def test_pieces_are_full_but_the_last(tmp_path: Path) -> None:
    chunk = wire.ARTIFACT_CHUNK_BYTES
    content = os.urandom(2 * chunk + 7)
    (tmp_path / "a.bin").write_bytes(content)
    (tmp_path / "b.bin").write_bytes(b"x" * chunk)
    (tmp_path / "empty").write_bytes(b"")
    frames: list[dict[str, Any]] = []
    found, _, _ = artifacts.collect(str(tmp_path))
    artifacts.send(found, frames.append)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for frame in frames:
        by_name.setdefault(frame["name"], []).append(frame)
    pieces = by_name["a.bin"]
    assert [(f["offset"], f["end"]) for f in pieces] == [
        (0, False),
        (chunk, False),
        (2 * chunk, True),
    ]
    assert b"".join(base64.b64decode(f["data"]) for f in pieces) == content
    assert [(f["offset"], f["end"], len(f["data"])) for f in by_name["b.bin"]][-1][1] is True
    assert [(f["offset"], f["end"], f["data"]) for f in by_name["empty"]] == [(0, True, "")]
