"""A state folder that cannot be made (under a file, a file itself, in ``/proc``), however the
command is told of it, is one typed line and exit 2 from every command that writes a store
there: never a traceback. And what a command makes there is its user's alone."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app
from tests.airlock.inventory_registry import POLICY_ARG, REPO

runner = CliRunner()
FRESH = "tests.airlock.inventory_registry:build_registry"
SESSION = ["--registry", FRESH, "--policy", str(REPO / POLICY_ARG), "--user", "alice"]
REPLAY = ["--replay", str(REPO / "examples/billing/demo_replay.json")]
COMMANDS: dict[str, list[str]] = {
    "run": ["run", "{work}/program.py"],
    "serve": ["serve", "--mcp", *SESSION],
    "chat": ["chat", "hi", *SESSION, *REPLAY],
}

# How the command is told where its state goes: (extra arguments, environment); ``{bad}`` is
# the folder that cannot be made.
Given = tuple[list[str], dict[str, str]]
HOME = {"AIRLOCK_HOME": "{work}/home"}
GIVEN: dict[str, Given] = {
    "AIRLOCK_HOME": ([], {"AIRLOCK_HOME": "{bad}"}),
    "--ledger": (["--ledger", "{bad}/ledger.db"], HOME),
    "--database": (["--database", "sqlite://{bad}"], HOME),
    "AIRLOCK_DATABASE_URL": ([], {**HOME, "AIRLOCK_DATABASE_URL": "sqlite://{bad}"}),
}
TAKES: dict[str, set[str]] = {
    "run": {"AIRLOCK_HOME", "AIRLOCK_DATABASE_URL"},
    "serve": set(GIVEN),
    "chat": {"AIRLOCK_HOME", "--ledger", "AIRLOCK_DATABASE_URL"},
}
# Where the folder cannot be made, and what the system says.
BAD: dict[str, tuple[Callable[[Path], Path], str]] = {
    "a file": (lambda work: work / "afile", "File exists"),
    "under a file": (lambda work: work / "afile" / "sub", "Not a directory"),
    "in /proc": (lambda work: Path("/proc/airlock"), "No such file or directory"),
}
CASES = [
    pytest.param(command, given, bad, id=f"{command}-{given}-{bad}")
    for command in COMMANDS
    for given in sorted(TAKES[command])
    for bad in BAD
]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "program.py").write_text("1 + 1\n")
    return tmp_path


def _env(given: dict[str, str]) -> dict[str, str]:
    # An engine that is not there: a command that got past its stores says so (exit 3).
    return {
        "AIRLOCK_DATABASE_URL": "",
        **given,
        "AIRLOCK_POOL_SIZE": "0",
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        "ANTHROPIC_API_KEY": "",
    }


@pytest.mark.parametrize(("command", "given", "bad"), CASES)
def test_a_state_folder_that_cannot_be_made_is_one_line_and_exit_2(
    command: str, given: str, bad: str, work: Path
) -> None:
    folder, says = BAD[bad]
    names = {"bad": str(folder(work)), "work": str(work)}
    extra, env = GIVEN[given]
    args = [a.format(**names) for a in [*COMMANDS[command], *extra]]
    result = runner.invoke(app, args, env=_env({k: v.format(**names) for k, v in env.items()}))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error (ledger_unavailable): the "), line
    assert line.endswith(f"cannot be created: its folder cannot be made ({says})"), line
    assert repr(str(folder(work))).rstrip("'") in line


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("command", ["serve", "chat"])
def test_what_a_command_makes_in_a_new_home_is_its_users_alone(command: str, work: Path) -> None:
    home = work / "new" / "home"
    args = [a.format(work=work) for a in COMMANDS[command]]
    result = runner.invoke(app, args, env=_env({"AIRLOCK_HOME": str(home)}))
    assert result.exit_code == 3, result.output  # the stores opened; the engine is not there
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [home, *home.iterdir()]}
    # SQLite's journals (-wal, -shm) take their database's mode, while they are there.
    made = {name.removesuffix("-wal").removesuffix("-shm") for name in modes}
    assert made == {"home", "ledger.db", "audit.db", "audit.db.key"}
    assert modes == {name: 0o700 if name == "home" else 0o600 for name in modes}
    assert stat.S_IMODE((work / "new").stat().st_mode) == 0o755  # only the state's own folder
