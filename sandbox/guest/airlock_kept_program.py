"""A kept session's program process: made ready before its program is known, then run.

Standard library only. The zygote (``airlock_zygote``) forks this process as soon as the
container is clear after the previous program, with a connection of its own to the host.
While it waits, it opens ``/dev/null`` afresh for its standard streams (nothing a program
sets on them reaches the next), loads the seccomp layer all modes share, starts capturing its
stdout and stderr and reads what the earlier programs kept (``airlock_kept``). Once the
zygote has said ``hello`` for it, it waits a moment for its program, then warms up (a fresh
process pays for its first touch of each page it shares with the zygote: here, rather than in
the run), and receives its ``run`` frame on its connection, adds its mode's layer and runs it.
Once it has reported, it waits for the zygote to end it (:func:`_wait_to_be_ended`).
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_artifacts as artifacts
    from airlock.sandbox.guest import airlock_clearing as clearing
    from airlock.sandbox.guest import airlock_deadline as deadline
    from airlock.sandbox.guest import airlock_frames as frames
    from airlock.sandbox.guest.airlock_bridge import Connection, Tools
    from airlock.sandbox.guest.airlock_confine import confine, confine_ahead
    from airlock.sandbox.guest.airlock_kept import GLOBALS_FILE, KeptGlobals
    from airlock.sandbox.guest.airlock_kept_file import clear_way
    from airlock.sandbox.guest.airlock_language import compile_program
    from airlock.sandbox.guest.airlock_output import StreamCapture
    from airlock.sandbox.guest.airlock_spare import ProgramStart
    from airlock.sandbox.guest.airlock_warm_up import readable
else:
    import airlock_artifacts as artifacts
    import airlock_clearing as clearing
    import airlock_deadline as deadline
    import airlock_frames as frames
    import airlock_wire as wire
    from airlock_bridge import Connection, Tools
    from airlock_confine import confine, confine_ahead
    from airlock_kept import GLOBALS_FILE, KeptGlobals
    from airlock_kept_file import clear_way
    from airlock_language import compile_program
    from airlock_output import StreamCapture
    from airlock_warm_up import readable

Execute = Callable[..., dict[str, Any]]
"""The runner's ``execute(request, finish, tools, kept, captures)``."""

SCRATCH = "/tmp"
MESSAGE_QUEUES = "/dev/mqueue"
"""The container's POSIX message queues: the seccomp profile refuses ``mq_open``, but a plain
``open`` there makes one, and it outlives its process (its name alone can carry data)."""
_OUTPUT_LIMIT = 1024 * 1024
"""A capture's limit until its program's ``run`` frame says."""
_PROGRAM_SOON_MS = 2
"""How long a process made ready waits for its program before it warms up."""
_WARM_UP = """
import json
rows = [{"id": n, "total": n * 3} for n in range(3)]
def total(row):
    return row["total"]
for row in sorted(rows, key=total):
    row["name"] = f"row {row['id']}"
json.dumps(rows[0]).count(":") + len(rows) + 1
"""
"""The process's own program, run while it waits (in either mode, it ends ``ok``): what most
programs do (an import, a comprehension, a function, a loop, an f-string, a method call), so
that a program's first use of each finds its pages touched already (the program's step of a
warm run took 20 to 80 us less than after ``len([1, 2]) + 1``)."""
_SAMPLE_PARAMS = [
    {"name": "record_id", "annotation": "str", "description": "", "required": True,
     "default": None, "shown_default": False},
    {"name": "limit", "annotation": "int", "description": "at most", "required": False,
     "default": 10, "shown_default": True},
]  # fmt: skip
_RUN_FRAME = frames.encode(
    {"type": wire.RUN, "program": _WARM_UP, "mode": "full", "allowed_imports": [],
     "output_limit": _OUTPUT_LIMIT, "value_limit": 1, "value_elements": 1,
     "max_call_frame_bytes": 1, "max_in_flight": 1, "max_batch_items": 1, "deadline_s": 1.0,
     "tools": [
         {"name": f"sample_{n}", "doc": "A sample.", "params": _SAMPLE_PARAMS,
          "returns": "dict", "proposal": False}
         for n in range(4)
     ],
     "artifacts": None, "keep": True}
)  # fmt: skip
"""A ``run`` frame like the host's, with the stubs of a few tools, for :func:`_rehearse`."""


def prepare(ahead: dict[str, Any]) -> None:
    """Prepare the container for the next program (every other process is gone)."""
    clearing.empty(wire.OUT_DIR)
    clearing.empty(MESSAGE_QUEUES)  # (none under gVisor: nothing to do)
    if ahead.get("keep") == "clean":
        clearing.empty(SCRATCH)
    else:
        clear_way(GLOBALS_FILE)


def run(
    connection: Connection, ahead: dict[str, Any], start: ProgramStart, execute: Execute
) -> None:
    """Get ready while the program is not known yet (``ahead``: the host's ``keep`` and the
    ``mode`` it expects), then, once the zygote has said ``hello`` for this process
    (``start``), receive the program on ``connection`` and run it with ``execute``; the
    zygote ends it by the ``run`` frame's ``deadline_s`` (no watchdog of its own)."""
    _own_null()
    # A failure to load the shared layer is met again, and reported, by confine() below.
    confine_ahead()
    captures = (StreamCapture(1, _OUTPUT_LIMIT, None), StreamCapture(2, _OUTPUT_LIMIT, None))
    kept = None if ahead.get("keep") == "clean" else KeptGlobals()
    if kept is not None:
        kept.read()
    if not start.wait():
        return
    # Not at once: a program that follows its predecessor at once is on its way now (and
    # waits less for this process than for its warm-up), and the predecessor's result may
    # still be on its way to the caller (a warm-up would compete with it for a processor).
    mode = "full" if ahead.get("mode") == "full" else "restricted"
    if not readable(connection, _PROGRAM_SOON_MS):
        compile_program(_WARM_UP, mode, wire.WARM_UP_IMPORTS)
    if not readable(connection, 0):
        warm = {
            "program": _WARM_UP,
            "mode": mode,
            "allowed_imports": sorted(wire.WARM_UP_IMPORTS),
            "output_limit": 4096,
        }
        warmed = execute(warm, lambda _result: None)
        if not readable(connection, 0):
            _rehearse(connection, warmed)
    try:
        request = connection.recv()
    except (ConnectionError, OSError, ValueError):
        return  # the host let this process go unused
    if request.get("type") != wire.RUN:
        return
    start.begin(request.get("deadline_s"))

    def finish(result: dict[str, Any]) -> None:
        connection.send({"type": wire.DONE, "result": result})
        os._exit(0)

    confine(request.get("mode"), refuse=finish)
    tools = Tools(connection, request.get("tools") or [])
    result = execute(request, finish, tools, kept, captures)
    artifacts.deliver(connection.send, request, result)
    connection.send({"type": wire.DONE, "result": result})
    _wait_to_be_ended()


def _rehearse(connection: Connection, result: dict[str, Any]) -> None:
    """What this process does around its program, once with nothing real: take a ``run``
    frame off the bytes received, make its tools' functions (on ``connection``, which they
    only hold: nothing is sent), report a deadline (on a pipe of its own) and make the
    ``done`` frame of ``result``. Each touches pages that the warm-up did not, and a fresh
    process pays for its first touch of each (its ``run`` frame was taken and its deadline
    reported 60 to 70 us sooner in a warm run; two tools' functions were made 70 us sooner).
    Then the young objects are collected, so the program's run starts with none counted
    towards the cyclic collector's next pass."""
    request = frames.split_frame(bytearray(_RUN_FRAME))
    Tools(connection, request["tools"] if request else [])
    scratch, end = os.pipe()
    try:
        deadline.report(end, 1.0)  # (closes its end)
    finally:
        os.close(scratch)
    frames.encode({"type": wire.DONE, "result": result})
    gc.collect(0)


def _wait_to_be_ended() -> None:
    """Stop, once the program has reported, until the zygote ends this process. Stopped (every
    thread of it), nothing the program left in this process runs on; the zygote, woken by
    the stop, ends the process and what the program left elsewhere when the next token comes
    (the host sends it once it has handed this result on), and ``REPORTED_GRACE_S``
    (``airlock_deadline``) after the stop at the latest. Exiting now instead would tear down
    this process's memory, and the zygote clear the container, each on a processor the host
    needs to take the result: on a loaded machine, that was half of a warm run."""
    try:
        while True:  # (continued by a process the program left: stopped again)
            os.kill(os.getpid(), signal.SIGSTOP)
    finally:
        os._exit(0)  # the stop was refused, or a handler of the program's raised


def _own_null() -> None:
    """Point stdin, stdout and stderr at a ``/dev/null`` of this process's own (the captures'
    copies are made from them later). Forked as they are, they are the zygote's open file
    description, shared with every program's process: flags set there (``F_SETFL``'s
    ``O_NONBLOCK``, ``F_SETSIG``'s signal) would reach the next program, even a clean one."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            os.dup2(null, fd)
    finally:
        os.close(null)


__all__ = ["SCRATCH", "Execute", "prepare", "run"]
