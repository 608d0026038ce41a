"""What a process audit event is about to do (:mod:`airlock.tools._egress_hook` refuses every
one of them inside a call), and the audit event Python does not raise for ``_posixsubprocess``.

A child process is out of reach of every check of a call, so a tool's code starts none, by
any route: ``subprocess``, ``os.system``, ``os.exec*``, ``os.posix_spawn*``, ``os.spawn*``
(a fork on POSIX), ``os.fork``, ``os.forkpty`` (``pty``), and ``multiprocessing``, whose
``fork`` start method forks and whose ``spawn`` and ``forkserver`` start methods call
``_posixsubprocess.fork_exec`` directly: Python 3.11 raises no audit event there, so
:func:`announce_fork_exec` makes that function raise :data:`FORK_EXEC` first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from airlock.tools._egress import CallCheck

__all__ = ["FORK_EXEC", "PROCESS_EVENTS", "announce_fork_exec", "on_process"]

FORK_EXEC: Final = "_posixsubprocess.fork_exec"
"""The audit event :func:`announce_fork_exec` adds, with ``(argv, executables)``."""
PROCESS_EVENTS: Final = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    FORK_EXEC,
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "os.putenv",
    "os.unsetenv",
)
"""The audit events that start, fork or signal a process, or change the environment its
children inherit."""


def on_process(check: CallCheck, event: str, args: tuple[Any, ...]) -> None:
    """Refuse a :data:`PROCESS_EVENTS` event, naming what it tried."""
    target, action = _process_attempt(event, args)
    check.refuse("process", target, event, action)


def _process_attempt(event: str, args: tuple[Any, ...]) -> tuple[str, str]:
    """What a process event tried, as (target, action): never an environment value."""
    if event in ("os.fork", "os.forkpty"):
        return "fork", "fork the host's process"
    if event in ("os.kill", "os.killpg"):
        return f"process {args[0]}", f"send signal {args[1]} to process {args[0]}"
    if event in ("os.putenv", "os.unsetenv"):
        name = os.fsdecode(args[0]) if isinstance(args[0], str | bytes) else repr(args[0])
        return f"environment {name}", f"change the environment variable {name!r}"
    if event == "subprocess.Popen":
        program = args[0] if args[0] is not None else args[1]
    elif event == "os.system":
        program = args[0]
    elif event == "os.spawn":
        program = args[1]
    elif event == FORK_EXEC:  # (argv, executables): the name as the code gave it first
        program = args[0] or args[1]
    else:  # os.exec, os.posix_spawn: (path, argv, env)
        program = args[0]
    if isinstance(program, list | tuple):
        program = program[0] if program else ""
    text = os.fsdecode(program) if isinstance(program, str | bytes | os.PathLike) else repr(program)
    if event == "os.system":  # a shell line may hold secrets: name the program only
        text = text.split(maxsplit=1)[0] if text.split() else text
    return text, f"start the program {text!r}"


def announce_fork_exec() -> None:
    """Make ``_posixsubprocess.fork_exec`` (and ``subprocess``'s own reference to it) raise
    :data:`FORK_EXEC` before it starts a program; once per process, from the hook's
    ``install``. It costs an audit event per program started, and nothing otherwise."""
    try:
        import _posixsubprocess
    except ImportError:  # not a POSIX system: no such route
        return
    original = _posixsubprocess.fork_exec
    announced = _announced(original)
    setattr(_posixsubprocess, "fork_exec", announced)  # noqa: B010
    if getattr(subprocess, "_fork_exec", None) is original:  # taken when subprocess was imported
        setattr(subprocess, "_fork_exec", announced)  # noqa: B010


def _announced(original: Callable[..., int]) -> Callable[..., int]:
    def fork_exec(*args: Any, **kwargs: Any) -> int:
        sys.audit(FORK_EXEC, args[0] if args else None, args[1] if len(args) > 1 else None)
        return original(*args, **kwargs)

    fork_exec.__doc__ = original.__doc__
    fork_exec.__wrapped__ = original  # type: ignore[attr-defined]
    return fork_exec
