"""``airlock chat`` with what a model or a replay file may hold: a malformed replay is a usage
error (exit 2, its reason named, no traceback), a live model's malformed answer is the model
API's failure (exit 4), and printing a message never fails on its shape."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import airlock.frontends._chat as chat_module
from airlock.cli import app
from airlock.cli._chat import print_message

HERE = Path(__file__).resolve().parents[1]
SESSION_ARGS = (
    "--registry",
    "tests.airlock.conversation_registry:registry",
    "--policy",
    str(HERE / "conversation_policy.toml"),
    "--user",
    "alice",
)

# (a turn's content) -> what the usage error names
REPLAYS: list[tuple[str, object, str]] = [
    ("text missing", [{"type": "text"}], "text block 0 has no string 'text'"),
    ("text a number", [{"type": "text", "text": 5}], "text block 0 has no string 'text'"),
    ("a number for a block", [1], "turns.0.content.0"),
    ("content a string", "hello", "turns.0.content"),
]


@pytest.mark.parametrize(
    ("content", "fragment"), [r[1:] for r in REPLAYS], ids=[r[0] for r in REPLAYS]
)
def test_a_malformed_replay_file_is_a_usage_error_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: object, fragment: str
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"prompt": "hi", "turns": [{"content": content}]}))

    result = CliRunner().invoke(app, ["chat", "--replay", str(replay), *SESSION_ARGS])

    assert result.exit_code == 2, result.output
    assert "error (replay_file)" in result.output
    assert fragment in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


# Messages no model or replay should send, which print_message prints all the same.
MESSAGES: list[tuple[str, dict[str, Any], str]] = [
    ("a number for a block", {"role": "assistant", "content": [1]}, "1"),
    ("text missing", {"role": "assistant", "content": [{"type": "text"}]}, "assistant:"),
    ("text a number", {"role": "assistant", "content": [{"type": "text", "text": 5}]}, "5"),
    (
        "text an object",
        {"role": "assistant", "content": [{"type": "text", "text": {"a": 1}}]},
        "{'a': 1}",
    ),
    ("a bare tool_use", {"role": "assistant", "content": [{"type": "tool_use"}]}, "→ None"),
    ("a bare tool_result", {"role": "user", "content": [{"type": "tool_result"}]}, "← None"),
    ("content null", {"role": "assistant", "content": None}, "assistant:"),
    ("content a number", {"role": "assistant", "content": 7}, "7"),
    ("no role", {"content": "hi"}, "hi"),
    ("a role that is a list", {"role": ["x"], "content": "hi"}, "hi"),
    ("a type that is a list", {"role": "user", "content": [{"type": ["text"]}]}, ""),
]


@pytest.mark.parametrize(
    ("message", "shown"), [m[1:] for m in MESSAGES], ids=[m[0] for m in MESSAGES]
)
def test_print_message_prints_any_shape_without_raising(
    message: dict[str, Any], shown: str
) -> None:
    out = io.StringIO()
    print_message(Console(file=out, width=200, highlight=False), message)
    assert shown in out.getvalue()


class _MalformedAPI(BaseHTTPRequestHandler):
    """A model API whose every answer asks for a tool call without an id."""

    answer = json.dumps(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "tool_use", "name": "billing_invoice_get", "input": {}}],
            "stop_reason": "tool_use",
        }
    ).encode()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def malformed_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MalformedAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/v1/messages"
    monkeypatch.setattr(chat_module, "ANTHROPIC_URL", url)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# (where the malformed tool call comes from) -> the exit code, what the error line says
MALFORMED_SOURCES: list[tuple[str, bool, int, str]] = [
    ("a live model: its API failed", True, 4, "model API (model_api):"),
    ("a replay file: the user's file", False, 2, "error (malformed_block):"),
]


@pytest.mark.usefixtures("malformed_api")
@pytest.mark.parametrize(
    ("live", "code", "said"),
    [m[1:] for m in MALFORMED_SOURCES],
    ids=[m[0] for m in MALFORMED_SOURCES],
)
def test_a_tool_call_without_an_id_exits_by_whose_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: bool, code: int, said: str
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRLOCK_POOL_SIZE", "0")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    if live:
        args = ["chat", "hi"]
    else:
        replay = tmp_path / "replay.json"
        turn = {"content": json.loads(_MalformedAPI.answer)["content"]}
        replay.write_text(json.dumps({"prompt": "hi", "turns": [turn]}))
        args = ["chat", "--replay", str(replay)]

    result = CliRunner().invoke(app, [*args, *SESSION_ARGS])

    assert result.exit_code == code, result.output
    assert said in result.output
    assert "needs a non-empty string 'id', got None" in result.output
    assert "Traceback" not in result.output
