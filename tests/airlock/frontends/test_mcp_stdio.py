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
    assert "over 4 MiB" in json.dumps(answers)


def _request(request_id: int | str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}).encode()


def _cancel(request_id: int | str) -> bytes:
    notice = {"method": "notifications/cancelled", "params": {"requestId": request_id}}
    return json.dumps({"jsonrpc": "2.0", **notice}).encode()


# A file's lines, the ids then answered, and whether the lines then end.
FILE_ENDS: list[tuple[str, list[bytes], list[int | str], bool]] = [
    ("answered", [_request(5)], [5], True),
    ("unanswered", [_request(5)], [], False),
    ("cancelled by the client", [_request(5), _cancel(5)], [], True),
    ("cancelled as a string", [_request(5), _cancel("5")], [], True),
    ("another id cancelled", [_request(5), _cancel(6)], [], False),
    ("cancelled before it was sent", [_cancel(5), _request(5)], [], False),
    ("a duplicate id, answered once", [_request(5), _request(5)], [5], False),
    ("a duplicate id, answered twice", [_request(5), _request(5)], [5, 5], True),
    ("a duplicate id, one cancelled", [_request(5), _request(5), _cancel(5)], [5], True),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("lines", "answered", "ends"), [row[1:] for row in FILE_ENDS], ids=[r[0] for r in FILE_ENDS]
)
async def test_a_files_lines_end_once_every_request_is_answered_or_cancelled(
    lines: list[bytes], answered: list[int | str], ends: bool
) -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(b"".join(line + b"\n" for line in lines))
    reader.feed_eof()
    stdin = StdinLines(reader, wait_for_answers=True)
    for _ in lines:
        await anext(stdin)
    for request_id in answered:
        stdin.answered(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={}))
    end = asyncio.ensure_future(anext(stdin))
    for _ in range(10):  # a few turns of the loop: the end waits on nothing else
        await asyncio.sleep(0)
    assert end.done() is ends
    end.cancel()
    if ends:
        with pytest.raises(StopAsyncIteration):
            end.result()
