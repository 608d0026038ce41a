"""``airlock chat`` that ends while a write or a batch it asked for waits for a person: no
session is left to commit an approval, so the chat says on stderr what waits, with its full
fingerprint and the command that approves and commits it (the chat's own ``--registry`` and
``--policy``); that command commits it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from airlock.cli import app
from airlock.tools import Registry, SQLiteLedgerStore
from airlock.tools.testing import SystemOfRecord, refund_tool
from tests.airlock.conversation_registry import INVOICES, build_registry
from tests.conftest import require_docker

HERE = Path(__file__).resolve().parents[1]
REGISTRY = "tests.airlock.conversation_registry:registry"
POLICY = HERE / "conversation_policy.toml"
_COMMAND = re.compile(r"^(p[vb]_\w+)  fingerprint (\w+):  (airlock approvals approve .*)$", re.M)


def proposing_registry() -> Registry:
    """The conversation tools, with a refund a program may propose (``--registry``)."""
    registry = build_registry(SystemOfRecord())
    proposing = Registry()
    for spec in registry.specs():
        if spec.name != "billing_refund_create":
            proposing.register(spec)
    proposing.register(refund_tool(SystemOfRecord(), INVOICES, proposable=True))
    return proposing


def _chat(tmp_path: Path, turns: list[Any], *args: str) -> Result:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"prompt": "refund the duplicates", "turns": turns}))
    return CliRunner().invoke(app, ["chat", "--replay", str(replay), *args, "--user", "alice"])


def _said(result: Result) -> list[tuple[str, str, list[str]]]:
    """The waiting ids, fingerprints and commands (without ``airlock``) the chat printed."""
    return [(i, f, shlex.split(c)[1:]) for i, f, c in _COMMAND.findall(result.output)]


def _state(tmp_path: Path, preview_id: str) -> str:
    store = SQLiteLedgerStore(tmp_path / "home" / "ledger.db", readonly=True)
    try:
        found = store.preview(preview_id)
        assert found is not None
        return found.state
    finally:
        store.close()


def _text(said: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": said}]}


def _refund(invoice: str) -> dict[str, Any]:
    call = {"invoice_id": invoice, "reason": "duplicate"}
    tool = {"type": "tool_use", "id": "toolu_refund", "name": "billing_refund_create"}
    return {"content": [{**tool, "input": call}]}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "80")  # the lines are not wrapped: they are to be copied
    monkeypatch.delenv("AIRLOCK_DATABASE_URL", raising=False)
    return tmp_path


def test_a_write_left_waiting_is_said_with_the_command_that_commits_it(home: Path) -> None:
    session = ["--registry", REGISTRY, "--policy", str(POLICY)]
    result = _chat(home, [_refund("inv_007"), _text("It waits for you.")], *session)

    assert result.exit_code == 0, result.output
    [(preview_id, fingerprint, command)] = _said(result)
    assert preview_id.startswith("pv_")
    assert len(fingerprint) == 64
    assert command == [
        "approvals", "approve", preview_id, "--fingerprint", fingerprint,
        "--commit", "--registry", REGISTRY, "--policy", str(POLICY),
    ]  # fmt: skip
    assert "the chat ended with 1 write(s) waiting for approval" in result.output
    assert _state(home, preview_id) == "prepared"
    # The command it printed, run by another person, commits the write.
    done = CliRunner().invoke(app, [*command, "--as", "bob"])
    assert done.exit_code == 0, done.output
    assert "committed; receipt:" in done.output
    assert _state(home, preview_id) == "committed"


def test_a_chat_that_leaves_nothing_waiting_says_nothing_of_it(home: Path) -> None:
    result = _chat(home, [_text("Nothing to do.")], "--registry", REGISTRY, "--policy", str(POLICY))
    assert result.exit_code == 0, result.output
    assert "the chat ended with" not in result.output
    assert "approvals approve" not in result.output


def test_a_given_ledger_is_named_in_the_command(home: Path) -> None:
    ledger = home / "elsewhere" / "ledger.db"
    session = ["--registry", REGISTRY, "--policy", str(POLICY), "--ledger", str(ledger)]
    result = _chat(home, [_refund("inv_007")], *session)
    assert result.exit_code == 0, result.output
    [(_, _, command)] = _said(result)
    assert command[-2:] == ["--ledger", str(ledger)]


PROGRAM = """proposed = tools.propose.billing_refund_create.batch(
    [{"invoice_id": i, "reason": "duplicate"} for i in ("inv_007", "inv_032")]
)
len(proposed)
"""


@pytest.mark.docker
def test_a_batch_left_waiting_is_said_and_its_command_commits_every_item(home: Path) -> None:
    require_docker()
    policy = home / "policy.toml"
    policy.write_text(
        POLICY.read_text().replace(
            'roles = ["billing_agent"]', 'roles = ["billing_agent"]\npropose = ["billing_*"]'
        )
    )
    code = {"type": "tool_use", "id": "toolu_scan", "name": "execute_code"}
    turns = [{"content": [{**code, "input": {"code": PROGRAM}}]}, _text("Both are refunded.")]
    registry = f"{__name__}:proposing_registry"

    result = _chat(home, turns, "--registry", registry, "--policy", str(policy))

    assert result.exit_code == 0, result.output
    [(batch_id, fingerprint, command)] = _said(result)
    assert batch_id.startswith("pb_")
    assert "the chat ended with 1 batch(es) waiting for approval" in result.output
    shown = CliRunner().invoke(app, ["approvals", "show", batch_id])
    assert f"fingerprint  {fingerprint}" in shown.output
    done = CliRunner().invoke(app, [*command, "--as", "bob"])
    assert done.exit_code == 0, done.output
    assert "2 of 2 item(s) approved now" in done.output
    store = SQLiteLedgerStore(home / "home" / "ledger.db", readonly=True)
    try:
        batch = store.batch(batch_id)
        assert batch is not None
        assert {_state(home, item) for item in batch.items} == {"committed"}
    finally:
        store.close()
