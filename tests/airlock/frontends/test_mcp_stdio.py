"""The stdio server's answers to lines it cannot take: one per line (a batch too), and the
same from a regular file as from a pipe."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import mcp_types as types
import pytest

from airlock.frontends._mcp_lines import MAX_LINE_BYTES
from airlock.frontends._mcp_stdin import StdinLines
from tests.airlock.fake_surface import INVOICE_TOOL
from tests.airlock.frontends.mcp_servers import ROOT

PROBE = b'{"jsonrpc":"2.0","id":"probe","method":"tools/list"}'


class Answers:
    def __init__(self) -> None:
        self.sent: list[object] = []

    async def send(self, item: object) -> None:
        self.sent.append(item)


@pytest.mark.anyio
async def test_a_batch_line_gets_one_answer_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batch = b"[" + b",".join(b'{"method":"a","id":%d}' % i for i in range(100_000)) + b"]"
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    reader.feed_data(batch + b"\n" + PROBE + b"\n")
    reader.feed_eof()
    lines = StdinLines(reader)
    sent = Answers()
    lines.answer_with(sent)
    with caplog.at_level(logging.WARNING, logger="airlock.mcp"):
        assert [text async for text in lines] == [PROBE.decode() + "\n"]
    [answer] = sent.sent
    error = answer.message  # type: ignore[attr-defined]
    assert isinstance(error, types.JSONRPCError)
    assert (error.error.code, error.id) == (types.INVALID_REQUEST, None)
    assert len([r for r in caplog.records if r.name == "airlock.mcp"]) == 1


SERVER = (
    "import anyio\n"
    "from airlock.frontends.mcp import build_mcp_server, serve_stdio\n"
    "from tests.airlock.fake_surface import EchoSurface\n"
    "anyio.run(serve_stdio, build_mcp_server(EchoSurface()))\n"
)
HELLO = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
# Lines a server reading stdin from a regular file must answer as it would from a pipe.
FILE_LINES: list[tuple[bytes, int, object]] = [
    (b"{not json", types.PARSE_ERROR, None),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', types.INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","\\u0069d":2.5,"method":"tools/list"}', types.INVALID_REQUEST, None),
    (b'[{"jsonrpc":"2.0","id":3,"method":"tools/list"}]', types.INVALID_REQUEST, None),
    (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"'
        + b"a" * (MAX_LINE_BYTES + 2**20)
        + b'"}}',
        types.PARSE_ERROR,
        7,
    ),
]


def test_stdin_from_a_regular_file_is_answered_line_by_line(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    with requests.open("wb") as file:
        file.write(json.dumps(HELLO).encode() + b"\n")
        file.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for line, _, _ in FILE_LINES:
            file.write(line + b"\n")
        file.write(PROBE + b"\n")  # the last line: answered before the server ends
    with requests.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", SERVER],
            stdin=stdin,
            capture_output=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    errors = [(a["error"]["code"], a["id"]) for a in answers if "error" in a]
    assert errors == [(code, request_id) for _, code, request_id in FILE_LINES]
    [probe] = [a for a in answers if a["id"] == "probe"]
    assert [t["name"] for t in probe["result"]["tools"]] == [INVOICE_TOOL.name]
    assert "over 16 MiB" in json.dumps(answers)
