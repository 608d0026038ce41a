"""The runner's warm-up: make the seccomp filters ready to load (``airlock_confine``), import
what a default profile's programs may import, then run a small program through the real path
in each mode, so that the first real program pays no first-time costs.

Standard library only. The runner warms up before it says ``hello``, unless its container was
started for a run already waiting (``airlock_wire.RUN_WAITING``: its one program is on its
way), or by the pool while runs find it empty (``airlock_wire.WARM_WHEN_IDLE``): under
sustained load such a container is taken as soon as it is ready, and a warm-up (about 37 ms
of CPU, most of it importing asyncio) would only compete with the runs in flight for a
processor. That runner warms up once it has waited :data:`IDLE_MS` after ``hello`` (the
burst is over: a later run finds it warm), looking before each step whether its ``run``
frame came, and stopping if it did: a run that comes meanwhile waits for one step at most
(importing asyncio, the largest: about 25 ms of CPU under runc, 200 ms under gVisor). A
data image's runner imports its packages whatever comes: they read the environment, which
is emptied before any program runs.
"""

from __future__ import annotations

import select

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator
    from typing import Any

    from airlock.sandbox.guest import airlock_confine as confine
    from airlock.sandbox.guest import airlock_image as image
    from airlock.sandbox.guest.airlock_asyncio import import_asyncio
    from airlock.sandbox.guest.airlock_bridge import Connection

    Execute = Callable[..., dict[str, Any]]
else:
    import airlock_confine as confine
    import airlock_image as image
    from airlock_asyncio import import_asyncio

IDLE_MS = 1000
"""How long a runner that warms up when idle waits for its program after ``hello`` first.
Under sustained load the pool's containers are taken well within it (half within 50 ms,
nine in ten within 200 ms here)."""

PROGRAM = """
import json, math, re, collections, itertools, functools, statistics, datetime, asyncio
rows = [{"id": i, "total": i * 3} for i in range(50)]
print(len(rows))
json.dumps(sorted(rows, key=lambda r: -r["total"])[:3])
"""


def warm_up(
    execute: Execute, allowed_imports: Collection[str], image_imports: Collection[str] = ()
) -> None:
    """Import ``allowed_imports`` and the image's own ``image_imports``, then run a small
    program with ``execute`` (the runner's) in both modes (and, in an image with packages, one
    that uses them, in full mode), and discard the results."""
    for step in _steps(execute, allowed_imports, image_imports):
        step()


def warm_up_when_idle(
    connection: Connection, execute: Execute, allowed_imports: Collection[str]
) -> bool:
    """:func:`warm_up` (no image packages) once nothing has come on ``connection`` for
    :data:`IDLE_MS`, step by step until something comes; whether it warmed up all the way."""
    if readable(connection, IDLE_MS):
        return False
    for step in _steps(execute, allowed_imports, ()):
        if readable(connection, 0):
            return False
        step()
    return True


def readable(connection: Connection, wait_ms: int) -> bool:
    """Whether the host has sent something on ``connection`` (or hung up) within ``wait_ms``."""
    waiting = select.poll()  # poll, not select: gVisor refuses select() to the runner
    waiting.register(connection.fileno(), select.POLLIN)
    return bool(waiting.poll(wait_ms))


def _steps(
    execute: Execute, allowed_imports: Collection[str], image_imports: Collection[str]
) -> Iterator[Callable[[], object]]:
    yield confine.ready  # a program's process forked from this one loads its layer at once
    yield import_asyncio  # programs' "import asyncio" then finds it loaded without ssl
    for name in (*sorted(allowed_imports), *image_imports):
        yield _importing(name)
    programs = [("restricted", PROGRAM), ("full", PROGRAM)]
    if image_imports:
        programs.append(("full", image.WARM_UP_DATA_PROGRAM))
    for mode, program in programs:
        request = {
            "program": program,
            "mode": mode,
            "allowed_imports": sorted(allowed_imports),
            "output_limit": 4096,
        }
        yield _running(execute, request)


def _importing(name: str) -> Callable[[], object]:
    return lambda: __import__(name)


def _running(execute: Execute, request: dict[str, Any]) -> Callable[[], object]:
    return lambda: execute(request, finish=lambda _result: None)


__all__ = ["IDLE_MS", "PROGRAM", "readable", "warm_up", "warm_up_when_idle"]
