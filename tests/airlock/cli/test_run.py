from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from airlock.cli import app, parse_size
from airlock.cli._run import _print_result
from airlock.sandbox import ProgramError, RunResult
from tests.airlock.cli.hostile_text import HOSTILE, IDS, hidden
from tests.conftest import require_docker

cli = CliRunner()


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("65536", 65536),
        ("256m", 256 * 2**20),
        ("1g", 2**30),
        ("512MiB", 512 * 2**20),
        ("64k", 65536),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-5m", "1.5g", "12t"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="is not a size"):
        parse_size(text)


def test_bad_mode_is_refused(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("1\n")
    outcome = cli.invoke(app, ["run", str(program), "--mode", "unsafe"])
    assert outcome.exit_code == 2
    assert "restricted or full" in outcome.output


@pytest.mark.docker
def test_run_prints_value_and_exits_zero(tmp_path: Path) -> None:
    require_docker()
    program = tmp_path / "ok.py"
    program.write_text("print('hello')\n{'answer': 42}\n")
    outcome = cli.invoke(app, ["run", str(program), "--json"])
    assert outcome.exit_code == 0, outcome.output
    result = json.loads(outcome.output)
    assert result["value"] == {"answer": 42}
    assert result["stdout"] == "hello\n"


@pytest.mark.docker
@pytest.mark.parametrize(
    ("source", "args", "reason"),
    [
        (
            "while True:\n    pass\n",
            ["--timeout", "1", "--mode", "full"],
            "stopped by its timeout limit",
        ),
        ("import os\n", [], "refused before running"),
        ("1 / 0\n", [], "raised ZeroDivisionError"),
        (
            "x = bytearray(200 * 1024 * 1024)\n",
            ["--memory", "64m", "--mode", "full"],
            "memory limit",
        ),
    ],
)
def test_run_failure_exits_non_zero_with_reason(
    tmp_path: Path, source: str, args: list[str], reason: str
) -> None:
    require_docker()
    program = tmp_path / "bad.py"
    program.write_text(source)
    outcome = cli.invoke(app, ["run", str(program), *args])
    assert outcome.exit_code == 1
    assert reason in " ".join(outcome.output.split())


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_doctor_passes_on_this_engine(runtime: str) -> None:
    require_docker()
    outcome = cli.invoke(app, ["doctor", "--runtime", runtime])
    assert outcome.exit_code == 0, outcome.output
    assert "FAIL" not in outcome.output
    assert f"{runtime}: the program sees kernel" in " ".join(outcome.output.split())
    # The second seccomp layer, as libseccomp's PFC text, for both language modes.
    assert "second seccomp layer, restricted mode" in outcome.output
    assert "second seccomp layer, full mode" in outcome.output
    assert outcome.output.count("pseudo filter code start") == 2


@pytest.mark.parametrize(("case", "wrote", "shown"), HOSTILE, ids=IDS)
def test_a_programs_error_message_is_printed_literally(case: str, wrote: str, shown: str) -> None:
    result = RunResult(
        status="error",
        exit_status=1,
        has_value=True,
        value={"note": wrote},
        duration_s=0.01,
        error=ProgramError(type="ValueError", message=wrote, traceback=f"ValueError: {wrote}\n"),
    )
    out = io.StringIO()
    _print_result(Console(file=out, width=400), result)  # (no styles: what a pipe gets)
    printed = out.getvalue()
    assert shown in printed
    assert hidden(printed) == []
