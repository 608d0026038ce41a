"""The guest half of the bridge: the ``tools`` namespace a sandboxed program calls.

Standard library only; shipped in the image next to the runner. Each read tool the run may
use from code becomes a function with a real signature and docstring::

    invoice = tools.billing_invoice_get(invoice_id="in_42")            # one call
    invoices = await asyncio.gather(*(tools.billing_invoice_get.aio(invoice_id=i) for i in ids))
    invoices = tools.billing_invoice_get.batch([{"invoice_id": i} for i in ids])

A write the run may *propose* (its contract and the run's grant allow it) sits under
``tools.propose``; a proposal changes nothing, the host prepares it and its preview waits, with
the program's other proposals, for a person to approve them as one batch::

    handle = tools.propose.billing_refund_create(invoice_id="in_42", reason="duplicate")
    handle["preview_id"], handle["summary"]

A refused or failed call raises the ``airlock_errors`` class of its code, which the program
can inspect (``tools.NotFound``, ``tools.InvalidInput`` with its ``issues``, ...). A tool the
run was not given (a write tool, one hidden from the principal, a name that does not exist) is
``tools.UnknownTool`` as soon as the program reaches for it, the same for each, and nothing is
sent. When the host ends the run (a limit, a protocol error), calls raise ``RunAborted``,
which derives from ``BaseException`` so that ``except Exception:`` in a program cannot swallow
it. Frames and their types are the shared contract in ``airlock_wire``.

It is one module over 400 lines on purpose, for now: the connection and the namespace that
calls through it share one state (pending calls, the loop that reads for them, the abort that
fails them all), and the runner imports both from here before any program runs. Splitting the
connection into a guest module of its own is the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import socket
import struct
import threading
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_wire as wire

_HEADER = struct.Struct(wire.HEADER_FORMAT)
_RECV_BYTES = 256 * 1024
_BUSY_RETRY_S = 0.0005  # how soon a loop looks again while a waiting thread reads for it
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)  # one for every frame
_DECODER = json.JSONDecoder()


class Connection:
    """Frames over the bridge socket, with results matched to pending calls by id.

    Results may come back in any order. There is no permanent reader thread: a thread that
    waits for a synchronous result reads the socket itself (one thread switch fewer per
    call), handing other calls' results to their futures. Awaitable calls made on a running
    event loop are served by that loop itself: their frames leave together once per turn of
    the loop (one system call for all the calls a turn made), and while any is pending the
    loop watches the socket and resolves their futures in its own thread (no reader thread,
    no wake-up from another thread per result). Awaitable calls made while another running
    loop watches fall back to a reader thread, which exits when none are left.
    """

    def __init__(self, path: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._pending: dict[int, Future[Any] | asyncio.Future[Any]] = {}
        self._awaited: set[int] = set()
        self._reader_running = False
        self._ids = itertools.count(1)
        self._aborted: errors.RunAborted | None = None
        self._received = bytearray()  # read from the socket, not yet a whole frame
        self._scratch = memoryview(bytearray(_RECV_BYTES))
        self._outbox: list[bytes] = []  # frames of awaitable calls not sent yet
        self._flushing: asyncio.AbstractEventLoop | None = None  # where a flush is due
        self._watcher: asyncio.AbstractEventLoop | None = None  # the loop reading for them
        self._watched = 0  # awaitable calls of the watching loop not answered yet

    def fileno(self) -> int:
        """The bridge socket's descriptor (the runner keeps it open, and closes the rest)."""
        return self._sock.fileno()

    def close(self) -> None:
        """Close this end of the bridge (a kept runner's program process closes the
        connection it does not own)."""
        self._sock.close()

    def send(self, message: dict[str, Any]) -> None:
        self._send_frame(_encode(message))

    def _send_frame(self, frame: bytes) -> None:
        with self._send_lock:
            if self._outbox:  # awaitable calls queued before this frame leave first
                frame = b"".join(self._outbox) + frame
                self._outbox.clear()
            self._sock.sendall(frame)

    def recv(self) -> dict[str, Any]:
        """The next frame from the host, waiting for it (one reader at a time)."""
        while True:
            message = self._next_frame()
            if message is not None:
                return message
            self._fill(0)

    def _fill(self, flags: int) -> None:
        # Whatever the socket holds, up to the scratch buffer, in one system call.
        count = self._sock.recv_into(self._scratch, _RECV_BYTES, flags)
        if not count:
            raise ConnectionError("the host closed the bridge")
        self._received += self._scratch[:count]

    def _next_frame(self) -> dict[str, Any] | None:
        """The next whole frame already received, or ``None``."""
        received = self._received
        if len(received) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(received)
        if size > wire.MAX_HOST_FRAME_BYTES:
            raise ConnectionError(f"frame of {size} bytes is over the limit")
        end = _HEADER.size + size
        if len(received) < end:
            return None
        text = received[_HEADER.size : end].decode()
        if end == len(received):
            received.clear()
        else:
            del received[:end]
        message = _DECODER.decode(text)
        if not isinstance(message, dict):
            raise ConnectionError("a frame must hold a JSON object")
        return message

    # -- calls ----------------------------------------------------------------------------

    def call(self, message: dict[str, Any]) -> Any:
        """Send a call or batch frame and wait for its result (or raise its error).

        When no other thread reads the socket, this one sends and reads its own answer with
        blocking system calls: no future, no other thread, no selector (the loop of single
        calls a program makes pays for nothing else). Otherwise as :meth:`submit` and
        :meth:`wait`.
        """
        if not self._read_lock.acquire(blocking=False):
            return self.wait(self.submit(message))
        try:
            with self._state_lock:
                if self._aborted is not None:
                    raise self._aborted
                call_id = next(self._ids)
            message["id"] = call_id
            frame = _encode(message)  # (a value JSON cannot hold raises here, to the program)
            try:
                self._send_frame(frame)
                while True:
                    answer = self.recv()
                    if answer.get("id") == call_id and answer.get("type") == wire.RESULT:
                        break
                    self._dispatch(answer)  # another thread's result, or the host's abort
                    if self._aborted is not None:
                        raise self._aborted
            except (ConnectionError, OSError, ValueError):
                closed = errors.RunAborted("protocol_error", "the bridge to the host is closed")
                self._abort(closed)
                raise (self._aborted or closed) from None
        finally:
            self._read_lock.release()
        if answer.get("ok"):
            return answer.get("value")
        raise errors.error_from_wire(answer.get("error"))

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

    def submit_on_loop(
        self, message: dict[str, Any], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[Any] | None:
        """Queue a call or batch frame of an awaitable call made on the running ``loop``; the
        future holds its result. ``None`` when another running loop watches the socket (the
        caller then uses :meth:`submit` with ``awaited=True``)."""
        with self._state_lock:
            if self._aborted is not None:
                raise self._aborted
            watcher = self._watcher
            if watcher is not loop:
                if watcher is not None and not watcher.is_closed() and watcher.is_running():
                    return None
                # The last watcher stopped: its unanswered calls' results are read here now.
                self._watcher = loop
                loop.add_reader(self._sock.fileno(), self._on_readable, loop)
            call_id = next(self._ids)
            future: asyncio.Future[Any] = loop.create_future()
            self._pending[call_id] = future
            self._watched += 1
        message["id"] = call_id
        frame = _encode(message)
        with self._send_lock:
            self._outbox.append(frame)
            # Once per turn of this loop (a flush left pending on a loop that has since
            # ended must not hold back the frames queued after it).
            schedule = self._flushing is not loop
            self._flushing = loop
        if schedule:
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        with self._send_lock:
            self._flushing = None
            if not self._outbox:
                return
            frames = b"".join(self._outbox)
            self._outbox.clear()
            try:
                self._sock.sendall(frames)
            except OSError:
                failed = True
            else:
                failed = False
        if failed:
            self._abort(errors.RunAborted("protocol_error", "the bridge to the host is closed"))

    def _on_readable(self, loop: asyncio.AbstractEventLoop) -> None:
        # Called by a watching loop when the socket has bytes.
        fd = self._sock.fileno()
        if self._watcher is not loop:  # another loop took over: leave the reading to it
            loop.remove_reader(fd)
            return
        if not self._read_lock.acquire(blocking=False):
            # A thread waiting for its own result holds the read lock and reads for everyone
            # meanwhile: look again shortly, rather than spin on a socket that stays readable.
            loop.remove_reader(fd)
            loop.call_later(_BUSY_RETRY_S, self._rearm, loop)
            return
        try:
            self._fill(socket.MSG_DONTWAIT)
            while (frame := self._next_frame()) is not None:
                self._dispatch(frame)
        except BlockingIOError:
            pass  # another reader took the bytes first
        except (ConnectionError, OSError, ValueError):
            self._abort(errors.RunAborted("protocol_error", "the bridge to the host is closed"))
        finally:
            self._read_lock.release()
        with self._state_lock:
            idle = self._watcher is loop and (not self._watched or self._aborted is not None)
            if idle:
                self._watcher = None
        if idle:
            loop.remove_reader(fd)

    def _rearm(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._state_lock:
            if self._watcher is loop and not loop.is_closed():
                loop.add_reader(self._sock.fileno(), self._on_readable, loop)

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
        call_id = frame.get("id")
        with self._state_lock:
            future = self._pending.pop(call_id, None)  # type: ignore[arg-type]
            if future is None:
                return
            if self._awaited:
                self._awaited.discard(call_id)
            if isinstance(future, asyncio.Future):
                self._watched -= 1
        if frame.get("ok"):
            _settle(future, frame.get("value"), None)
        else:
            _settle(future, None, errors.error_from_wire(frame.get("error")))

    def _abort(self, signal: errors.RunAborted) -> None:
        with self._state_lock:
            if self._aborted is None:
                self._aborted = signal
            pending, self._pending = self._pending, {}
            self._awaited.clear()
            self._watched = 0
        for future in pending.values():
            _settle(future, None, signal)


def _encode(message: dict[str, Any]) -> bytes:
    body = _ENCODER.encode(message).encode()
    return _HEADER.pack(len(body)) + body


def _settle(
    future: Future[Any] | asyncio.Future[Any], value: Any, error: BaseException | None
) -> None:
    """Resolve a call's future from whichever thread read its result: an event loop's
    future in the loop's own thread, or through the loop from any other."""
    if isinstance(future, asyncio.Future):
        loop = future.get_loop()
        if asyncio._get_running_loop() is not loop:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_settle, future, value, error)
            return
        if not future.done():  # (in its own thread: nothing can settle it meanwhile)
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)
        return
    if future.done():  # cancelled by the program, or already failed by an abort
        return
    # A call's future is cancelled from the program's thread (asyncio.wrap_future), so a
    # thread-safe future can still be cancelled between the check above and this.
    with contextlib.suppress(InvalidStateError):
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)


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

    _frame = wire.CALL

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
        self._order = tuple(p.name for p in params)
        self._known = frozenset(self._order)
        self._required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if not args and self._required <= kwargs.keys() <= self._known:
            # Keywords only, all known, none missing (most calls): what binding them to the
            # signature gives, without its cost.
            return {name: kwargs[name] for name in self._order if name in kwargs}
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
        return self._connection.call({"type": self._frame, "tool": self.name, "args": arguments})

    def aio(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """The same call as an awaitable, so independent calls can run concurrently."""
        message = {"type": self._frame, "tool": self.name, "args": self._arguments(args, kwargs)}
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            on_loop = self._connection.submit_on_loop(message, loop)
            if on_loop is not None:
                return on_loop
        return asyncio.wrap_future(self._connection.submit(message, awaited=True))

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Many calls of this tool in one frame; results in the order of ``items``.

        A failed item raises its error, or with ``return_errors=True`` stands in the list as
        a ``ToolError`` instance.
        """
        arguments = [self._arguments((), dict(item)) for item in items]
        results = []
        for entry in self._connection.call(
            {"type": wire.BATCH, "tool": self.name, "items": arguments}
        ):
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


_PROPOSALS_AT_ONCE = 64  # frames in flight at once, well inside the host's in-flight limit


class ProposalFunction(ToolFunction):
    """One write the program may propose: ``f(...)``, ``await f.aio(...)``, ``f.batch([...])``
    each send ``propose`` frames and return ``{preview_id, tool, summary, state}``."""

    _frame = wire.PROPOSE

    def batch(self, items: list[dict[str, Any]], *, return_errors: bool = False) -> list[Any]:
        """Propose many writes of this tool, up to 64 frames in flight at a time; answers in
        the order of ``items`` (failures as for tools)."""
        arguments = [self._arguments((), dict(item)) for item in items]
        results: list[Any] = []
        for start in range(0, len(arguments), _PROPOSALS_AT_ONCE):
            futures = [
                self._connection.submit({"type": wire.PROPOSE, "tool": self.name, "args": args})
                for args in arguments[start : start + _PROPOSALS_AT_ONCE]
            ]
            for future in futures:
                try:
                    results.append(self._connection.wait(future))
                except errors.ToolError as error:
                    if not return_errors:
                        raise
                    results.append(error)
        return results

    def __repr__(self) -> str:
        return f"<proposal {self.name}{self.__signature__}>"


class Proposals:
    """The ``tools.propose`` namespace: one attribute per write the run may propose. Any
    other public name is refused on the spot as ``UnknownTool``, as for tools."""

    def __init__(self, tools: Tools | None, functions: list[ProposalFunction]) -> None:
        self._tools = tools
        self._names = []
        for function in functions:
            setattr(self, function.name, function)
            self._names.append(function.name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if self._tools is not None:
            self._tools._refuse(f"propose.{name}")
        shown = ", ".join(sorted(self._names)[:_LISTED_NAMES]) or "none"
        raise errors.UnknownTool(
            f"no write named {name!r} may be proposed by this program; it may propose: "
            f"{shown}. Return what should change as the program's value instead.",
            name=name,
        )

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<tools.propose: {', '.join(sorted(self._names)) or 'none'}>"


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
    propose = Proposals(None, [])
    """The writes this program may propose (``tools.propose.NAME(...)``); set per run."""

    def __init__(self, connection: Connection | None, stubs: list[dict[str, Any]]) -> None:
        self._connection = connection
        self._refused: set[str] = set()
        self._names = []
        proposals = []
        for stub in stubs:
            if connection is None:
                break
            if stub.get("proposal") is True:
                proposals.append(ProposalFunction(connection, stub))
                continue
            function = ToolFunction(connection, stub)
            setattr(self, function.name, function)
            self._names.append(function.name)
        self.propose = Proposals(self, proposals)

    def __getattr__(self, name: str) -> Any:
        # Only reached when no tool, error class or method has that name.
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._refuse(name)
        raise unknown_tool(name, self._names)

    def _refuse(self, name: str) -> None:
        if self._connection is not None and name not in self._refused:
            # The host records what a program tried to reach, not only what it was given.
            self._refused.add(name)
            self._connection.send({"type": wire.REFUSED, "tool": name[: wire.MAX_TOOL_NAME_CHARS]})

    def log(self, message: str) -> None:
        """Send a line to the operator's log (not to the model)."""
        if self._connection is not None:
            self._connection.send({"type": wire.LOG, "message": str(message)[: wire.MAX_LOG_CHARS]})

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<tools: {', '.join(sorted(self._names)) or 'none'}>"


__all__ = ["Connection", "ProposalFunction", "Proposals", "ToolFunction", "Tools", "unknown_tool"]
