"""The guest half of the bridge: the ``tools`` namespace a sandboxed program calls.

Standard library only; shipped in the image next to the runner. Each read tool the run may
use from code becomes a function with a real signature and docstring::

    invoice = tools.billing_invoice_get(invoice_id="in_42")            # one call
    invoices = await asyncio.gather(*(tools.billing_invoice_get.aio(invoice_id=i) for i in ids))
    invoices = tools.billing_invoice_get.batch([{"invoice_id": i} for i in ids])

A refused or failed call raises the ``airlock_errors`` class of its code, which the program
can inspect (``tools.NotFound``, ``tools.InvalidInput`` with its ``issues``, ...). A tool the
run was not given (a write tool, one hidden from the principal, a name that does not exist) is
``tools.UnknownTool`` as soon as the program reaches for it, the same for each, and nothing is
sent. When the host ends the run (a limit, a protocol error), calls raise ``RunAborted``,
which derives from ``BaseException`` so that ``except Exception:`` in a program cannot swallow
it. Frames and their types are the shared contract in ``airlock_wire``.
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_wire as wire

_HEADER = struct.Struct(wire.HEADER_FORMAT)


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
        self._aborted: errors.RunAborted | None = None

    def fileno(self) -> int:
        """The bridge socket's descriptor (the runner keeps it open, and closes the rest)."""
        return self._sock.fileno()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
        with self._send_lock:
            self._sock.sendall(_HEADER.pack(len(body)) + body)

    def recv(self) -> dict[str, Any]:
        (size,) = _HEADER.unpack(self._read_exactly(_HEADER.size))
        if size > wire.MAX_HOST_FRAME_BYTES:
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
                    self._abort(
                        errors.RunAborted("protocol_error", "the bridge to the host is closed")
                    )
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
                self._abort(errors.RunAborted("protocol_error", "the bridge to the host is closed"))
            finally:
                with self._state_lock:
                    self._reader_running = False

    def _dispatch(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == wire.ABORT:
            self._abort(errors.RunAborted(str(frame.get("code")), str(frame.get("message"))))
            return
        if kind != wire.RESULT:
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
            future.set_exception(errors.error_from_wire(frame.get("error")))

    def _abort(self, signal: errors.RunAborted) -> None:
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


class _HostDefault:
    """Stands for a default the host's input model computes (not shown in a signature)."""

    def __repr__(self) -> str:
        return "..."


_HOST_DEFAULT = _HostDefault()


class ToolFunction:
    """One tool, callable from a program: ``f(...)``, ``await f.aio(...)``, ``f.batch([...])``."""

    def __init__(self, connection: Connection, stub: dict[str, Any]) -> None:
        self._connection = connection
        self.__name__ = self.name = str(stub["name"])
        self.__doc__ = str(stub.get("doc", ""))
        params: list[inspect.Parameter] = []
        kind: inspect._ParameterKind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        for p in stub.get("params", []):
            required = p.get("required", True) is not False
            if not required:
                # Left out of the call when not given: the host applies the input model's
                # default, exactly as for a direct call. The value here is for reading only.
                default = p.get("default") if p.get("shown_default") else _HOST_DEFAULT
            elif params and params[-1].default is not inspect.Parameter.empty:
                kind = inspect.Parameter.KEYWORD_ONLY  # a required one after an optional one
            params.append(
                inspect.Parameter(
                    str(p["name"]),
                    kind,
                    annotation=str(p.get("annotation", "object")),
                    default=inspect.Parameter.empty if required else default,
                )
            )
        self.__signature__ = inspect.Signature(
            params, return_annotation=stub.get("returns", "dict")
        )

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise errors.InvalidInput(
                f"{self.name}{self.__signature__}: {exc}",
                issues=[{"field": "", "reason": str(exc)}],
            ) from None
        return dict(bound.arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self._arguments(args, kwargs)
        future = self._connection.submit({"type": wire.CALL, "tool": self.name, "args": arguments})
        return self._connection.wait(future)

    def aio(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """The same call as an awaitable, so independent calls can run concurrently."""
        arguments = self._arguments(args, kwargs)
        future = self._connection.submit(
            {"type": wire.CALL, "tool": self.name, "args": arguments}, awaited=True
        )
        return asyncio.wrap_future(future)

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Many calls of this tool in one frame; results in the order of ``items``.

        A failed item raises its error, or with ``return_errors=True`` stands in the list as
        a ``ToolError`` instance.
        """
        arguments = [self._arguments((), dict(item)) for item in items]
        future = self._connection.submit(
            {"type": wire.BATCH, "tool": self.name, "items": arguments}
        )
        results = []
        for entry in self._connection.wait(future):
            if entry.get("ok"):
                results.append(entry.get("value"))
                continue
            error = errors.error_from_wire(entry.get("error"))
            if not return_errors:
                raise error
            results.append(error)
        return results

    def __repr__(self) -> str:
        return f"<tool {self.name}{self.__signature__}>"


_LISTED_NAMES = 30


def unknown_tool(name: str, offered: list[str]) -> errors.UnknownTool:
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
    return errors.UnknownTool(
        f"no tool named {name!r} is available to this program; {choice}. "
        "Write tools are never callable from code: return what should change as the "
        "program's value and call the write tool directly.",
        name=name,
    )


class Tools:
    """The ``tools`` namespace: one attribute per tool, plus ``log()`` and the error classes.

    Its members that are not tools are ``airlock_wire.NAMESPACE_MEMBERS``, which the host's
    static check of programs reads.

    Any other public name is a tool this run was not given: reaching for it raises
    ``UnknownTool`` (never ``None``, which RestrictedPython's attribute guard would
    otherwise hand back, and which failed later as "'NoneType' object is not callable").
    """

    ToolError = errors.ToolError
    UnknownTool = errors.UnknownTool
    InvalidInput = errors.InvalidInput
    Denied = errors.Denied
    NotFound = errors.NotFound
    Conflict = errors.Conflict
    RateLimited = errors.RateLimited
    Upstream = errors.Upstream
    Timeout = errors.Timeout
    AmbiguousWrite = errors.AmbiguousWrite
    ResultTooLarge = errors.ResultTooLarge
    ApprovalMismatch = errors.ApprovalMismatch
    PreviewExpired = errors.PreviewExpired
    NeedsApproval = errors.NeedsApproval
    LimitExceeded = errors.LimitExceeded
    ProtocolError = errors.ProtocolError

    def __init__(self, connection: Connection | None, stubs: list[dict[str, Any]]) -> None:
        self._connection = connection
        self._refused: set[str] = set()
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
        if self._connection is not None and name not in self._refused:
            # The host records what a program tried to reach, not only what it was given.
            self._refused.add(name)
            self._connection.send({"type": wire.REFUSED, "tool": name[: wire.MAX_TOOL_NAME_CHARS]})
        raise unknown_tool(name, self._names)

    def log(self, message: str) -> None:
        """Send a line to the operator's log (not to the model)."""
        if self._connection is not None:
            self._connection.send({"type": wire.LOG, "message": str(message)[: wire.MAX_LOG_CHARS]})

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<tools: {', '.join(sorted(self._names)) or 'none'}>"


__all__ = ["Connection", "ToolFunction", "Tools", "unknown_tool"]
