"""The guest runner: runs one model-written program inside the sandbox container.

Standard library only (RestrictedPython, shipped in the image, is imported for the
``restricted`` language mode, which ``airlock_language`` compiles). The host never trusts what
this process says: it re-checks sizes, types and limits on its side. This runner exists to
make the common path fast and the errors clear.

Life of a runner (one per container, one program per runner):

1. connect to the host over the Unix socket in the read-only mount (argv[1]), then point
   stdin, stdout and stderr at ``/dev/null`` and close every other descriptor but the
   bridge's: the container's own streams are drained by the engine, so a program that could
   still write to them would bypass the output cap at the engine's expense;
2. warm up (``airlock_warm_up``): import what a default profile allows
   (``airlock_wire.WARM_UP_IMPORTS``) and what the image's manifest names (the data image:
   numpy, pandas, pyarrow, matplotlib; see ``airlock_image``), then compile and run a small
   program through the exact path a real one takes, so the first real run pays no first-time
   costs (not a base image's runner started for a run already waiting,
   ``airlock_wire.RUN_WAITING``, nor one the pool started while runs find it empty,
   ``airlock_wire.WARM_WHEN_IDLE``, which warms up after ``hello`` once it has waited idle);
3. send ``hello`` (protocol version, pid) and wait for one ``run`` frame; a host that lets it
   go first (a pool's close) ends it with status 0, as its watch of the host's end would;
4. run the program with stdout/stderr captured at the file-descriptor level and capped (a
   program with top-level ``await`` runs on an event loop of its own), ended (exit) if the
   host hangs up or the ``run`` frame's ``deadline_s`` passes (``airlock_deadline``);
5. send the files it left in ``/out`` as ``artifact`` frames when the ``run`` frame asks for
   them (``airlock_artifacts``), then ``done`` with the structured result, and exit; the
   host destroys the container. A run that failed with no limit named waits first (at most
   ``_EVIDENCE_WAIT_S``) for the host to hang up: the cgroup counters by which the host
   tells a limit from an error (fork's ``EAGAIN``) end with this process. A final value
   the host would refuse (``airlock_output.too_large``) is refused here, so the ``done``
   frame stays within the host's frame budget and rules.

A ``run`` frame with ``"keep"`` (and a one-time ``token`` instead of a program) makes the
runner a zygote (``airlock_zygote``): each program of the conversation runs in a process
forked for it ahead of its program, which then comes over a connection of its own
(``airlock_kept_program``); what it leaves the next is explicit (``airlock_kept``). Frames
and their types are the shared contract in ``airlock_wire``.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)

_GUEST_DIR = os.path.dirname(os.path.abspath(__file__))
"""The runner's directory: the guest's modules, its packages (``lib``) and the image's
manifest are there."""

if TYPE_CHECKING:
    from typing import Any

    # Kept conversations' modules (noqa) load where used, never in a one-program runner.
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_artifacts as artifacts
    from airlock.sandbox.guest import airlock_deadline as deadline
    from airlock.sandbox.guest import airlock_image as image
    from airlock.sandbox.guest import airlock_kept_program as kept_program  # noqa: F401
    from airlock.sandbox.guest import airlock_zygote as zygote  # noqa: F401
    from airlock.sandbox.guest.airlock_bridge import HOST_GONE, Connection, Tools
    from airlock.sandbox.guest.airlock_confine import confine
    from airlock.sandbox.guest.airlock_errors import ERRORS, RunAborted, ToolError
    from airlock.sandbox.guest.airlock_frames import limit_calls, to_json
    from airlock.sandbox.guest.airlock_kept import (  # noqa: F401
        KeptGlobals,
        top_level_definitions,
    )
    from airlock.sandbox.guest.airlock_language import (
        PROGRAM_FILENAME,
        ProgramRejected,
        compile_program,
        full_globals,
        refusal,
        restricted_globals,
        run_program,
    )
    from airlock.sandbox.guest.airlock_output import (
        VALUE_ELEMENTS,
        VALUE_LIMIT,
        StreamCapture,
        exit_status_of,
        failure_of,
        isolate_descriptors,
        limit_of,
        program_traceback,
        too_large,
        usage,
    )
    from airlock.sandbox.guest.airlock_spare import ProgramStart
    from airlock.sandbox.guest.airlock_warm_up import warm_up, warm_up_when_idle
else:
    # The interpreter runs isolated (-I -S): nothing is on the path but the standard
    # library. The guest's modules (airlock_wire among them) and packages sit beside us.
    sys.path[:0] = [_GUEST_DIR, os.path.join(_GUEST_DIR, "lib")]
    import airlock_artifacts as artifacts
    import airlock_deadline as deadline
    import airlock_image as image
    import airlock_wire as wire
    from airlock_bridge import HOST_GONE, Connection, Tools
    from airlock_confine import confine
    from airlock_errors import ERRORS, RunAborted, ToolError
    from airlock_frames import limit_calls, to_json
    from airlock_language import (
        PROGRAM_FILENAME,
        ProgramRejected,
        compile_program,
        full_globals,
        refusal,
        restricted_globals,
        run_program,
    )
    from airlock_output import (
        VALUE_ELEMENTS,
        VALUE_LIMIT,
        StreamCapture,
        exit_status_of,
        failure_of,
        isolate_descriptors,
        limit_of,
        program_traceback,
        too_large,
        usage,
    )
    from airlock_warm_up import warm_up, warm_up_when_idle

_OUTPUT_LIMIT = 1024 * 1024
"""Bytes of stdout and of stderr a program may write, unless its ``run`` frame says."""
_RUNNER_PID = os.getpid()
_EVIDENCE_WAIT_S = 2.0


class _FinalValue:
    """The value a program sets with ``result(value)``, and the limits it must fit (run frame's)."""

    __slots__ = ("is_set", "limit_bytes", "limit_elements", "value")

    def __init__(self, request: dict[str, Any] | None = None) -> None:
        self.is_set = False
        self.value: Any = None
        self.limit_bytes = int((request or {}).get("value_limit", VALUE_LIMIT))
        self.limit_elements = int((request or {}).get("value_elements", VALUE_ELEMENTS))

    def set(self, value: Any) -> None:
        """Set the program's final value: the one thing that goes back to the model."""
        self.is_set = True
        self.value = value


def execute(
    request: dict[str, Any],
    finish: Any,
    tools: Tools | None = None,
    kept: KeptGlobals | None = None,
    captures: tuple[StreamCapture, StreamCapture] | None = None,
) -> dict[str, Any]:
    """Run one program and return the ``done`` result. ``finish(result)`` ends the run early.

    ``kept`` (a kept session's program only) holds the top-level names earlier programs
    left: the program starts with them, and leaves its own there for the next one.
    ``captures`` are stdout's and stderr's captures started ahead (else started here).
    """
    tools = tools if tools is not None else Tools(None, [])
    limit_calls(request.get("max_call_frame_bytes"))
    source = request["program"]
    mode = request.get("mode", "restricted")
    allowed = frozenset(request.get("allowed_imports", ()))
    output_limit = int(request.get("output_limit", _OUTPUT_LIMIT))
    cpu_before, _ = usage()
    started_at = time.time()
    clock = time.perf_counter()
    final = _FinalValue(request)
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
    except SyntaxError as exc:  # parsed, but the compiler refuses a statement where it stands
        result.update(
            status="error",
            exit_status=1,
            error={
                "type": "SyntaxError",
                "message": f"{exc.msg} (line {exc.lineno})",
                "line": exc.lineno,
                "traceback": program_traceback(exc, PROGRAM_FILENAME),
            },
        )
        return _finalize(result, clock, cpu_before, final, None, None)

    namespace = (
        restricted_globals(allowed, final.set, tools)
        if mode == "restricted"
        else full_globals(final.set, tools)
    )
    fresh = set(namespace)
    if kept is not None:
        guard = (lambda value: refusal(value, allowed)) if mode == "restricted" else None
        kept.restore(namespace, lambda text: compile_program(text, mode, allowed)[0], guard)
    streams: list[StreamCapture] = []

    def overflow() -> None:
        result.update(status="limit_exceeded", exit_status=137, limit="output")
        finish(_finalize(result, clock, cpu_before, final, *streams))

    # Captures started here end with the run; those started ahead (a kept program's) are
    # left to the process's exit.
    owned = captures is None
    if captures is None:
        sys.stdout.flush()
        sys.stderr.flush()
        captures = (
            StreamCapture(1, output_limit, overflow),
            StreamCapture(2, output_limit, overflow),
        )
    else:
        for capture in captures:
            capture.arm(output_limit, overflow)
    streams.extend(captures)
    try:
        try:
            run_program(body_code, last_code, namespace, final.set, lambda: final.is_set)
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
        code = exit_status_of(exc)
        if code:
            result.update(status="error", exit_status=code)
            result["error"] = {"type": "SystemExit", "message": f"exit status {code}"}
    except BaseException as exc:
        limit = limit_of(exc, wire.OUT_DIR)
        error = failure_of(exc, PROGRAM_FILENAME, tool_errors=(ToolError, ERRORS))
        result.update(
            status="limit_exceeded" if limit else "error",
            exit_status=1,
            limit=limit,
            error=error,
        )
    finally:
        for stream in streams:
            stream.close(end_thread=owned)
    finished = _finalize(result, clock, cpu_before, final, *streams)
    if kept is not None:
        if not TYPE_CHECKING:  # a kept program's modules load when a conversation starts
            from airlock_kept import top_level_definitions
        # The run's own bindings (tools, guards; result, in its builtins) are rebuilt each time.
        try:
            kept.keep(
                namespace,
                fresh=fresh,
                defined=top_level_definitions(source),
                program_file=PROGRAM_FILENAME,
            )
        except OSError as exc:
            kept.notes.append(f"nothing ({exc.strerror or exc})")
        finished["stderr"] += kept.note()
    return finished


def _finalize(
    result: dict[str, Any],
    clock: float,
    cpu_before: float,
    final: _FinalValue,
    stdout: StreamCapture | None,
    stderr: StreamCapture | None,
) -> dict[str, Any]:
    cpu_after, peak = usage()
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
            text = to_json(final.value)
        except (TypeError, ValueError) as exc:
            result.update(status="error", exit_status=1, has_value=False)
            result["error"] = {
                "type": "InvalidResult",
                "message": f"the final value is not JSON-serializable: {exc}",
            }
        else:
            refusal = too_large(final.value, text, final.limit_bytes, final.limit_elements)
            if refusal is None:
                result["value"] = final.value
            else:
                result.update(status="error", exit_status=1, has_value=False, error=refusal)
    return result


def main(argv: list[str]) -> int:
    socket_path = argv[1] if len(argv) > 1 else f"{wire.SOCKET_DIR}/{wire.SOCKET_NAME}"
    os.environ.clear()
    connection = Connection(socket_path)
    isolate_descriptors(connection.fileno())
    backstops = deadline.Backstops(connection.fileno())  # the host's end watched from now on
    image_imports = image.prepare(image.read_manifest(_GUEST_DIR, wire.IMAGE_MANIFEST))
    # An image's packages are imported here whatever comes: they read the environment,
    # which is emptied before any program runs.
    later = {wire.RUN_WAITING, wire.WARM_WHEN_IDLE} & set(argv[2:])
    warmed = not later or bool(image_imports)
    if warmed:
        warm_up(execute, wire.WARM_UP_IMPORTS, image_imports)
    image.settle()
    try:
        connection.send({"type": wire.HELLO, "version": wire.PROTOCOL_VERSION, "pid": os.getpid()})
        if not warmed and wire.WARM_WHEN_IDLE in later:
            warmed = warm_up_when_idle(connection, execute, wire.WARM_UP_IMPORTS)
        request = connection.recv()
    except HOST_GONE:  # let go before it had a program (a pool's close): its end, no error
        return 0
    if request.get("type") != wire.RUN:
        return 3
    tools = Tools(connection, request.get("tools") or [])

    def finish(result: dict[str, Any]) -> None:
        connection.send({"type": wire.DONE, "result": result})
        if result.get("status") != "ok" and result.get("limit") is None:
            connection.wait_closed(_EVIDENCE_WAIT_S)
        os._exit(0)

    if request.get("keep"):
        if not TYPE_CHECKING:  # for a kept conversation only: its programs fork from here
            import airlock_kept_program as kept_program
            import airlock_zygote as zygote
        backstops.drop()  # the zygote ends its programs and itself
        if not warmed:  # its programs' processes fork from this one
            warm_up(execute, wire.WARM_UP_IMPORTS)
        try:
            return zygote.serve(connection, socket_path, request, _run_kept, kept_program.prepare)
        except Exception as exc:  # (a program's process never returns here: it exits)
            zygote.tell_exit(connection, 1, f"{type(exc).__name__}: {exc}")
            raise
    # The second seccomp layer, before any of the program's code runs; no layer, no run.
    confine(request.get("mode"), refuse=finish)
    backstops.end_by(request.get("deadline_s"))  # a backstop: the host ends it sooner
    result = execute(request, finish, tools)
    artifacts.deliver(connection.send, request, result)
    finish(result)
    return 0


def _run_kept(connection: Connection, ahead: dict[str, Any], start: ProgramStart) -> None:
    """One kept program, in the process forked for it (``airlock_kept_program``)."""
    global _RUNNER_PID
    _RUNNER_PID = os.getpid()  # a child the program forks must never report for it
    if not TYPE_CHECKING:
        import airlock_kept_program as kept_program
    kept_program.run(connection, ahead, start, execute)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
