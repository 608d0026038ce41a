"""A live model loop over the Anthropic Messages API, for ``airlock chat``.

The loop is the same as a replay's: the model's tool_use blocks go to
:func:`~airlock.handle_turn` and the answers become the next user message, until the model
stops asking for tools. Only the HTTP call is live, and it goes through an injectable
``httpx.AsyncClient`` so tests drive the loop with ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol

import anyio
import httpx

from airlock.frontends._call_arguments import MAX_ARGUMENT_DEPTH, too_deep
from airlock.frontends._provider_wire import MalformedBlockError, anthropic_tools
from airlock.frontends._providers import handle_turn
from airlock.frontends._replay import Transcript, content_problem
from airlock.harness import ModelResult, ModelToolSurface
from airlock.policies import AirlockError
from airlock.tools import BodyOverCapError, UnreadableBodyError, read_body

__all__ = [
    "ANTHROPIC_URL",
    "DEFAULT_MODEL",
    "RESPOND_DEADLINE_S",
    "AnthropicModel",
    "ModelAPIError",
    "PausedWrites",
    "chat_loop",
]

ANTHROPIC_URL: Final = "https://api.anthropic.com/v1/messages"
ANTHROPIC_VERSION: Final = "2023-06-01"
DEFAULT_MODEL: Final = "claude-sonnet-4-5"
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
"""The most bytes of one answer read from the model API (a message of 4096 output tokens
is a few tens of kilobytes), counted after inflating its one ``gzip`` or ``deflate`` layer if
any; more is refused, unread."""
RESPOND_DEADLINE_S: Final = 300.0
"""The most seconds one answer of the model API is waited for, from sending the request to
its body's last byte. The client's timeout bounds each read only: an answer sent a byte at a
time would never end."""
_ERROR_BYTES: Final = 4096  # of an answer that is an HTTP error: enough to quote its start


class ModelAPIError(AirlockError):
    """The model provider refused or failed a request; :attr:`status` is its HTTP status
    (None when no answer arrived). Rate limits and server errors are retryable."""

    code = "model_api"

    def __init__(self, message: str, *, status: int | None, retryable: bool) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable  # type: ignore[misc]  # per instance: depends on status


class AnthropicModel:
    """One Anthropic model, called over HTTPS with an API key.

    Args:
        api_key: the key (from the environment; never logged, never sent to a tool).
        model: the model name.
        client: the HTTP client (tests pass one with a mock transport).
        max_tokens: the most tokens one answer may have.
        deadline: the most seconds one answer is waited for, whole
            (:data:`RESPOND_DEADLINE_S`).
    """

    def __init__(
        self,
        api_key: str,
        *,
        model: str = DEFAULT_MODEL,
        client: httpx.AsyncClient | None = None,
        max_tokens: int = 4096,
        system: str = "",
        deadline: float = RESPOND_DEADLINE_S,
    ) -> None:
        self.model = model
        self.deadline = deadline
        self.max_tokens = max_tokens
        self.system = system
        self._key = api_key
        self._client = client or httpx.AsyncClient(timeout=120.0)

    async def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The model's next message.

        Raises:
            ModelAPIError: the request failed or its answer did not end within
                :attr:`deadline` seconds (both retryable), or the answer is larger than
                :data:`MAX_ANSWER_BYTES`, no JSON that can be read, no message, a message
                nested too deep to be answered and sent back, one with a block that is no
                object or a text block without a string ``text``, or one that stops for
                ``tool_use`` with no tool_use block, or whose ``Content-Encoding`` is
                stacked, not ``gzip`` or ``deflate``, or not valid in it.
        """
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "tools": tools,
            "messages": messages,
        }
        if self.system:
            request["system"] = self.system
        headers = {
            "x-api-key": self._key,
            "anthropic-version": ANTHROPIC_VERSION,
            # Compressed answers are inflated by read_body, one layer and within the cap.
            "accept-encoding": "identity",
        }
        try:
            with anyio.fail_after(self.deadline):
                async with self._client.stream(
                    "POST", ANTHROPIC_URL, json=request, headers=headers
                ) as response:
                    status = response.status_code
                    body = await _read(response)
        except TimeoutError:
            raise ModelAPIError(
                f"the model API did not finish its answer within {self.deadline:g} s; try again",
                status=None,
                retryable=True,
            ) from None
        except httpx.HTTPError as exc:
            raise ModelAPIError(
                f"the model API did not answer ({type(exc).__name__}); try again",
                status=None,
                retryable=True,
            ) from exc
        if status != 200:
            quoted = body.decode("utf-8", "replace")[:300]
            raise ModelAPIError(
                f"the model API answered HTTP {status}: {quoted!r}",
                status=status,
                retryable=status == 429 or status >= 500,
            )
        message = _message(body, status)
        if message.get("stop_reason") == "tool_use" and not any(
            block.get("type") == "tool_use" for block in message["content"]
        ):
            # Answered with an empty user message, the next request would be refused.
            raise ModelAPIError(
                "the model API answered stop_reason 'tool_use' but no tool_use block",
                status=status,
                retryable=False,
            )
        return message

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


async def _read(response: httpx.Response) -> bytes:
    """The body of ``response``: all of an answer, the start of an error.

    Raises:
        ModelAPIError: the answer is larger than :data:`MAX_ANSWER_BYTES` once inflated, or
            in an encoding that is not read.
    """
    status = response.status_code
    try:
        if status != 200:
            return (await read_body(response, _ERROR_BYTES, refuse=False))[0]
        return (await read_body(response, MAX_ANSWER_BYTES, refuse=True))[0]
    except UnreadableBodyError as exc:
        if status != 200:  # the status is the error; its body is only quoted
            return f"(not read: {exc.message})".encode()
        raise ModelAPIError(
            f"the model API answered a body that cannot be read: {exc.message}",
            status=status,
            retryable=False,
        ) from None
    except BodyOverCapError:
        raise ModelAPIError(
            f"the model API answered more than {MAX_ANSWER_BYTES // (1024 * 1024)} MiB; "
            "its message was not read",
            status=status,
            retryable=False,
        ) from None


def _message(body: bytes, status: int) -> dict[str, Any]:
    """The message ``body`` holds.

    Raises:
        ModelAPIError: it is no JSON that can be read, no message, a message nested too
            deep to be answered and sent back, or one whose blocks are malformed.
    """
    try:
        message: object = json.loads(body)
    except RecursionError:
        raise ModelAPIError(
            "the model API answered JSON nested too deep to read", status=status, retryable=False
        ) from None
    except ValueError as exc:  # not JSON, or an integer over the interpreter's digit limit
        raise ModelAPIError(
            f"the model API answered something that is not readable JSON: {exc}"[:300],
            status=status,
            retryable=False,
        ) from None
    # A tool_use block's input sits three levels below the message (content, the block,
    # input). A message deeper than that holds a call that is refused anyway, and it
    # could not be sent back in the next request: json.dumps recurses.
    levels = MAX_ARGUMENT_DEPTH + 3
    if body.count(b"[") + body.count(b"{") > levels and too_deep(message, levels=levels):
        raise ModelAPIError(
            f"the model API answered a message nested deeper than {levels} levels",
            status=status,
            retryable=False,
        )
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise ModelAPIError(
            "the model API answered something that is not a message",
            status=status,
            retryable=False,
        )
    problem = content_problem(message["content"])
    if problem is not None:
        raise ModelAPIError(
            f"the model API answered a message whose {problem}", status=status, retryable=False
        )
    return message


class PausedWrites(Protocol):
    """What :func:`chat_loop` needs to wait for a session's paused writes (a
    :class:`~airlock.Session` is one)."""

    def pending(self) -> Sequence[object]:
        """The writes still waiting for a decision or a commit."""
        ...

    async def settle_writes(self) -> list[ModelResult]:
        """Commit the writes approved meanwhile; the outcomes of those settled."""
        ...

    def take_settled(self) -> list[ModelResult]:
        """The settled outcomes the model was not told yet (each once)."""
        ...


async def chat_loop(
    model: AnthropicModel,
    surface: ModelToolSurface,
    prompt: str,
    *,
    max_turns: int = 20,
    on_message: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    writes: PausedWrites | None = None,
    poll: float = 1.0,
) -> Transcript:
    """Talk with ``model`` until it stops calling tools (or ``max_turns`` model turns).

    With ``writes`` (the session), a model that stops while writes it asked for wait for a
    person is not left there: the loop waits, committing each write once it is approved
    (checking every ``poll`` seconds, until each is committed, denied or expired, or its
    send got no definite answer a few times: then the model is told its outcome is unknown,
    ``ambiguous_write``, and nothing waits on it any more), and tells the model their
    outcomes in the next user message.

    Raises:
        ModelAPIError: a request to the model failed, or its answer holds a malformed tool
            call (one without an id, two of one id, a block of no known type: see
            :func:`~airlock.handle_turn`); none of that turn's calls ran.
    """
    transcript = Transcript(messages=[{"role": "user", "content": prompt}])
    tools = anthropic_tools(surface.tools())
    for _ in range(max_turns):
        reply = await model.respond(transcript.messages, tools)
        said = {"role": "assistant", "content": reply["content"]}
        transcript.messages.append(said)
        if on_message is not None:
            await on_message(said)
        if reply.get("stop_reason") == "tool_use":
            content: list[dict[str, Any]] = await _answered(surface, reply["content"])
        elif writes is not None and (settled := await _settled(writes, poll)):
            text = "Writes settled since your last turn: " + json.dumps(
                [json.loads(result.content) for result in settled], separators=(",", ":")
            )
            content = [{"type": "text", "text": text}]
        else:
            break
        answered = {"role": "user", "content": content}
        transcript.messages.append(answered)
        if on_message is not None:
            await on_message(answered)
    return transcript


async def _answered(surface: ModelToolSurface, blocks: list[Any]) -> list[dict[str, Any]]:
    """:func:`handle_turn`, with a malformed call being the model API's failure: the
    user's command and files are not at fault (a replay's bad call is its file's, and stays
    a :class:`MalformedBlockError`)."""
    try:
        return await handle_turn(surface, blocks)
    except MalformedBlockError as exc:
        raise ModelAPIError(
            f"the model API answered a malformed tool call: {exc.reason}"[:500],
            status=200,
            retryable=False,
        ) from None


async def _settled(writes: PausedWrites, poll: float) -> list[ModelResult]:
    """Wait until a paused write is settled, and return every outcome the model was not
    told yet (none when no write waits)."""
    while True:
        await writes.settle_writes()
        told = writes.take_settled()
        if told or not writes.pending():
            return told
        await anyio.sleep(poll)
