"""The live model loop and ``airlock chat``, without the network: a mock transport plays
the Anthropic Messages API, and ``--replay`` plays recorded turns."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import re
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from airlock.cli import app
from airlock.frontends import ANTHROPIC_URL, AnthropicModel, ModelAPIError, chat_loop
from airlock.frontends._chat import MAX_ANSWER_BYTES
from tests.airlock.fake_surface import INVOICE_TOOL, EchoSurface
from tests.conftest import require_docker

HERE = Path(__file__).resolve().parents[1]
SESSION_ARGS = (
    "--registry",
    "tests.airlock.conversation_registry:registry",
    "--policy",
    str(HERE / "conversation_policy.toml"),
    "--user",
    "alice",
)


def anthropic_api(replies: list[dict[str, Any]], seen: list[dict[str, Any]]) -> httpx.AsyncClient:
    """A client whose every POST answers the next reply and records the request."""

    def handle(request: httpx.Request) -> httpx.Response:
        assert str(request.url) == ANTHROPIC_URL
        assert request.headers["x-api-key"] == "test-key"
        assert request.headers["anthropic-version"] == "2023-06-01"
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=replies[len(seen) - 1])

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def reply(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": content, "stop_reason": stop}


@pytest.mark.anyio
async def test_the_loop_answers_tool_calls_until_the_model_stops() -> None:
    seen: list[dict[str, Any]] = []
    replies = [
        reply(
            [
                {"type": "text", "text": "Looking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "billing_invoice_get",
                    "input": {"invoice_id": "inv_1"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "billing_invoice_get",
                    "input": {"invoice_id": "inv_2"},
                },
            ],
            "tool_use",
        ),
        reply([{"type": "text", "text": "Both exist."}], "end_turn"),
    ]
    model = AnthropicModel("test-key", model="m", client=anthropic_api(replies, seen))
    transcript = await chat_loop(model, EchoSurface(), "check inv_1 and inv_2")

    assert len(seen) == 2
    assert seen[0]["tools"] == [
        {
            "name": INVOICE_TOOL.name,
            "description": INVOICE_TOOL.description,
            "input_schema": INVOICE_TOOL.input_schema,
        }
    ]
    assert seen[0]["messages"] == [{"role": "user", "content": "check inv_1 and inv_2"}]
    answers = seen[1]["messages"][2]
    assert answers["role"] == "user"
    assert [(a["type"], a["tool_use_id"]) for a in answers["content"]] == [
        ("tool_result", "toolu_1"),
        ("tool_result", "toolu_2"),
    ]
    assert [m["role"] for m in transcript.messages] == ["user", "assistant", "user", "assistant"]


@pytest.mark.anyio
async def test_the_loop_stops_after_max_turns() -> None:
    seen: list[dict[str, Any]] = []
    forever = reply(
        [
            {
                "type": "tool_use",
                "id": "toolu_x",
                "name": "billing_invoice_get",
                "input": {"invoice_id": "inv_1"},
            }
        ],
        "tool_use",
    )
    model = AnthropicModel("test-key", client=anthropic_api([forever] * 5, seen))
    await chat_loop(model, EchoSurface(), "loop", max_turns=3)
    assert len(seen) == 3


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "retryable"), [(429, True), (529, True), (400, False)])
async def test_a_failed_request_is_a_typed_error(status: int, retryable: bool) -> None:
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(status, text="no"))
    )
    model = AnthropicModel("test-key", client=client)
    with pytest.raises(ModelAPIError) as raised:
        await chat_loop(model, EchoSurface(), "hi")
    assert (raised.value.code, raised.value.status, raised.value.retryable) == (
        "model_api",
        status,
        retryable,
    )


def tool_use_reply(value: bytes) -> bytes:
    """A reply whose one tool call's input holds ``value`` as it is."""
    return (
        b'{"type":"message","role":"assistant","stop_reason":"tool_use","content":'
        b'[{"type":"tool_use","id":"toolu_1","name":"billing_invoice_get","input":{"a":'
        + value
        + b"}}]}"
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not readable JSON"),
        (tool_use_reply(b"[" * 100_000 + b"]" * 100_000), "nested too deep to read"),
        (tool_use_reply(b"1" * 5000), "not readable JSON"),
        # Readable, but its call is refused anyway and json.dumps could not send it back.
        (tool_use_reply(b"[" * 201 + b"]" * 201), "nested deeper than 203 levels"),
        (tool_use_reply(b"[" * 700 + b"]" * 700), "nested deeper than 203 levels"),
    ],
)
async def test_an_answer_that_cannot_be_read_or_sent_back_is_a_typed_error(
    body: bytes, fragment: str
) -> None:
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=body))
    )
    surface = EchoSurface()
    with pytest.raises(ModelAPIError, match=fragment) as raised:
        await chat_loop(AnthropicModel("test-key", client=client), surface, "hi")
    assert (raised.value.code, raised.value.retryable) == ("model_api", False)
    assert surface.calls == []


MESSAGE = {"type": "message", "role": "assistant"}

# (the answer's content, its stop_reason) -> what the error says
HOSTILE_ANSWERS: list[tuple[str, object, str, str]] = [
    ("a number for a block", [1], "end_turn", "content block 0 is int, not an object"),
    ("null for a block", [{"type": "text", "text": "hi"}, None], "end_turn", "content block 1"),
    ("a list for a block", [["text"]], "tool_use", "content block 0 is list"),
    ("text missing", [{"type": "text"}], "end_turn", "text block 0 has no string 'text'"),
    ("text a number", [{"type": "text", "text": 5}], "end_turn", "text block 0 has no"),
    ("text an object", [{"type": "text", "text": {"a": 1}}], "end_turn", "text block 0"),
    ("tool_use without calls", [], "tool_use", "stop_reason 'tool_use' but no tool_use block"),
    (
        "tool_use with text only",
        [{"type": "text", "text": "calling"}],
        "tool_use",
        "stop_reason 'tool_use' but no tool_use block",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "stop", "fragment"),
    [a[1:] for a in HOSTILE_ANSWERS],
    ids=[a[0] for a in HOSTILE_ANSWERS],
)
async def test_an_answer_whose_blocks_are_malformed_is_a_typed_error(
    content: object, stop: str, fragment: str
) -> None:
    seen: list[dict[str, Any]] = []
    printed: list[dict[str, Any]] = []
    answer = {**MESSAGE, "content": content, "stop_reason": stop}
    model = AnthropicModel("test-key", client=anthropic_api([answer], seen))

    async def show(message: dict[str, Any]) -> None:
        printed.append(message)

    surface = EchoSurface()
    with pytest.raises(ModelAPIError, match=re.escape(fragment)) as raised:
        await chat_loop(model, surface, "hi", on_message=show)
    assert (raised.value.code, raised.value.status, raised.value.retryable) == (
        "model_api",
        200,
        False,
    )
    assert (len(seen), printed, surface.calls) == (1, [], [])


async def _endless() -> AsyncIterator[bytes]:
    while True:
        yield b" " * (1 << 20)
        await asyncio.sleep(0)


# (status, body) -> what the error says, and whether to retry
LARGE_ANSWERS: list[tuple[str, int, str, str, bool]] = [
    ("endless", 200, "endless", "answered more than 16 MiB", False),
    ("one byte over", 200, "sized", "answered more than 16 MiB", False),
    ("endless error", 500, "endless", "answered HTTP 500", True),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "body", "fragment", "retryable"),
    [a[1:] for a in LARGE_ANSWERS],
    ids=[a[0] for a in LARGE_ANSWERS],
)
async def test_an_answer_larger_than_the_bound_is_a_typed_error_read_no_further(
    status: int, body: str, fragment: str, retryable: bool
) -> None:
    content = _endless() if body == "endless" else b"[" + b" " * (MAX_ANSWER_BYTES - 1) + b"]"
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(status, content=content))
    )
    with pytest.raises(ModelAPIError, match=fragment) as raised:
        await AnthropicModel("test-key", client=client).respond([], [])
    assert (raised.value.status, raised.value.retryable) == (status, retryable)


@pytest.mark.anyio
async def test_an_answer_at_the_bound_is_read() -> None:
    body = b'{"content": [], "stop_reason": "end_turn"}'
    content = body + b" " * (MAX_ANSWER_BYTES - len(body))
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=content))
    )
    answer = await AnthropicModel("test-key", client=client).respond([], [])
    assert answer == {"content": [], "stop_reason": "end_turn"}


def test_chat_without_a_key_or_a_replay_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = CliRunner().invoke(
        app,
        ["chat", "hi", *SESSION_ARGS],
    )
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY" in result.output


@pytest.mark.docker
def test_chat_replays_the_bulk_read_in_the_real_sandbox(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    require_docker()
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path))
    monkeypatch.setenv("AIRLOCK_POOL_SIZE", "1")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = CliRunner().invoke(
        app,
        [
            "chat",
            *SESSION_ARGS,
            "--replay",
            str(HERE / "fixtures" / "conversations" / "bulk_read.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "→ execute_code" in result.output
    assert '"scanned":200' in result.output.replace("\n", "")
    assert "bytes of tool results entered the context" in result.output


async def _refund_chat(
    tmp_path: Path, last_words: str, *, lose_every_reply: bool, within_s: float
) -> tuple[Any, list[dict[str, Any]], int]:
    """A live chat in which the model asks for a refund, ends its turn, and a person approves
    the paused write; the transcript, the model's requests and the sends the system saw."""
    import anyio

    from airlock.sandbox.testing import ScriptedBackend
    from airlock.tools import approve_preview
    from tests.airlock.session_world import World

    world = World(tmp_path, ScriptedBackend([]))
    if lose_every_reply:
        world.system.inject("lose_reply", times=100_000)  # every send acts; its answer is lost
    session = world.session()
    refund = {"invoice_id": "inv_3", "reason": "duplicate"}
    asked = {"type": "tool_use", "id": "toolu_1", "name": "billing_refund_create", "input": refund}
    seen: list[dict[str, Any]] = []
    replies = [
        reply([asked], "tool_use"),
        reply([{"type": "text", "text": "It waits for a person."}], "end_turn"),
        reply([{"type": "text", "text": last_words}], "end_turn"),
    ]
    model = AnthropicModel("test-key", client=anthropic_api(replies, seen))

    async def approve_when_paused() -> None:
        while not session.pending():
            await anyio.sleep(0.01)
        await anyio.sleep(0.05)  # the model has ended its turn by now
        [waiting] = session.pending()
        approve_preview(world.ledger, waiting.preview_id, approver="bob", now=time.time())

    try:
        with anyio.fail_after(within_s):
            async with anyio.create_task_group() as group:
                group.start_soon(approve_when_paused)
                transcript = await chat_loop(
                    model, session, "refund inv_3", writes=session, poll=0.01
                )
        return transcript, seen, world.system.sends()
    finally:
        await model.aclose()
        world.close()


@pytest.mark.anyio
async def test_a_live_chat_waits_for_its_writes_commits_them_once_and_tells_the_model(
    tmp_path: Path,
) -> None:
    transcript, seen, sends = await _refund_chat(
        tmp_path, "Refunded.", lose_every_reply=False, within_s=30
    )
    told = transcript.messages[-2]["content"][0]["text"]
    assert told.startswith("Writes settled since your last turn: ")
    [settled] = json.loads(told.removeprefix("Writes settled since your last turn: "))
    assert settled["status"] == "committed"
    assert settled["receipt"]["amount_minor"] == 1003
    assert transcript.messages[-1]["content"][0]["text"] == "Refunded."
    assert len(seen) == 3
    assert sends == 1


@pytest.mark.anyio
async def test_a_live_chat_tells_the_model_a_write_whose_outcome_stays_unknown_and_goes_on(
    tmp_path: Path,
) -> None:
    from airlock.harness._paused import UNKNOWN_TRIES

    # Before the fix the loop resent the write every poll, for ever: the time limit failed it.
    transcript, seen, sends = await _refund_chat(
        tmp_path, "Its outcome is unknown.", lose_every_reply=True, within_s=10
    )
    told = transcript.messages[-2]["content"][0]["text"]
    [settled] = json.loads(told.removeprefix("Writes settled since your last turn: "))
    assert (settled["error"], settled["outcome"]) == ("ambiguous_write", "unknown")
    assert "Do not call the tool again" in settled["message"]
    assert transcript.messages[-1]["content"][0]["text"] == "Its outcome is unknown."
    assert len(seen) == 3
    assert sends == UNKNOWN_TRIES


@functools.cache
def _gzip_zeros(mib: int) -> bytes:
    """``mib`` MiB of zeros gzipped: a few dozen KiB that inflate to the whole."""
    stream = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    return b"".join([*(stream.compress(block) for _ in range(mib)), stream.flush()])


def _deflate(data: bytes, *, raw: bool = False) -> bytes:
    stream = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
    return stream.compress(data) + stream.flush()


_MESSAGE = b'{"content": [], "stop_reason": "end_turn"}'
_AT_CAP = _MESSAGE + b" " * (MAX_ANSWER_BYTES - len(_MESSAGE))


def _wire(case: str) -> tuple[str, bytes]:
    """The Content-Encoding and the bytes on the wire of one case of ENCODED_ANSWERS."""
    if case == "stacked gzip":
        return "gzip, gzip", gzip.compress(_gzip_zeros(64), 1)
    if case == "gzip bomb":
        return "gzip", _gzip_zeros(64)
    if case == "gzip error bomb":
        return "gzip", _gzip_zeros(64)
    if case == "stacked error":
        return "gzip, gzip", gzip.compress(_gzip_zeros(64), 1)
    if case in ("gzip", "x-gzip"):
        return case, gzip.compress(_MESSAGE)
    if case == "deflate":
        return "deflate", _deflate(_MESSAGE)
    if case == "raw deflate":
        return "deflate", _deflate(_MESSAGE, raw=True)
    if case == "gzip at the cap":
        return "gzip", gzip.compress(_AT_CAP, 1)
    if case == "gzip one byte over":
        return "gzip", gzip.compress(_AT_CAP + b" ", 1)
    if case == "identity at the cap":
        return "identity", _AT_CAP
    if case == "identity one byte over":
        return "", _AT_CAP + b" "
    if case == "truncated gzip":
        return "gzip", gzip.compress(_MESSAGE)[:-8]
    if case == "data after gzip":
        return "gzip", gzip.compress(_MESSAGE) + b"junk"
    if case == "invalid gzip":
        return "gzip", b"not gzip at all"
    return case, _MESSAGE  # an encoding that is not read: br, zstd, compress, an unknown one


# case, status -> None (the message is read) or what the error says and whether to retry
ENCODED_ANSWERS: list[tuple[str, int, tuple[str, bool] | None]] = [
    ("stacked gzip", 200, ("content-encoding 'gzip, gzip'", False)),
    ("gzip bomb", 200, ("answered more than 16 MiB", False)),
    ("gzip error bomb", 500, ("answered HTTP 500", True)),
    ("stacked error", 503, ('answered HTTP 503: "(not read: content-encoding', True)),
    ("gzip", 200, None),
    ("x-gzip", 200, None),
    ("deflate", 200, None),
    ("raw deflate", 200, None),
    ("gzip at the cap", 200, None),
    ("gzip one byte over", 200, ("answered more than 16 MiB", False)),
    ("identity at the cap", 200, None),
    ("identity one byte over", 200, ("answered more than 16 MiB", False)),
    ("truncated gzip", 200, ("ends early", False)),
    ("data after gzip", 200, ("data after the end", False)),
    ("invalid gzip", 200, ("invalid data", False)),
    ("br", 200, ("content-encoding 'br'", False)),
    ("zstd", 200, ("content-encoding 'zstd'", False)),
    ("bogus", 200, ("content-encoding 'bogus'", False)),
    ("br", 429, ("answered HTTP 429: \"(not read: content-encoding 'br'", True)),
]


class _RawChunks(httpx.AsyncByteStream):
    """The wire bytes in network-sized reads (httpcore reads up to 64 KiB at a time)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._data), 65_536):
            yield self._data[start : start + 65_536]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "status", "error"), ENCODED_ANSWERS, ids=[f"{a[0]} {a[1]}" for a in ENCODED_ANSWERS]
)
async def test_an_encoded_answer_is_inflated_within_the_bound_or_refused(
    case: str, status: int, error: tuple[str, bool] | None
) -> None:
    encoding, wire = _wire(case)
    asked: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("accept-encoding"))
        headers = {"content-encoding": encoding} if encoding else {}
        return httpx.Response(status, headers=headers, stream=_RawChunks(wire))

    model = AnthropicModel(
        "test-key", client=httpx.AsyncClient(transport=httpx.MockTransport(handle))
    )
    tracemalloc.start()
    try:
        if error is None:
            assert await model.respond([], []) == {"content": [], "stop_reason": "end_turn"}
        else:
            with pytest.raises(ModelAPIError, match=re.escape(error[0])) as raised:
                await model.respond([], [])
            assert (raised.value.code, raised.value.status, raised.value.retryable) == (
                "model_api",
                status,
                error[1],
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The bound holds host memory: the answer kept (once as pieces, once joined) and one
    # network read, never the tens of MiB a bomb inflates to.
    assert peak < 2 * MAX_ANSWER_BYTES + (4 << 20)
    if error is not None:
        assert peak < MAX_ANSWER_BYTES + (4 << 20)
    assert asked == ["identity"]
