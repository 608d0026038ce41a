"""The guest half of the bridge: the ``tools`` namespace a sandboxed program calls.

Standard library only; shipped in the image next to the runner. Each read tool the run may
use from code becomes a function with a real signature and docstring::

    invoice = tools.billing_invoice_get(invoice_id="in_42")            # one call
    invoices = await asyncio.gather(*(tools.billing_invoice_get.aio(invoice_id=i) for i in ids))
    invoices = tools.billing_invoice_get.batch([{"invoice_id": i} for i in ids])

A refused or failed call raises a :class:`ToolError` subclass whose ``code`` the program can
inspect (``tools.NotFound``, ``tools.Denied``, ...). A tool the run was not given (a write
tool, one hidden from the principal, a name that does not exist) is ``tools.UnknownTool`` as
soon as the program reaches for it, the same for each, and nothing is sent. When the host ends
the run (a limit, a protocol error), calls raise :class:`RunAborted`, which derives from
``BaseException`` so that ``except Exception:`` in a program cannot swallow it.

Frames (4-byte big-endian length, then a JSON object), guest to host: ``hello``, ``call``
``{id, tool, args}``, ``batch`` ``{id, tool, items}``, ``log`` ``{message}``, ``done``
``{result}``; host to guest: ``run``, ``result`` ``{id, ok, value | error}``, ``abort``
``{code, message}``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import socket
import struct
import threading
from concurrent.futures import Future
from typing import Any

MAX_FRAME_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ToolError(Exception):
    """A tool call failed; ``code`` is stable, ``retryable`` says whether to try again."""

    code = "tool_error"

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retryable = retryable


class UnknownTool(ToolError, AttributeError):
    """No tool of that name is available to this program: missing, hidden, or a write.

    Also an ``AttributeError``, so ``hasattr(tools, name)`` and ``getattr(tools, name, None)``
    answer as they do for any object.
    """

    code = "unknown_tool"


class InvalidInput(ToolError):
    code = "invalid_input"


class Denied(ToolError):
    code = "denied"


class NotFound(ToolError):
    code = "not_found"


class Conflict(ToolError):
    code = "conflict"


class RateLimited(ToolError):
    code = "rate_limited"


class Upstream(ToolError):
    code = "upstream"


class Timeout(ToolError):
    code = "timeout"


class ResultTooLarge(ToolError):
    code = "result_too_large"


class LimitExceeded(ToolError):
    code = "limit_exceeded"


ERRORS: dict[str, type[ToolError]] = {
    cls.code: cls
    for cls in (
        UnknownTool,
        InvalidInput,
        Denied,
        NotFound,
        Conflict,
        RateLimited,
        Upstream,
        Timeout,
        ResultTooLarge,
        LimitExceeded,
    )
}


class RunAborted(BaseException):
    """The host ended this run. Derives from BaseException: programs cannot swallow it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def error_from_wire(error: Any) -> ToolError:
    """Rebuild the typed error a host sent; unknown codes become a plain ToolError."""
    if not isinstance(error, dict):
        return ToolError("malformed error from the host")
    code = str(error.get("code", "tool_error"))
    message = str(error.get("message", ""))
    retryable = bool(error.get("retryable", False))
    return ERRORS.get(code, ToolError)(message, code=code, retryable=retryable)


class Connection:
    """Frames over the bridge socket, with results matched to pending calls by id.

    Results may come back in any order. There is no permanent reader thread: a thread that
    waits for a synchronous result reads the socket itself (one thread switch fewer per
    call), handing other calls' results to their futures; while awaitable calls are pending,
    a reader thread reads for the event loop and exits when none are left.
    """

    def __init__(self, path: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._pending: dict[int, Future[Any]] = {}
        self._awaited: set[int] = set()
        self._reader_running = False
        self._ids = itertools.count(1)
        self._aborted: RunAborted | None = None

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
        with self._send_lock:
            self._sock.sendall(_HEADER.pack(len(body)) + body)

    def recv(self) -> dict[str, Any]:
        (size,) = _HEADER.unpack(self._read_exactly(_HEADER.size))
        if size > MAX_FRAME_BYTES:
            raise ConnectionError(f"frame of {size} bytes is over the limit")
        message = json.loads(self._read_exactly(size))
        if not isinstance(message, dict):
            raise ConnectionError("a frame must hold a JSON object")
        return message

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._sock.recv(min(size - len(chunks), 1 << 20))
            if not chunk:
                raise ConnectionError("the host closed the bridge")
            chunks += chunk
        return bytes(chunks)

    # -- calls ----------------------------------------------------------------------------

    def submit(self, message: dict[str, Any], *, awaited: bool = False) -> Future[Any]:
        """Send a call or batch frame; the future holds its result.

        ``awaited`` marks a call an event loop will wait for: a reader thread then reads.
        """
        future: Future[Any] = Future()
        with self._state_lock:
            if self._aborted is not None:
                raise self._aborted
            call_id = next(self._ids)
            self._pending[call_id] = future
            if awaited:
                self._awaited.add(call_id)
                if not self._reader_running:
                    self._reader_running = True
                    threading.Thread(target=self._read_for_loop, daemon=True).start()
        self.send({**message, "id": call_id})
        return future

    def wait(self, future: Future[Any]) -> Any:
        """The result of a call this thread waits for, reading the socket when nobody is."""
        while not future.done():
            if self._read_lock.acquire(blocking=False):
                try:
                    while not future.done():
                        self._dispatch(self.recv())
                except (ConnectionError, OSError, ValueError):
                    self._abort(RunAborted("protocol_error", "the bridge to the host is closed"))
                finally:
                    self._read_lock.release()
            else:
                # Another thread reads and will resolve this future, or stop reading soon.
                try:
                    return future.result(timeout=0.001)
                except TimeoutError:
                    continue
        return future.result()

    def _read_for_loop(self) -> None:
        with self._read_lock:
            try:
                while True:
                    with self._state_lock:
                        if not self._awaited or self._aborted is not None:
                            self._reader_running = False
                            return
                    self._dispatch(self.recv())
            except (ConnectionError, OSError, ValueError):
                self._abort(RunAborted("protocol_error", "the bridge to the host is closed"))
            finally:
                with self._state_lock:
                    self._reader_running = False

    def _dispatch(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "abort":
            self._abort(RunAborted(str(frame.get("code")), str(frame.get("message"))))
            return
        if kind != "result":
            return
        with self._state_lock:
            call_id = frame.get("id")
            future = self._pending.pop(call_id, None)  # type: ignore[arg-type]
            self._awaited.discard(call_id)
        if future is None:
            return
        if frame.get("ok"):
            future.set_result(frame.get("value"))
        else:
            future.set_exception(error_from_wire(frame.get("error")))

    def _abort(self, signal: RunAborted) -> None:
        with self._state_lock:
            if self._aborted is None:
                self._aborted = signal
            pending, self._pending = self._pending, {}
            self._awaited.clear()
        for future in pending.values():
            if not future.done():
                future.set_exception(signal)


_JSON_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}


class ToolFunction:
    """One tool, callable from a program: ``f(...)``, ``await f.aio(...)``, ``f.batch([...])``."""

    def __init__(self, connection: Connection, stub: dict[str, Any]) -> None:
        self._connection = connection
        self.__name__ = self.name = str(stub["name"])
        self.__doc__ = str(stub.get("doc", ""))
        params = [
            inspect.Parameter(
                str(p["name"]),
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=str(p.get("annotation", "object")),
            )
            for p in stub.get("params", [])
        ]
        self.__signature__ = inspect.Signature(
            params, return_annotation=stub.get("returns", "dict")
        )

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidInput(f"{self.name}{self.__signature__}: {exc}") from None
        return dict(bound.arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self._arguments(args, kwargs)
        future = self._connection.submit({"type": "call", "tool": self.name, "args": arguments})
        return self._connection.wait(future)

    def aio(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """The same call as an awaitable, so independent calls can run concurrently."""
        arguments = self._arguments(args, kwargs)
        future = self._connection.submit(
            {"type": "call", "tool": self.name, "args": arguments}, awaited=True
        )
        return asyncio.wrap_future(future)

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Many calls of this tool in one frame; results in the order of ``items``.

        A failed item raises its error, or with ``return_errors=True`` stands in the list as
        a :class:`ToolError` instance.
        """
        arguments = [self._arguments((), dict(item)) for item in items]
        future = self._connection.submit({"type": "batch", "tool": self.name, "items": arguments})
        results = []
        for entry in self._connection.wait(future):
            if entry.get("ok"):
                results.append(entry.get("value"))
                continue
            error = error_from_wire(entry.get("error"))
            if not return_errors:
                raise error
            results.append(error)
        return results

    def __repr__(self) -> str:
        return f"<tool {self.name}{self.__signature__}>"


_LISTED_NAMES = 30


def unknown_tool(name: str, offered: list[str]) -> UnknownTool:
    """The error for a tool this run was not given, naming it and what the run can call.

    Write tools, tools hidden from the principal and names that do not exist get the same
    answer: the program learns nothing about which one it was.
    """
    shown = sorted(offered)[:_LISTED_NAMES]
    if not shown:
        choice = "this run has no tools"
    else:
        more = ", ..." if len(offered) > len(shown) else ""
        choice = f"call one of: {', '.join(shown)}{more}"
    error = UnknownTool(
        f"no tool named {name!r} is available to this program; {choice}. "
        "Write tools are never callable from code: return what should change as the "
        "program's value and call the write tool directly."
    )
    error.name = name
    return error


class Tools:
    """The ``tools`` namespace: one attribute per tool, plus the error classes.

    Any other public name is a tool this run was not given: reaching for it raises
    :class:`UnknownTool` (never ``None``, which RestrictedPython's attribute guard would
    otherwise hand back, and which failed later as "'NoneType' object is not callable").
    """

    ToolError = ToolError
    UnknownTool = UnknownTool
    InvalidInput = InvalidInput
    Denied = Denied
    NotFound = NotFound
    Conflict = Conflict
    RateLimited = RateLimited
    Upstream = Upstream
    Timeout = Timeout
    ResultTooLarge = ResultTooLarge
    LimitExceeded = LimitExceeded

    def __init__(self, connection: Connection | None, stubs: list[dict[str, Any]]) -> None:
        self._connection = connection
        self._names = []
        for stub in stubs:
            if connection is None:
                break
            function = ToolFunction(connection, stub)
            setattr(self, function.name, function)
            self._names.append(function.name)

    def __getattr__(self, name: str) -> Any:
        # Only reached when no tool, error class or method has that name.
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise unknown_tool(name, self._names)

    def log(self, message: str) -> None:
        """Send a line to the operator's log (not to the model)."""
        if self._connection is not None:
            self._connection.send({"type": "log", "message": str(message)[:2000]})

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<tools: {', '.join(sorted(self._names)) or 'none'}>"


__all__ = [
    "ERRORS",
    "Connection",
    "RunAborted",
    "ToolError",
    "ToolFunction",
    "Tools",
    "error_from_wire",
    "unknown_tool",
]
