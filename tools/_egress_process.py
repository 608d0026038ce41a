"""What a process audit event is about to do (:mod:`airlock.tools._egress_hook` refuses every
one of them inside a call), and the audit events Python does not raise for some routes.

A child process is out of reach of every check of a call, so a tool's code starts none, by
any route: ``subprocess``, ``os.system``, ``os.exec*``, ``os.posix_spawn*``, ``os.spawn*``
(a fork on POSIX), ``os.fork``, ``os.forkpty`` (``pty``), and ``multiprocessing``, whose
``fork`` start method forks and whose ``spawn`` and ``forkserver`` start methods call
``_posixsubprocess.fork_exec`` directly. Nor does it hand work to the workers of a process
pool, which may have been started before the call; nor signal a process or a thread. Python
3.11 raises no audit event for ``fork_exec``, for a pool's work or for
``signal.pidfd_send_signal`` and ``signal.raise_signal``, so :func:`announce` makes those
functions raise :data:`FORK_EXEC`, :data:`POOL` and ``signal.<name>`` first.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    from airlock.tools._egress import CallCheck

__all__ = ["FORK_EXEC", "POOL", "POOL_METHODS", "PROCESS_EVENTS", "announce", "on_process"]

_F = TypeVar("_F", bound=Callable[..., Any])

FORK_EXEC: Final = "_posixsubprocess.fork_exec"
"""The audit event :func:`announce` adds, with ``(argv, executables)``."""
POOL: Final = "airlock.process_pool"
"""The audit event :func:`announce` adds when work is handed to a process pool, with
``(pool, function)``."""
POOL_METHODS: Final = (
    "apply_async",  # apply calls it
    "map",
    "map_async",
    "starmap",
    "starmap_async",
    "imap",
    "imap_unordered",
)
"""The methods of ``multiprocessing.pool.Pool`` that hand work to its workers."""
_SIGNALS: Final = ("pidfd_send_signal", "raise_signal")
"""The functions of ``signal`` that raise no audit event of their own."""
PROCESS_EVENTS: Final = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    FORK_EXEC,
    "os.fork",
    "os.forkpty",
    POOL,
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    *(f"signal.{name}" for name in _SIGNALS),
    "os.putenv",
    "os.unsetenv",
)
"""The audit events that start, fork or signal a process (or a thread), hand work to another
process, or change the environment children inherit."""


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
    if event == "signal.pthread_kill":  # (thread_id, signalnum)
        return f"thread {args[0]}", f"send signal {args[1]} to thread {args[0]}"
    if event == "signal.pidfd_send_signal":  # (pidfd, signalnum)
        target = f"process of descriptor {args[0]}"
        return target, f"send signal {args[1]} to the {target}"
    if event == "signal.raise_signal":  # (signalnum,)
        return "the host's process", f"send signal {args[0]} to the host's process"
    if event == POOL:  # (pool, function)
        function = getattr(args[1], "__qualname__", None) or type(args[1]).__name__
        kind = type(args[0]).__name__
        return f"process pool {kind}", f"hand {function!r} to the workers of a {kind}"
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


def announce() -> None:
    """Make the functions that start a program, hand work to a process pool or send a signal
    with no audit event of their own raise one first (:data:`FORK_EXEC`, :data:`POOL`,
    ``signal.pidfd_send_signal``, ``signal.raise_signal``); once per process, from the hook's
    ``install``. Each costs an audit event per use, and nothing otherwise."""
    _announce_fork_exec()
    _announce_pools()
    _announce_signals()


def _announce_fork_exec() -> None:
    try:
        import _posixsubprocess
    except ImportError:  # not a POSIX system: no such route
        return
    original = _posixsubprocess.fork_exec
    announced = _announced(original, FORK_EXEC, 2)
    setattr(_posixsubprocess, "fork_exec", announced)  # noqa: B010
    if getattr(subprocess, "_fork_exec", None) is original:  # taken when subprocess was imported
        setattr(subprocess, "_fork_exec", announced)  # noqa: B010


def _announce_pools() -> None:
    # Imported here, when the first call is checked, not with the package.
    from concurrent.futures import process as futures_process
    from multiprocessing import pool as mp_pool

    executor = futures_process.ProcessPoolExecutor
    for name in ("submit", "map"):  # map submits, but names the function it was given
        setattr(executor, name, _announced(getattr(executor, name), POOL, 2))
    for name in POOL_METHODS:  # a ThreadPool is one too, with threads for workers: let through
        method = getattr(mp_pool.Pool, name)
        setattr(mp_pool.Pool, name, _announced(method, POOL, 2, unless=mp_pool.ThreadPool))


def _announce_signals() -> None:
    # signal's functions are _signal's: both modules get the replacement, as pickle finds a
    # function by the name of its module.
    c_signal = importlib.import_module("_signal")
    for name in _SIGNALS:
        original = getattr(c_signal, name, None)
        if original is None:  # not on this system
            continue
        announced = _announced(original, f"signal.{name}", 2)
        for module in (c_signal, signal):
            if getattr(module, name, None) is original:
                setattr(module, name, announced)


def _announced(original: _F, event: str, count: int, *, unless: type | None = None) -> _F:
    """``original``, raising ``event`` with its first ``count`` arguments first (except when
    its first argument is an ``unless``); its name, documentation and signature kept."""

    @functools.wraps(original)
    def announced(*args: Any, **kwargs: Any) -> Any:
        if unless is None or not isinstance(args[0] if args else None, unless):
            sys.audit(event, *args[:count])
        return original(*args, **kwargs)

    return announced  # type: ignore[return-value]
