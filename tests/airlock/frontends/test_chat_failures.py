"""The live model loop against a model API that answers too slowly or with malformed tool
calls: each ends in a typed :class:`ModelAPIError`, never a wait without end or another
error class. A fake API listens on loopback, so the client's real transport is driven."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

import airlock.frontends._chat as chat_module
from airlock.frontends import AnthropicModel, ModelAPIError, chat_loop
from airlock.frontends._chat import RESPOND_DEADLINE_S
from tests.airlock.fake_surface import EchoSurface

DEADLINE = 1.0
MARGIN = 2.0  # a loaded machine's share; the unbounded wait was 120 s per read, or forever
DONE = json.dumps(
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "done " * 40}],
        "stop_reason": "end_turn",
    }
).encode()
Serve = Callable[[SocketStream], Awaitable[None]]


async def _request(stream: SocketStream) -> None:
    """Read the request's head (its body is not looked at)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()


def _head(length: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (
        length
    )


async def trickle_body(stream: SocketStream) -> None:
    await _request(stream)
    await stream.send(_head(len(DONE)))
    for byte in DONE:  # a valid answer, one byte every 0.1 s: 20 s in all
        await stream.send(bytes([byte]))
        await anyio.sleep(0.1)


async def trickle_head(stream: SocketStream) -> None:
    await _request(stream)
    for byte in _head(len(DONE)) + DONE:
        await stream.send(bytes([byte]))
        await anyio.sleep(0.1)


async def head_only(stream: SocketStream) -> None:
    await _request(stream)
    await stream.send(_head(len(DONE)))
    await anyio.sleep_forever()


async def silent(stream: SocketStream) -> None:
    await _request(stream)
    await anyio.sleep_forever()


async def prompt(stream: SocketStream) -> None:
    await _request(stream)
    await stream.send(_head(len(DONE)) + DONE)


@asynccontextmanager
async def fake_api(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """A model API on a loopback port that answers each request with ``serve``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    monkeypatch.setattr(chat_module, "ANTHROPIC_URL", f"http://127.0.0.1:{port}/v1/messages")

    async def handle(stream: SocketStream) -> None:
        # The client giving up is what the test waits for.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async with stream:
                await serve(stream)

    async with listener, anyio.create_task_group() as group:  # closed once serving ended
        group.start_soon(listener.serve, handle)
        try:
            yield
        finally:
            group.cancel_scope.cancel()


# (how the API answers) -> what the loop ends with: None for the model's message
SLOW_ANSWERS: list[tuple[str, Serve, str | None]] = [
    ("a valid answer one byte at a time", trickle_body, "did not finish its answer within 1 s"),
    ("its head one byte at a time", trickle_head, "did not finish its answer within 1 s"),
    ("a head, then no body", head_only, "did not finish its answer within 1 s"),
    ("no answer at all", silent, "did not finish its answer within 1 s"),
    ("control: a prompt answer", prompt, None),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("serve", "fragment"), [a[1:] for a in SLOW_ANSWERS], ids=[a[0] for a in SLOW_ANSWERS]
)
async def test_one_answer_is_waited_for_at_most_the_deadline(
    monkeypatch: pytest.MonkeyPatch, serve: Serve, fragment: str | None
) -> None:
    async with fake_api(serve, monkeypatch):
        model = AnthropicModel("test-key", deadline=DEADLINE)
        started = time.monotonic()
        try:
            with anyio.fail_after(DEADLINE + MARGIN):  # before the fix: still waiting
                if fragment is None:
                    transcript = await chat_loop(model, EchoSurface(), "hi")
                    assert transcript.messages[-1]["content"][0]["text"].startswith("done")
                    return
                with pytest.raises(ModelAPIError, match=re.escape(fragment)) as raised:
                    await chat_loop(model, EchoSurface(), "hi")
        finally:
            await model.aclose()
    assert time.monotonic() - started < DEADLINE + MARGIN
    assert (raised.value.code, raised.value.status, raised.value.retryable) == (
        "model_api",
        None,
        True,
    )


def test_the_deadline_of_one_answer_is_a_few_minutes_by_default() -> None:
    model = AnthropicModel("test-key", client=httpx.AsyncClient())
    assert model.deadline == RESPOND_DEADLINE_S == 300


def _tool_use(call_id: object = "toolu_1", **more: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "name": "billing_invoice_get", "input": {"invoice_id": "i"}}
    return {**block, **({} if call_id is None else {"id": call_id}), **more}


# (the answer's content, stop_reason tool_use) -> what the error says
MALFORMED_CALLS: list[tuple[str, list[object], str]] = [
    ("a call without an id", [_tool_use(None)], "needs a non-empty string 'id', got None"),
    ("a call with an empty id", [_tool_use("")], "needs a non-empty string 'id'"),
    ("a call with a number for an id", [_tool_use(7)], "non-empty string 'id', got a number"),
    ("two calls of one id", [_tool_use(), _tool_use()], "share the id 'toolu_1'"),
    (
        "an unknown block next to a call",
        [{"type": "image", "source": {}}, _tool_use()],
        "unknown block type 'image'",
    ),
    (
        "a call of another format",
        [_tool_use(), {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"}],
        "mixes tool call formats",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "fragment"), [a[1:] for a in MALFORMED_CALLS], ids=[a[0] for a in MALFORMED_CALLS]
)
async def test_a_malformed_tool_call_of_the_model_is_a_model_api_error(
    content: list[object], fragment: str
) -> None:
    answer = {"type": "message", "role": "assistant", "content": content}
    answer["stop_reason"] = "tool_use"
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    )
    surface = EchoSurface()
    model = AnthropicModel("test-key", client=client)
    with pytest.raises(ModelAPIError, match=re.escape(fragment)) as raised:
        await chat_loop(model, surface, "hi")
    assert str(raised.value).startswith("the model API answered a malformed tool call: ")
    assert (raised.value.code, raised.value.status, raised.value.retryable) == (
        "model_api",
        200,
        False,
    )
    assert surface.calls == []  # a malformed turn runs none of its calls
