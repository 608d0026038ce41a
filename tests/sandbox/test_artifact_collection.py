"""The guest's side of artifacts, run on the host against a directory standing for ``/out``:
what is collected, how it is named, what is skipped, and the limits' messages."""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import re
import resource
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import airlock_wire as wire
from airlock.sandbox._artifacts import ArtifactReceiver
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
    ("-dash", "_dash"),  # not an option to the commands run where it is copied
    ("--remove-files", "_-remove-files"),
    ("in-between-", "in-between-"),
]


@pytest.mark.parametrize(("given", "named"), NAMES, ids=[n for n, _ in NAMES])
def test_a_file_is_named_by_a_safe_path(tmp_path: Path, given: str, named: str) -> None:
    (tmp_path / given).write_text("1")
    found, skipped = artifacts.collect(str(tmp_path))
    assert [a.name for a in found] == [named]
    assert NAME.match(named)
    assert (skipped.entries, skipped.count) == ([], 0)


def test_nested_files_keep_their_path_and_clashes_get_a_number(tmp_path: Path) -> None:
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "a b.csv").write_text("1")
    (tmp_path / "tables" / "a_b.csv").write_text("2")
    (tmp_path / "tables" / "sub dir").mkdir()
    (tmp_path / "tables" / "sub dir" / "x.txt").write_text("3")
    found, _ = artifacts.collect(str(tmp_path))
    assert [a.name for a in found] == ["tables/a_b-2.csv", "tables/a_b.csv", "tables/sub_dir/x.txt"]
    assert all(NAME.match(a.name) for a in found)


def _skipped(tmp_path: Path) -> dict[str, str]:
    _, skipped = artifacts.collect(str(tmp_path))
    assert skipped.count == len(skipped.entries)
    return {s["name"]: s["reason"] for s in skipped.entries}


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
    found, skipped = artifacts.collect(str(tmp_path))
    assert [a.name for a in found] == ["ok.txt"]
    assert {s["name"]: s["reason"] for s in skipped.entries} == {
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
    found, _ = artifacts.collect(str(tmp_path))
    files = artifacts.refusal(found, max_files=4, max_bytes=10**6)
    size = artifacts.refusal(found, max_files=10, max_bytes=4999)
    assert artifacts.refusal(found, max_files=5, max_bytes=5000) is None
    assert files["message"].startswith("the program left 5 files in /out; the limit is 4 files")
    assert size["message"].startswith("the files in /out hold 5000 bytes; the limit is 4999 bytes")
    assert (size["size_bytes"], size["limit_bytes"]) == (5000, 4999)


def test_a_sparse_file_counts_its_full_size(tmp_path: Path) -> None:
    # A tmpfs of 32 MiB holds a 10 GiB file of holes: its size, not its blocks, is counted.
    with open(tmp_path / "holes.bin", "wb") as file:
        file.truncate(10 * 2**30)
    found, _ = artifacts.collect(str(tmp_path))
    refused = artifacts.refusal(found, max_files=10, max_bytes=32 * 2**20)
    assert refused is not None
    assert refused["size_bytes"] == 10 * 2**30


def test_pieces_are_full_but_the_last(tmp_path: Path) -> None:
    chunk = wire.ARTIFACT_CHUNK_BYTES
    content = os.urandom(2 * chunk + 7)
    (tmp_path / "a.bin").write_bytes(content)
    (tmp_path / "b.bin").write_bytes(b"x" * chunk)
    (tmp_path / "empty").write_bytes(b"")
    frames: list[dict[str, Any]] = []
    found, skipped = artifacts.collect(str(tmp_path))
    assert artifacts.send(str(tmp_path), found, frames.append, skipped) == 3
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


def _stored(tmp_path: Path) -> dict[str, bytes]:
    """Collect ``tmp_path`` and send its files into the host's receiver, as a run does:
    what the host stored, by name."""
    found, skipped = artifacts.collect(str(tmp_path))
    receiver = ArtifactReceiver(tmp_path.parent / "stored", max_files=10_000, max_bytes=2**30)

    def emit(frame: dict[str, Any]) -> None:
        data = base64.b64decode(frame["data"])
        receiver.receive(frame["name"], frame["offset"], data, end=frame["end"])

    artifacts.send(str(tmp_path), found, emit, skipped)
    assert (skipped.entries, skipped.count) == ([], 0)
    return {ref.name: Path(ref.path).read_bytes() for ref in receiver.finish()}


# Each file's content is its own path under /out: a file keeps its own name when that name
# is already safe, a renamed one is numbered after, and a directory's name is a name too.
KEPT_NAMES = [
    ("safe_name_first", ["a_b.csv", "a b.csv"], {"a_b.csv": "a_b.csv", "a_b-2.csv": "a b.csv"}),
    (
        "safe_name_in_a_folder",
        ["t/a b.csv", "t/a_b.csv"],
        {"t/a_b.csv": "t/a_b.csv", "t/a_b-2.csv": "t/a b.csv"},
    ),
    ("hidden", [".hidden", "_hidden"], {"_hidden": "_hidden", "_hidden-2": ".hidden"}),
    (
        "two_renamed_onto_a_safe_one",
        ["a:b.csv", "a b.csv", "a_b.csv"],
        {"a_b.csv": "a_b.csv", "a_b-2.csv": "a b.csv", "a_b-3.csv": "a:b.csv"},
    ),
    (
        "a_numbered_name_is_taken_too",
        ["a b.csv", "a_b.csv", "a_b-2.csv"],
        {"a_b.csv": "a_b.csv", "a_b-2.csv": "a_b-2.csv", "a_b-3.csv": "a b.csv"},
    ),
    (
        "renamed_file_and_renamed_folder",
        ["Q1 report", "Q1:report/chart.png", "summary.csv"],
        {
            "Q1_report": "Q1 report",
            "Q1_report-2/chart.png": "Q1:report/chart.png",
            "summary.csv": "summary.csv",
        },
    ),
    ("safe_file_renamed_folder", ["a_b", "a b/x"], {"a_b": "a_b", "a_b-2/x": "a b/x"}),
    ("safe_folder_renamed_file", ["a_b/x", "a b"], {"a_b/x": "a_b/x", "a_b-2": "a b"}),
    (
        "two_folders_stay_apart",
        ["a b/x", "a_b/x"],
        {"a_b/x": "a_b/x", "a_b-2/x": "a b/x"},
    ),
]


@pytest.mark.parametrize(("case", "files", "named"), KEPT_NAMES, ids=[c[0] for c in KEPT_NAMES])
def test_a_safe_name_keeps_its_file_and_renamed_ones_are_numbered_after(
    tmp_path: Path, case: str, files: list[str], named: dict[str, str]
) -> None:
    out = tmp_path / "out"
    for path in files:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(path)
    stored = _stored(out)
    assert {name: content.decode() for name, content in stored.items()} == named
    assert all(NAME.match(name) for name in stored)


@contextlib.contextmanager
def _open_files_limit(extra: int) -> Iterator[None]:
    """This process may open ``extra`` more files than it holds now (the container's
    ``nofile`` limit is 256 by default)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


MANY = [
    ("files", lambda n: f"part-{n:04d}.csv"),
    ("folders", lambda n: f"d{n:04d}/part.csv"),
    ("deep_folders", lambda n: f"a/b/c/d/e/f/g{n:04d}/part.csv"),
]


@pytest.mark.parametrize(("case", "path"), MANY, ids=[c[0] for c in MANY])
def test_more_files_than_may_be_open_at_once_are_all_sent(
    tmp_path: Path, case: str, path: Callable[[int], str]
) -> None:
    out = tmp_path / "out"
    names = [path(n) for n in range(400)]
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(name)
    with _open_files_limit(64):
        found, skipped = artifacts.collect(str(out))
        frames: list[dict[str, Any]] = []
        sent = artifacts.send(str(out), found, frames.append, skipped)
    assert (skipped.entries, skipped.count, sent) == ([], 0, 400)
    assert sorted(f["name"] for f in frames) == sorted(names)


def _swap_folder_for_a_link(file: Path) -> None:
    elsewhere = file.parent.parent.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / file.name).write_text("not the program's")
    file.parent.rename(file.parent.parent / "moved")
    file.parent.symlink_to(elsewhere)


def _swap_folder(file: Path) -> None:
    file.parent.rename(file.parent.parent / "moved")
    file.parent.mkdir()
    file.write_text("a new file")


def _replace(file: Path) -> None:
    file.with_name("new").write_text("a new file")
    file.with_name("new").rename(file)


def _fifo(file: Path) -> None:
    file.unlink()
    os.mkfifo(file)  # a reader would block on it


# A file changed between the listing and its turn to be sent (a program's leftover process
# still runs): only the very file listed is read, and at most the size it had then.
CHANGED: list[tuple[str, Callable[[Path], object], str | None, str | None]] = [
    ("removed", Path.unlink, "removed after it was listed", None),
    ("a_link_now", lambda f: (f.unlink(), f.symlink_to("/etc/passwd")), "a symbolic link", None),
    ("a_fifo_now", _fifo, "a fifo", None),
    ("replaced", _replace, "replaced after it was listed", None),
    ("folder_a_link_now", _swap_folder_for_a_link, "not readable (ENOTDIR)", None),
    ("folder_replaced", _swap_folder, "replaced after it was listed", None),
    ("grown", lambda f: f.open("a").write(" and more"), None, "original"),
    ("shrunk", lambda f: os.truncate(f, 4), None, "orig"),
]


@pytest.mark.parametrize(("case", "change", "reason", "sent"), CHANGED, ids=[c[0] for c in CHANGED])
def test_a_file_changed_after_the_listing_is_sent_as_listed_or_skipped(
    tmp_path: Path,
    case: str,
    change: Callable[[Path], object],
    reason: str | None,
    sent: str | None,
) -> None:
    out = tmp_path / "out"
    (out / "t").mkdir(parents=True)
    (out / "t" / "a.csv").write_text("original")
    (out / "b.csv").write_text("untouched")
    found, skipped = artifacts.collect(str(out))
    change(out / "t" / "a.csv")
    frames: list[dict[str, Any]] = []
    count = artifacts.send(str(out), found, frames.append, skipped)
    content: dict[str, bytes] = {}
    for frame in frames:
        content[frame["name"]] = content.get(frame["name"], b"") + base64.b64decode(frame["data"])
    assert content.pop("b.csv") == b"untouched"
    if reason is None:
        assert (count, skipped.entries) == (2, [])
        assert content == {"t/a.csv": sent.encode() if sent else b""}
    else:
        assert (count, skipped.entries, skipped.count) == (
            1,
            [{"name": "t/a.csv", "reason": reason}],
            1,
        )
        assert content == {}


def test_the_done_frame_names_the_first_skipped_and_counts_them_all(tmp_path: Path) -> None:
    for n in range(30):
        (tmp_path / f"link{n:02d}").symlink_to("/etc/passwd")
    (tmp_path / "ok.txt").write_text("ok")
    frames: list[dict[str, Any]] = []
    result: dict[str, Any] = {"status": "ok"}
    request = {"artifacts": {"dir": str(tmp_path), "files": 10, "bytes": 1000}}
    artifacts.deliver(frames.append, request, result)
    assert [f["name"] for f in frames] == ["ok.txt"]
    assert result["artifacts"] == 1
    assert len(result["artifacts_skipped"]) == artifacts.MAX_SKIPPED
    assert result["artifacts_skipped_count"] == 30


class _CountingSet(set[str]):
    """A set that counts its membership tests: the work of naming, whatever the machine."""

    lookups = 0

    def __contains__(self, item: object) -> bool:
        _CountingSet.lookups += 1
        return super().__contains__(item)


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many times the guest module has asked whether a name is taken (it makes its sets
    with ``set(...)``, which this shadows)."""
    monkeypatch.setattr(_CountingSet, "lookups", 0)
    monkeypatch.setattr(artifacts, "set", _CountingSet, raising=False)
    return lambda: _CountingSet.lookups


def _cjk(n: int) -> str:
    # Distinct names of the same length in a script clean_part replaces: all become __.csv.
    return chr(0x4E00 + n) + chr(0x4E00 + (n * 7) % 20000) + ".csv"


def _with(count: int, name: Callable[[int], str]) -> list[str]:
    return [name(n) for n in range(count)]


# Safe names that are what numbering a 128-character part would make: ...-2 to ...-300.
_TRUNCATED = ["y" * (127 - len(str(k))) + f"-{k}" for k in range(2, 301)]

# (case, the names in one directory, the names kept as they are): every row is named with
# a bounded number of lookups per name, however many clash.
CLASHES: list[tuple[str, list[str], set[str]]] = [
    ("same_script_same_length", _with(2000, _cjk), set()),
    ("numbers_already_taken", [
        *_with(300, lambda n: f"a_b-{n + 2}.csv"), *_with(300, lambda n: f"a{chr(0x4E00 + n)}b.csv"),
        "a_b.csv",
    ], {"a_b.csv", *_with(300, lambda n: f"a_b-{n + 2}.csv")}),
    ("long_names_sharing_a_prefix", _with(500, lambda n: "\u00e9" * 140 + f"{n:04d}"), set()),
    ("long_stems_same_extension", _with(500, lambda n: "x" * 130 + f"{n:04d}.csv"), set()),
    ("long_extension", _with(500, lambda n: f"{chr(0x4E00 + n)}.{'e' * 70}"), set()),
    ("truncated_stems_meet_safe_numbers", [*_TRUNCATED, *_with(300, lambda n: f"{'y' * 127}\u00e9{n}")],
     set(_TRUNCATED)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "names", "kept"), CLASHES, ids=[c[0] for c in CLASHES])
def test_clashing_names_get_unique_parts_in_bounded_work(
    lookups: Callable[[], int], case: str, names: list[str], kept: set[str]
) -> None:
    parts = artifacts._parts(sorted(names))
    assert sorted(parts) == sorted(names)
    assert len(set(parts.values())) == len(names)
    assert all(NAME.match(part) and len(part) <= 128 for part in parts.values())
    assert {name for name, part in parts.items() if name == part} == kept
    assert len(names) <= lookups() <= 4 * len(names)


def test_files_over_the_limit_are_counted_not_named(
    tmp_path: Path, lookups: Callable[[], int]
) -> None:
    for name in _with(2000, _cjk):
        (tmp_path / name).write_text("1")
    (tmp_path / "sub").mkdir()
    for n in range(10):
        (tmp_path / "sub" / f"{n}.csv").write_text("1")
    frames: list[dict[str, Any]] = []
    result: dict[str, Any] = {"status": "ok", "has_value": True, "value": 1}
    request = {"artifacts": {"dir": str(tmp_path), "files": 64, "bytes": 10**6}}
    artifacts.deliver(frames.append, request, result)
    assert (result["status"], result["limit"], frames) == ("limit_exceeded", "artifacts", [])
    assert result["error"]["message"].startswith(
        "the program left 2010 files in /out; the limit is 64 files"
    )
    assert lookups() <= 4 * 64


def _unstattable(monkeypatch: pytest.MonkeyPatch, name: str, error: int) -> None:
    """Make ``name``'s listing fail with ``error``, as a directory the program left without
    its search permission does for the runner (an unprivileged user: root would pass)."""
    scandir = os.scandir

    class Entry:
        def __init__(self, entry: os.DirEntry[str]) -> None:
            self.entry, self.name = entry, entry.name

        def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
            if self.name == name:
                raise OSError(error, os.strerror(error), name)
            return self.entry.stat(follow_symlinks=follow_symlinks)

    @contextlib.contextmanager
    def wrapped(fd: int) -> Iterator[list[Entry]]:
        with scandir(fd) as entries:
            yield [Entry(e) for e in entries]

    monkeypatch.setattr(os, "scandir", wrapped)


# (why an entry could not be looked at, what is reported): only one gone meanwhile is not.
UNLISTABLE: list[tuple[int, str | None]] = [
    (errno.ENOENT, None),
    (errno.EACCES, "not readable (EACCES)"),
    (errno.EIO, "not readable (EIO)"),
]


@pytest.mark.parametrize(
    ("error", "reason"), UNLISTABLE, ids=[errno.errorcode[e] for e, _ in UNLISTABLE]
)
def test_an_entry_that_cannot_be_looked_at_is_skipped_unless_it_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, reason: str | None
) -> None:
    (tmp_path / "tables").mkdir()
    for name in ("a.csv", "b c.csv"):
        (tmp_path / "tables" / name).write_text("1")
    (tmp_path / "top.csv").write_text("x")
    _unstattable(monkeypatch, "b c.csv", error)
    found, skipped = artifacts.collect(str(tmp_path))
    assert [a.name for a in found] == ["tables/a.csv", "top.csv"]
    expected = [] if reason is None else [{"name": "tables/b_c.csv", "reason": reason}]
    assert (skipped.entries, skipped.count) == (expected, len(expected))
