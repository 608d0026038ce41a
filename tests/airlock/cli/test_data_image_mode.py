"""The data image with restricted programs, asked for on the command line: one line naming
what to pass (exit 2), never the profile's validation error (a box quoting its input, a link
to pydantic's pages, the policy key where the flag is meant)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app

HERE = Path(__file__).resolve().parents[1]
REGISTRY = ["--registry", "tests.airlock.conversation_registry:registry"]
RESTRICTED_POLICY = (
    (HERE / "conversation_policy.toml")
    .read_text()
    .replace("version = 1\n", 'version = 1\n[sandbox]\nlanguage_mode = "restricted"\n', 1)
)
"""The fixture conversations' policy, with its restricted mode written out."""
RUN_SAYS = (
    "error (usage_error): the data image runs programs in full mode only: pass --mode full "
    '(language_mode = "full" in a policy)'
)
WIDENS = "error (usage_error): --image data widens the policy's sandbox (image in"

# (case, the command after `airlock`, where the policy file goes, the line it prints)
ROWS: list[tuple[str, list[str], str]] = [
    ("run --mode restricted", ["run", "{program}", "--image", "data", "--mode", "restricted"], RUN_SAYS),
    (
        "chat, a policy in restricted mode",
        ["chat", "--replay", "{replay}", *REGISTRY, "--policy", "{policy}", "--user", "alice",
         "--image", "data"],
        WIDENS,
    ),
    (
        "serve, a policy in restricted mode",
        ["serve", "--mcp", *REGISTRY, "--policy", "{policy}", "--user", "alice", "--image", "data"],
        WIDENS,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("args", "line"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_the_data_image_in_restricted_mode_is_one_usage_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], line: str
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "80")  # a box would wrap the message: the line stays whole
    (tmp_path / "program.py").write_text("print(1)\n")
    (tmp_path / "replay.json").write_text('{"prompt": "hi", "turns": []}')
    (tmp_path / "policy.toml").write_text(RESTRICTED_POLICY)
    given = [a.format(program=tmp_path / "program.py", replay=tmp_path / "replay.json",
                      policy=tmp_path / "policy.toml") for a in args]  # fmt: skip

    result = CliRunner().invoke(app, given)

    assert result.exit_code == 2, result.output
    assert result.output.startswith(line), result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for noise in ("input_value", "errors.pydantic.dev", "validation error", "╭"):
        assert noise not in result.output
