"""``airlock run --out DIR``: what it writes in DIR, what it refuses, and how it says so; and
the names of what it did not take from /out, printed as they are. The program runs in a
scripted backend: the copying is the host's alone."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.sandbox import ArtifactRef, RunResult
from airlock.sandbox.testing import ok_result
from tests.airlock.cli.hostile_text import HOSTILE, IDS, hidden

cli = CliRunner()
USERS = "all:\n\techo user\n"
"""What a file the user keeps in DIR holds (and must still hold when it is refused)."""
OUTSIDE = "the user's own, outside DIR\n"


def _planted(name: str) -> str:
    return f"from the sandbox: {name}\n"


class _Backend:
    """DockerBackend's seam for ``airlock run``: answers every program with ``result``."""

    result: RunResult

    def __init__(self, **_: object) -> None:
        pass

    async def __aenter__(self) -> _Backend:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def run(self, program: str, **_: object) -> RunResult:
        return self.result


def _stored(store: Path, names: list[str]) -> tuple[ArtifactRef, ...]:
    refs = []
    for name in names:
        content = _planted(name).encode()
        path = store / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        refs.append(
            ArtifactRef(
                name=name,
                size_bytes=len(content),
                media_type="text/plain",
                sha256=hashlib.sha256(content).hexdigest(),
                uri=f"airlock://artifacts/run_x/{name}",
                path=str(path),
            )
        )
    return tuple(refs)


@pytest.fixture
def run_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[RunResult, list[str]], tuple[int, str]]:
    """``airlock run`` of a program whose scripted result is given, with extra arguments."""
    monkeypatch.delenv("AIRLOCK_DATABASE_URL", raising=False)
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("airlock.cli._run.DockerBackend", _Backend)
    program = tmp_path / "p.py"
    program.write_text("1\n")

    def invoke(result: RunResult, args: list[str]) -> tuple[int, str]:
        _Backend.result = result
        outcome = cli.invoke(app, ["run", str(program), *args])
        return outcome.exit_code, outcome.output

    return invoke


def _link(target: str) -> Callable[[Path, Path], None]:
    def make(entry: Path, outside: Path) -> None:
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.symlink_to(outside / target)

    return make


def _file(entry: Path, _: Path) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(USERS)


def _directory(entry: Path, _: Path) -> None:
    entry.mkdir(parents=True)
    (entry / "kept.txt").write_text(USERS)


def _fifo(entry: Path, _: Path) -> None:
    os.mkfifo(entry)


def _hard_link(entry: Path, outside: Path) -> None:
    os.link(outside / "notes.txt", entry)


Setup = Callable[[Path, Path], None]
OUT_CASES: list[tuple[str, dict[str, Setup], list[str], list[str], dict[str, str]]] = [
    # (case, what DIR holds before, artifacts, extra options, refused artifact -> why)
    ("nested files, an empty DIR", {}, ["a.csv", "tables/2024/b.csv"], [], {}),
    ("a directory DIR already holds", {"tables": _directory}, ["tables/b.csv"], [], {}),
    (
        "a link as the first directory",
        {"charts": _link(".")},
        ["charts/config.toml", "charts/new.txt", "top.txt"],
        [],
        {"charts/config.toml": "charts is a link", "charts/new.txt": "charts is a link"},
    ),
    (
        "a link two directories down",
        {"site/charts": _link(".")},
        ["site/charts/config.toml", "site/ok.txt"],
        ["--overwrite"],
        {"site/charts/config.toml": "site/charts is a link"},
    ),
    (
        "a link as the last part",
        {"config.toml": _link("config.toml")},
        ["config.toml"],
        [],
        {"config.toml": "config.toml is a link"},
    ),
    (
        "a link as the last part, --overwrite",
        {"config.toml": _link("config.toml")},
        ["config.toml"],
        ["--overwrite"],
        {"config.toml": "config.toml is a link"},
    ),
    (
        "a dangling link as the last part",
        {"new.toml": _link("new.toml")},
        ["new.toml"],
        ["--overwrite"],
        {"new.toml": "new.toml is a link"},
    ),
    (
        "an existing file is kept",
        {"Makefile": _file},
        ["Makefile", "b.txt"],
        [],
        {"Makefile": "Makefile is already there"},
    ),
    (
        "--overwrite replaces an existing file",
        {"Makefile": _file},
        ["Makefile"],
        ["--overwrite"],
        {},
    ),
    (
        "a file where a directory goes",
        {"charts": _file},
        ["charts/x.txt"],
        ["--overwrite"],
        {"charts/x.txt": "charts is not a directory"},
    ),
    (
        "a directory where a file goes",
        {"report.csv": _directory},
        ["report.csv"],
        ["--overwrite"],
        {"report.csv": "report.csv is not a regular file"},
    ),
    (
        "a fifo where a file goes",
        {"report.csv": _fifo},
        ["report.csv"],
        ["--overwrite"],
        {"report.csv": "report.csv is not a regular file"},
    ),
    (
        # the name in DIR is replaced, never written through: the file outside is kept
        "a hard link to a file outside, --overwrite",
        {"notes.txt": _hard_link},
        ["notes.txt"],
        ["--overwrite"],
        {},
    ),
    (
        "a hard link to a file outside is kept",
        {"notes.txt": _hard_link},
        ["notes.txt"],
        [],
        {"notes.txt": "notes.txt is already there"},
    ),
]


def _tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


@pytest.mark.parametrize(
    ("case", "holds", "names", "options", "refused"),
    OUT_CASES,
    ids=[row[0] for row in OUT_CASES],
)
def test_out_writes_only_inside_dir_and_names_what_it_refused(
    tmp_path: Path,
    run_with: Callable[[RunResult, list[str]], tuple[int, str]],
    case: str,
    holds: dict[str, Setup],
    names: list[str],
    options: list[str],
    refused: dict[str, str],
) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    for name in ("config.toml", "notes.txt"):
        (outside / name).write_text(OUTSIDE)
    for entry, make in holds.items():
        make(dest / entry, outside)
    before = _tree(dest)
    result = ok_result().model_copy(update={"artifacts": _stored(tmp_path / "store", names)})

    code, output = run_with(result, ["--out", str(dest), *options])

    assert code == (1 if refused else 0), output
    assert _tree(outside) == {"config.toml": OUTSIDE, "notes.txt": OUTSIDE}
    after = _tree(dest)
    for name in names:
        if name in refused:
            assert after.get(name) == before.get(name)
            assert f"{dest / name}: {refused[name]}" in output
        else:
            assert after[name] == _planted(name)
    for name, content in before.items():
        assert after[name] == (_planted(name) if name in names and name not in refused else content)
    if any("already there" in why for why in refused.values()):
        assert "--overwrite" in output


def test_the_table_shows_all_of_where_a_file_went(
    tmp_path: Path, run_with: Callable[[RunResult, list[str]], tuple[int, str]]
) -> None:
    dest = tmp_path / "a-directory-with-a-rather-long-name" / "and-another-one-below-it"
    result = ok_result().model_copy(update={"artifacts": _stored(tmp_path / "s", ["r.csv"])})
    code, output = run_with(result, ["--out", str(dest)])
    assert code == 0, output
    lines = output[output.index("┡") :].splitlines()[1:]
    where = "".join(line.split("│")[-2].strip() for line in lines if line.startswith("│"))
    assert where == str(dest / "r.csv")


FORGED = "[link=https://evil.example/x]report.csv[/link] \x1b]0;owned\x07[bold red]FAKE[/]"
SHOWN = FORGED.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
SKIPPED = [*HOSTILE, ("an OSC 8 link and markup", FORGED, SHOWN)]


@pytest.mark.parametrize(("case", "wrote", "shown"), SKIPPED, ids=[*IDS, SKIPPED[-1][0]])
def test_what_was_not_taken_from_out_is_printed_as_it_is(
    run_with: Callable[[RunResult, list[str]], tuple[int, str]],
    case: str,
    wrote: str,
    shown: str,
) -> None:
    # The guest names what it skipped, and a program can forge its 'done' frame.
    skipped = [{"name": wrote, "reason": f"a link ({wrote})"}]
    result = RunResult.model_validate({**ok_result().model_dump(), "artifacts_skipped": skipped})
    code, output = run_with(result, [])
    assert code == 0, output
    assert f"not copied from /out: {shown}: a link ({shown})" in output
    assert hidden(output) == []
    assert "\x1b]8;" not in output


GET_CASES: list[tuple[str, Setup | None, int]] = [
    # (case, what stands at DIR/report.csv, exit code): `artifacts get` replaces, as cp does
    ("nothing there", None, 0),
    ("a file there is replaced", _file, 0),
    ("a link there", _link("config.toml"), 2),
    ("a hard link to a file outside: only DIR's name is replaced", _hard_link, 0),
    ("a fifo there", _fifo, 2),
]


@pytest.mark.parametrize(("case", "holds", "code"), GET_CASES, ids=[r[0] for r in GET_CASES])
def test_artifacts_get_writes_only_inside_to(
    tmp_path: Path, case: str, holds: Setup | None, code: int
) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    for name in ("config.toml", "notes.txt"):
        (outside / name).write_text(OUTSIDE)
    if holds is not None:
        holds(dest / "report.csv", outside)
    _stored(tmp_path / "store" / "run_x", ["report.csv"])
    store = ["--store", str(tmp_path / "store"), "--to", str(dest)]
    outcome = cli.invoke(app, ["artifacts", "get", "run_x", "report.csv", *store])
    assert outcome.exit_code == code, outcome.output
    assert _tree(outside) == {"config.toml": OUTSIDE, "notes.txt": OUTSIDE}
    if code == 0:
        assert (dest / "report.csv").read_text() == _planted("report.csv")
    else:
        assert "not copied" in outcome.output


def _stored_gone(stored: Path, _: Path, __: pytest.MonkeyPatch) -> None:
    stored.unlink()  # the store was pruned after the run listed it


def _disk_full(_: Path, dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DIR's file system takes 10 bytes of the copy, then is full (as a small tmpfs was)."""
    write, room = os.write, [10]

    def full(fd: int, data: bytes | memoryview) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(f"{dest}/"):
            return write(fd, data)  # the audit ledger, the terminal: other file systems
        if not room[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        wrote = write(fd, bytes(data[: room[0]]))
        room[0] -= wrote
        return wrote

    monkeypatch.setattr(os, "write", full)


KEPT = b"the user's own three months of work,\n" * 40
FAILED: list[tuple[str, Callable[[Path, Path, pytest.MonkeyPatch], None], Setup | None, str]] = [
    # (case, what goes wrong, what stands at DIR/report.csv, why it is named as not copied)
    ("the stored artifact is gone", _stored_gone, None, "No such file or directory"),
    ("the disk fills up mid-copy", _disk_full, None, os.strerror(errno.ENOSPC)),
    ("gone, onto a hard link", _stored_gone, _hard_link, "No such file or directory"),
    ("disk full, onto a hard link", _disk_full, _hard_link, os.strerror(errno.ENOSPC)),
]


def _failing_copy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    holds: Setup | None,
    goes_wrong: Callable[[Path, Path, pytest.MonkeyPatch], None],
) -> tuple[Path, Path, tuple[ArtifactRef, ...]]:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (outside / "notes.txt").write_bytes(KEPT)
    if holds is None:
        (dest / "report.csv").write_bytes(KEPT)
    else:
        holds(dest / "report.csv", outside)
    refs = _stored(tmp_path / "store" / "run_x", ["report.csv"])
    goes_wrong(Path(refs[0].path), dest, monkeypatch)
    return dest, outside, refs


@pytest.mark.parametrize(("case", "goes_wrong", "holds", "why"), FAILED, ids=[r[0] for r in FAILED])
def test_a_copy_that_fails_keeps_the_file_it_would_replace(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_with: Callable[[RunResult, list[str]], tuple[int, str]],
    case: str,
    goes_wrong: Callable[[Path, Path, pytest.MonkeyPatch], None],
    holds: Setup | None,
    why: str,
) -> None:
    dest, outside, refs = _failing_copy(tmp_path, monkeypatch, holds, goes_wrong)
    result = ok_result().model_copy(update={"artifacts": refs})

    code, output = run_with(result, ["--out", str(dest), "--overwrite"])

    assert code == 1, output
    assert f"not copied: {dest / 'report.csv'}: report.csv {why}" in " ".join(output.split())
    assert (dest / "report.csv").read_bytes() == KEPT
    assert (outside / "notes.txt").read_bytes() == KEPT
    assert os.listdir(dest) == ["report.csv"]  # no half-written file left beside it


@pytest.mark.parametrize(("case", "goes_wrong", "holds", "why"), FAILED, ids=[r[0] for r in FAILED])
def test_artifacts_get_that_fails_keeps_the_file_it_would_replace(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    goes_wrong: Callable[[Path, Path, pytest.MonkeyPatch], None],
    holds: Setup | None,
    why: str,
) -> None:
    dest, outside, refs = _failing_copy(tmp_path, monkeypatch, holds, goes_wrong)
    store = ["--store", str(tmp_path / "store"), "--to", str(dest)]
    if goes_wrong is _stored_gone:  # listed by the store, then pruned before the copy
        monkeypatch.setattr("airlock.cli._artifacts._store", lambda _: _Listed(refs[0]))

    outcome = cli.invoke(app, ["artifacts", "get", "run_x", "report.csv", *store])

    assert outcome.exit_code == 2, outcome.output
    assert "not copied" in outcome.output
    assert why in " ".join(outcome.output.split())
    assert (dest / "report.csv").read_bytes() == KEPT
    assert (outside / "notes.txt").read_bytes() == KEPT
    assert os.listdir(dest) == ["report.csv"]


class _Listed:
    def __init__(self, ref: ArtifactRef) -> None:
        self.ref = ref

    def get(self, run: str, name: str) -> ArtifactRef:
        return self.ref


MODES: list[tuple[str, int | None, int]] = [
    # (case, mode of the file DIR holds (None: nothing there), mode of the copy)
    ("a new file: 0644 less the umask", None, 0o644 & ~0o022),
    ("a private file stays private", 0o600, 0o600),
    ("an executable stays executable", 0o755, 0o755),
    ("set-user-ID is not carried onto the sandbox's bytes", 0o4755, 0o755),
]


@pytest.mark.parametrize(("case", "mode", "copied"), MODES, ids=[r[0] for r in MODES])
def test_an_overwritten_file_keeps_its_permissions(
    tmp_path: Path,
    run_with: Callable[[RunResult, list[str]], tuple[int, str]],
    case: str,
    mode: int | None,
    copied: int,
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    if mode is not None:
        (dest / "report.csv").write_bytes(KEPT)
        (dest / "report.csv").chmod(mode)
    result = ok_result().model_copy(update={"artifacts": _stored(tmp_path / "s", ["report.csv"])})
    umask = os.umask(0o022)
    try:
        code, output = run_with(result, ["--out", str(dest), "--overwrite"])
    finally:
        os.umask(umask)
    assert code == 0, output
    assert (dest / "report.csv").read_text() == _planted("report.csv")
    assert stat.S_IMODE((dest / "report.csv").stat().st_mode) == copied
