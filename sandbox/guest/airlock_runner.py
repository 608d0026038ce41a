"""The guest runner: runs one model-written program inside the sandbox container.

Standard library only (RestrictedPython, shipped in the image, is imported for the
``restricted`` language mode). The host never trusts what this process says: it re-checks
sizes, types and limits on its side. This runner exists to make the common path fast and
the errors clear.

Life of a runner (one per container, one program per runner):

1. connect to the host over the Unix socket in the read-only mount (argv[1]);
2. warm up: compile and run a small program through the exact path a real one takes, so
   the first real run pays no first-time costs;
3. send ``hello`` (protocol version, pid) and wait for one ``run`` frame;
4. run the program with stdout/stderr captured at the file-descriptor level and capped;
5. send ``done`` with the structured result and exit. The host then destroys the container.

A ``run`` frame with ``"keep": true`` starts a kept runner instead (one conversation of one
principal): after ``done`` it waits for the next ``run`` frame, and each program starts with
the top-level names earlier programs left. It exits when the host closes the bridge.

Frames are a 4-byte big-endian length followed by a UTF-8 JSON object.
"""

from __future__ import annotations

import ast
import errno
import json
import operator
import os
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from airlock.sandbox.guest.airlock_bridge import (
        ERRORS,
        Connection,
        RunAborted,
        ToolError,
        Tools,
    )
else:
    # The interpreter runs isolated (-I -S): nothing is on the path but the standard
    # library. The guest's modules and packages sit next to this file.
    _GUEST_DIR = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_GUEST_DIR, os.path.join(_GUEST_DIR, "lib")]
    from airlock_bridge import ERRORS, Connection, RunAborted, ToolError, Tools

PROTOCOL_VERSION = 1
PROGRAM_FILENAME = "<program>"
PROGRAM_MODULE = "airlock_program"
_TRACEBACK_LIMIT = 8 * 1024
_RUNNER_PID = os.getpid()


class _StreamCapture:
    """Captures one file descriptor (1 or 2) through a pipe, up to ``limit`` bytes.

    Capturing the descriptor rather than ``sys.stdout`` also catches ``os.write`` and child
    processes. When the limit is crossed, ``on_overflow`` runs on the reader thread: the
    program cannot catch that from its own thread.
    """

    def __init__(self, fd: int, limit: int, on_overflow: Any) -> None:
        self.fd = fd
        self.limit = limit
        self.data = bytearray()
        self.truncated = False
        self._on_overflow = on_overflow
        self._saved = os.dup(fd)
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        self._read_end = read_end
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_end, 65536)
            except OSError:
                return
            if not chunk:
                return
            room = self.limit - len(self.data)
            if len(chunk) > room:
                self.data += chunk[: max(room, 0)]
                self.truncated = True
                self._on_overflow()
                return
            self.data += chunk

    def close(self) -> None:
        # Restoring the descriptor closes the pipe's last write end held by this process, so
        # the reader sees end-of-file once every byte written so far has been read.
        os.dup2(self._saved, self.fd)
        os.close(self._saved)
        self._thread.join(timeout=0.5)
        os.close(self._read_end)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class _Printer:
    """RestrictedPython's ``_print_`` hook: ``print`` in a restricted program writes stdout."""

    def __init__(self, _getattr_: Any = None) -> None:
        pass

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        print(*objects, **kwargs)


class ProgramRejected(Exception):
    """The program cannot run: syntax error, forbidden import or restricted construct."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class _FinalValue:
    """Holds the value a program sets with ``result(value)``."""

    __slots__ = ("is_set", "value")

    def __init__(self) -> None:
        self.is_set = False
        self.value: Any = None

    def set(self, value: Any) -> None:
        """Set the program's final value: the one thing that goes back to the model."""
        self.is_set = True
        self.value = value


def _import_checker(allowed: frozenset[str]) -> Any:
    def check(node: ast.AST) -> None:
        for child in ast.walk(node):
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    raise ProgramRejected("relative imports are not allowed", child.lineno)
                names = [child.module or ""]
            else:
                continue
            for name in names:
                if name.partition(".")[0] not in allowed:
                    raise ProgramRejected(
                        f"import of {name!r} is not allowed in restricted mode; "
                        f"allowed modules: {', '.join(sorted(allowed))}",
                        child.lineno,
                    )

    return check


def _restricted_policy() -> Any:
    from RestrictedPython.transformer import RestrictingNodeTransformer

    class AirlockPolicy(RestrictingNodeTransformer):
        """RestrictedPython's policy, plus coroutines so programs can fan out reads.

        ``async``/``await`` add no way to reach an object the guards do not already see.
        """

        def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
            self.check_name(node, node.name, allow_magic_methods=True)
            self.check_function_argument_names(node)
            with self.print_info.new_print_scope():
                node = self.node_contents_visit(node)
                self.inject_print_collector(cast(Any, node))
            return node

        def visit_Await(self, node: ast.Await) -> Any:
            return self.node_contents_visit(node)

        def visit_AsyncFor(self, node: ast.AsyncFor) -> Any:
            return self.guard_iter(cast(Any, node))

        def visit_AsyncWith(self, node: ast.AsyncWith) -> Any:
            return self.visit_With(cast(Any, node))

    return AirlockPolicy


_INPLACE_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
    "@=": operator.imatmul,
}


def _inplace(op: str, x: Any, y: Any) -> Any:
    return _INPLACE_OPERATORS[op](x, y)


def _restricted_globals(
    allowed_imports: frozenset[str], final: _FinalValue, tools: Tools
) -> dict[str, Any]:
    from RestrictedPython.Guards import (
        full_write_guard,
        guarded_iter_unpack_sequence,
        guarded_unpack_sequence,
        raise_,
        safe_builtins,
        safer_getattr,
    )
    from RestrictedPython.Limits import limited_builtins
    from RestrictedPython.Utilities import utility_builtins

    def guarded_import(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level or name.partition(".")[0] not in allowed_imports:
            raise ImportError(f"import of {name!r} is not allowed in restricted mode")
        return __import__(name, globals, locals, fromlist, level)

    def guarded_getattr(ob: Any, name: str, *default: Any) -> Any:
        # safer_getattr answers None for a missing attribute unless told to raise: then
        # ``tools.not_given(...)`` failed as "'NoneType' object is not callable" and a typo
        # read as None. Attribute access and getattr() without a default raise as in Python.
        return cast(Any, safer_getattr)(ob, name, default[0] if default else raise_)

    def write_guard(ob: Any) -> Any:
        # Objects of classes the program defined itself may have attributes set; anything
        # else goes through RestrictedPython's guard.
        if getattr(type(ob), "__module__", None) == PROGRAM_MODULE:
            return ob
        return full_write_guard(ob)

    builtins: dict[str, Any] = {}
    builtins.update(safe_builtins)
    builtins.update(limited_builtins)
    builtins.update(utility_builtins)
    builtins.update(
        {
            "__import__": guarded_import,
            "all": all,
            "any": any,
            "dict": dict,
            "dir": dir,
            "enumerate": enumerate,
            "filter": filter,
            "getattr": guarded_getattr,
            "iter": iter,
            "list": list,
            "map": map,
            "max": max,
            "min": min,
            "next": next,
            "range": range,
            "result": final.set,
            "reversed": reversed,
            "sorted": sorted,
            "sum": sum,
            "zip": zip,
        }
    )
    return {
        "__builtins__": builtins,
        "__name__": PROGRAM_MODULE,
        "__metaclass__": type,
        "tools": tools,
        "_getattr_": guarded_getattr,
        "_getitem_": operator.getitem,
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": write_guard,
        "_inplacevar_": _inplace,
        "_print_": _Printer,
        # RestrictedPython binds ``_print`` per scope, but not in an expression compiled on
        # its own (a program's final expression), so a module-level one is provided.
        "_print": _Printer(),
        "_apply_": lambda f, *a, **kw: f(*a, **kw),
    }


def _full_globals(final: _FinalValue, tools: Tools) -> dict[str, Any]:
    import builtins

    namespace = dict(vars(builtins))
    namespace["result"] = final.set
    return {"__builtins__": namespace, "__name__": PROGRAM_MODULE, "tools": tools}


def compile_program(source: str, mode: str, allowed_imports: frozenset[str]) -> tuple[Any, Any]:
    """Compile ``source`` into (body code, last-expression code or None).

    A program ending in an expression statement has that expression's value as its final
    value, as in a notebook cell.

    Raises:
        ProgramRejected: on a syntax error, a forbidden import or a restricted construct.
    """
    try:
        tree = ast.parse(source, PROGRAM_FILENAME)
    except SyntaxError as exc:
        raise ProgramRejected(f"syntax error: {exc.msg}", exc.lineno) from None
    last: ast.Expression | None = None
    final_statement = tree.body[-1] if tree.body else None
    if isinstance(final_statement, ast.Expr):
        tree.body.pop()
        last = ast.Expression(final_statement.value)
    if mode == "full":
        body_code = compile(tree, PROGRAM_FILENAME, "exec")
        last_code = compile(last, PROGRAM_FILENAME, "eval") if last else None
        return body_code, last_code
    _import_checker(allowed_imports)(tree)
    from RestrictedPython.compile import compile_restricted_eval, compile_restricted_exec

    policy = _restricted_policy()
    compiled = compile_restricted_exec(tree, PROGRAM_FILENAME, policy=policy)
    errors = list(compiled.errors)
    last_code = None
    if last is not None and not errors:
        compiled_last = compile_restricted_eval(last, PROGRAM_FILENAME, policy=policy)
        errors.extend(compiled_last.errors)
        last_code = compiled_last.code
    if errors:
        raise ProgramRejected("; ".join(errors), _line_of(errors[0]))
    return compiled.code, last_code


def _line_of(message: str) -> int | None:
    # RestrictedPython formats errors as "Line N: ...".
    head, _, _ = message.partition(":")
    number = head.removeprefix("Line ").strip()
    return int(number) if number.isdigit() else None


def _program_traceback(exc: BaseException) -> str:
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename == PROGRAM_FILENAME
    ]
    text = "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(exc), exc))
    return text[-_TRACEBACK_LIMIT:]


def _limit_of(exc: BaseException) -> str | None:
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "disk"
    return None


def _usage() -> tuple[float, int]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    peak_kib = max(own.ru_maxrss, children.ru_maxrss)
    return cpu, peak_kib * 1024


def execute(
    request: dict[str, Any],
    finish: Any,
    tools: Tools | None = None,
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one program and return the ``done`` result. ``finish(result)`` ends the run early.

    ``state`` (kept runners only) holds the top-level names of earlier programs: the program
    starts with them and leaves its own there.
    """
    tools = tools if tools is not None else Tools(None, [])
    source = request["program"]
    mode = request.get("mode", "restricted")
    allowed = frozenset(request.get("allowed_imports", ()))
    output_limit = int(request.get("output_limit", 1024 * 1024))
    cpu_before, _ = _usage()
    started_at = time.time()
    clock = time.perf_counter()
    final = _FinalValue()
    result: dict[str, Any] = {
        "status": "ok",
        "exit_status": 0,
        "started_at": started_at,
        "limit": None,
        "error": None,
    }
    try:
        body_code, last_code = compile_program(source, mode, allowed)
    except ProgramRejected as exc:
        result.update(
            status="invalid_program",
            exit_status=2,
            error={"type": "InvalidProgram", "message": exc.message, "line": exc.line},
        )
        return _finalize(result, clock, cpu_before, final, None, None)

    namespace = (
        _restricted_globals(allowed, final, tools)
        if mode == "restricted"
        else _full_globals(final, tools)
    )
    fresh = set(namespace)
    if state:
        namespace.update(state)
    streams: list[_StreamCapture] = []

    def overflow() -> None:
        result.update(status="limit_exceeded", exit_status=137, limit="output")
        finish(_finalize(result, clock, cpu_before, final, *streams))

    sys.stdout.flush()
    sys.stderr.flush()
    streams.append(_StreamCapture(1, output_limit, overflow))
    streams.append(_StreamCapture(2, output_limit, overflow))
    try:
        try:
            exec(body_code, namespace)
            if last_code is not None:
                value = eval(last_code, namespace)
                if not final.is_set and value is not None:
                    final.set(value)
        finally:
            if os.getpid() != _RUNNER_PID:
                # A child forked by the program must never report for the runner.
                os._exit(0)
            sys.stdout.flush()
            sys.stderr.flush()
    except RunAborted:
        # The host has ended the run and will destroy the container; nothing to report.
        os._exit(0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            result.update(status="error", exit_status=code)
            result["error"] = {"type": "SystemExit", "message": f"exit status {code}"}
    except BaseException as exc:
        limit = _limit_of(exc)
        error = {
            "type": type(exc).__name__,
            "message": str(exc)[:_TRACEBACK_LIMIT],
            "traceback": _program_traceback(exc),
        }
        if isinstance(exc, ToolError) and exc.code in ERRORS:
            error["code"] = exc.code  # a tool error the program did not catch
        result.update(
            status="limit_exceeded" if limit else "error",
            exit_status=1,
            limit=limit,
            error=error,
        )
    finally:
        for stream in streams:
            stream.close()
        if state is not None:
            # The run's own bindings (result, tools, guards) are rebuilt each time.
            state.clear()
            state.update((k, v) for k, v in namespace.items() if k not in fresh)
    return _finalize(result, clock, cpu_before, final, *streams)


def _finalize(
    result: dict[str, Any],
    clock: float,
    cpu_before: float,
    final: _FinalValue,
    stdout: _StreamCapture | None,
    stderr: _StreamCapture | None,
) -> dict[str, Any]:
    cpu_after, peak = _usage()
    result["duration_s"] = time.perf_counter() - clock
    result["cpu_time_s"] = max(cpu_after - cpu_before, 0.0)
    result["peak_memory_bytes"] = peak
    result["stdout"] = stdout.text() if stdout else ""
    result["stderr"] = stderr.text() if stderr else ""
    result["truncated"] = bool((stdout and stdout.truncated) or (stderr and stderr.truncated))
    result["has_value"] = final.is_set
    result["value"] = None
    if final.is_set:
        try:
            json.dumps(final.value, allow_nan=False)
            result["value"] = final.value
        except (TypeError, ValueError) as exc:
            result.update(status="error", exit_status=1, has_value=False)
            result["error"] = {
                "type": "InvalidResult",
                "message": f"the final value is not JSON-serializable: {exc}",
            }
    return result


_WARM_UP_PROGRAM = """
import json, math, re, collections, itertools, functools, statistics, datetime, asyncio
rows = [{"id": i, "total": i * 3} for i in range(50)]
print(len(rows))
json.dumps(sorted(rows, key=lambda r: -r["total"])[:3])
"""


_WARM_UP_IMPORTS = frozenset(
    {
        "json", "math", "re", "datetime", "collections", "itertools", "functools",
        "statistics", "decimal", "csv", "asyncio", "typing", "dataclasses",
    }
)  # fmt: skip


def warm_up(allowed_imports: frozenset[str]) -> None:
    """Run a small program through the real path, in both modes, and discard its result."""
    for mode in ("restricted", "full"):
        execute(
            {
                "program": _WARM_UP_PROGRAM,
                "mode": mode,
                "allowed_imports": sorted(allowed_imports),
                "output_limit": 4096,
            },
            finish=lambda _result: None,
        )


def main(argv: list[str]) -> int:
    socket_path = argv[1] if len(argv) > 1 else "/run/airlock/bridge.sock"
    os.environ.clear()
    connection = Connection(socket_path)
    warm_up(_WARM_UP_IMPORTS)
    connection.send({"type": "hello", "version": PROTOCOL_VERSION, "pid": os.getpid()})
    request = connection.recv()
    if request.get("type") != "run":
        return 3
    tools = Tools(connection, request.get("tools") or [])

    def finish(result: dict[str, Any]) -> None:
        connection.send({"type": "done", "result": result})
        os._exit(0)

    if not request.get("keep"):
        finish(execute(request, finish, tools))
    state: dict[str, Any] = {}
    while True:
        connection.send({"type": "done", "result": execute(request, finish, tools, state)})
        try:
            request = connection.recv()
        except (ConnectionError, OSError, ValueError):
            os._exit(0)  # the host closed the bridge: the conversation is over
        if request.get("type") != "run":
            os._exit(3)
        tools = Tools(connection, request.get("tools") or [])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
