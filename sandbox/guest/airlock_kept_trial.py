"""A kept session's names, restored first in a throwaway child, within bounds.

Standard library only. The file of names may be a program's own work (see ``airlock_kept``):
reading it back runs nothing a program chose, but what reading it costs is its writer's to
choose. 316 bytes of pickle make the unpickler hash 2**45 leaves of nested tuples, in one call
of C that no signal interrupts; integer keys that all hash alike take time that grows with the
square of their number; a memo reference repeated builds 13 times its bytes. Rather than bound
each such cost on its own (the next one found would be missed), the next program's process
first restores every entry in a child forked for that (:func:`tried`): with no descriptor of
its parent's (it never reaches the bridge, nor the program's output), and within a share of the
container's memory (:func:`memory_budget`). The child says how long each entry took it, and
the process then restores only the entries the child finished, in order, while the time it
waited for the child and the time they took the child add up to :data:`TRIAL_SECONDS` at most:
restoring them again costs it about what they cost the child, so trying and restoring together
cost the next program about that second, never the child's second and as much again.

The child is forked while the process waits for its program, before its program's seccomp
layer (restricted mode's refuses ``fork``), after its output's reader threads started: the
child runs none of their code, and takes no lock of theirs.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import resource
import select
import signal
import time
import warnings

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

TRIAL_SECONDS = 1.0
"""Wall time that trying the entries in the child and restoring again those it finished take
together, at most (see the module). The program's deadline is not known yet when its process
reads the names (ahead of its program), so it is a fixed part of any: a forged file costs the
next program about this."""
MEMORY_SHARE = 4
"""The child may take ``1 / MEMORY_SHARE`` of the container's memory (see
:func:`memory_budget`): what restoring the names takes, the program no longer has, and the
child's memory and then the process's own add up (gVisor gives freed memory back to the
machine late), besides the file's bytes, read, and the zygote's."""
UNKNOWN_MEMORY = 128 * 1024 * 1024
"""The child's memory where the container's limit cannot be read."""

DONE = "done"
"""Restored by the child within the bounds: restore it."""
REFUSED = "refused"
"""Raised in the child within the bounds: restoring it refuses it again, as cheaply."""
COSTLY = "costly"
"""Not restored by the child within the bounds (or not reached): do not restore it."""
UNCHECKED = "unchecked"
"""No child could be made: do not restore it."""
_MARKS = {b"+": DONE, b"-": REFUSED}
_RECORD = 9
"""Bytes the child writes for a step: its mark, then the microseconds it took."""


def tried(
    steps: Sequence[Callable[[], object]],
    *,
    seconds: float = TRIAL_SECONDS,
    memory: int | None = None,
) -> list[str]:
    """Run ``steps`` in order in a child of this process that holds what each returns,
    within ``memory`` bytes more than this process maps (by default, :func:`memory_budget`);
    what became of each: :data:`DONE`, :data:`REFUSED` (it raised), :data:`COSTLY` (it was not
    finished, or failed for memory, while the wait for the child and the time the steps
    finished took the child added up to ``seconds``) or :data:`UNCHECKED` (no child could be
    made). Taking the steps not costly again then takes about ``seconds`` with the trial."""
    if not steps:
        return []
    started = time.monotonic()
    budget = memory_budget() if memory is None else memory
    read_end, write_end = os.pipe()
    try:
        with warnings.catch_warnings():  # (3.12 warns of a fork with threads: see the module)
            warnings.simplefilter("ignore", DeprecationWarning)
            child = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return [UNCHECKED] * len(steps)
    if child == 0:
        try:
            _run_child(steps, write_end, budget)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        outcomes = _outcomes(read_end, len(steps), started + seconds)
    finally:
        os.close(read_end)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    return outcomes + [COSTLY] * (len(steps) - len(outcomes))


def _outcomes(read_end: int, count: int, end: float) -> list[str]:
    """What the child said on ``read_end`` of the first steps (a record a step: its mark and
    the microseconds it took), until it said ``count``, ended, or restoring again what it
    finished would no longer be over by ``end``: a step that would not fit is not taken."""
    waiting = select.poll()  # poll, not select: gVisor refuses select() to the runner
    waiting.register(read_end, select.POLLIN)
    outcomes: list[str] = []
    pending = b""
    spent = 0.0  # what restoring again the steps taken will cost, as the child measured it
    while len(outcomes) < count:
        left = end - spent - time.monotonic()
        if left <= 0 or not waiting.poll(max(1, int(left * 1000))):
            break
        chunk = os.read(read_end, _RECORD * (count - len(outcomes)))
        if not chunk:
            break
        pending += chunk
        while len(pending) >= _RECORD and len(outcomes) < count:
            record, pending = pending[:_RECORD], pending[_RECORD:]
            took = int.from_bytes(record[1:], "big") / 1_000_000
            if time.monotonic() + spent + took > end:
                return outcomes
            spent += took
            outcomes.append(_MARKS.get(record[:1], COSTLY))
    return outcomes


def _run_child(steps: Sequence[Callable[[], object]], write_end: int, budget: int) -> None:
    """The child: let go of every descriptor but ``write_end``, bound its memory, run the
    steps holding what each returns, and write a record for each (see :func:`_outcomes`)."""
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    os.closerange(0, write_end)
    os.closerange(write_end + 1, files if files != resource.RLIM_INFINITY else 1 << 20)
    mapped = _mapped_bytes()
    for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        # Both: gVisor and Linux differ in which they hold mappings to. A child that could not
        # be bounded writes nothing: each step is then taken for costly.
        hard = resource.getrlimit(limit)[1]
        soft = mapped + budget
        resource.setrlimit(
            limit, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard)
        )
    held: list[object] = []
    for step in steps:
        began = time.perf_counter()
        try:
            held.append(step())
            mark = b"+"
        except MemoryError:
            return
        except Exception:
            mark = b"-"
        took = max(0, round((time.perf_counter() - began) * 1_000_000))
        os.write(write_end, mark + took.to_bytes(_RECORD - 1, "big"))


def _mapped_bytes() -> int:
    """This process's mapped memory (what ``RLIMIT_AS`` counts): the least limit under which
    one page more still fits, less that page, found by halving.

    Neither this nor :func:`_run_child` reads ``/proc/self``: gVisor keeps the ``/proc``
    directory of every process that ever opened its own (about 0.1 MiB of its kernel's memory,
    charged to the container) long after the process is gone, and a kept session forks a
    child for each program whose names it restores."""
    page = mmap.PAGESIZE
    restore = resource.getrlimit(resource.RLIMIT_AS)  # (restoring it allocates nothing)
    hard = restore[1]
    low, high = 0, (1 << 47) if hard == resource.RLIM_INFINITY else hard // page * page

    def fits(limit: int) -> bool:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        try:
            mmap.mmap(-1, page).close()
            return True
        except (OSError, MemoryError):  # (the probe's own object may need an arena more)
            return False
        finally:
            resource.setrlimit(resource.RLIMIT_AS, restore)

    if not fits(high):
        return high
    while high - low > page:
        middle = (low + high) // 2 // page * page
        if fits(middle):
            high = middle
        else:
            low = middle
    return high - page


def memory_budget() -> int:
    """The memory the child may take: :data:`MEMORY_SHARE`'s part of the container's limit
    (its cgroup's, v2 or v1; gVisor's is its memory's total), and no more than half of what
    the container has left, so that the child, not the container, fails for it."""
    limit = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        found = _number(path)
        if found is not None:
            limit = found if limit is None else min(limit, found)
    total, available = _meminfo()
    if total is not None:
        limit = total if limit is None else min(limit, total)
    if limit is None:
        return UNKNOWN_MEMORY
    budget = limit // MEMORY_SHARE
    if available is not None:
        budget = min(budget, available // 2)
    return budget


def _number(path: str) -> int | None:
    try:
        with open(path, "rb") as file:
            return int(file.read().strip())
    except (OSError, ValueError):  # absent, or "max"
        return None


def _meminfo() -> tuple[int | None, int | None]:
    """``/proc/meminfo``'s total and available memory in bytes (the container's own under
    gVisor, the machine's under runc)."""
    found: dict[bytes, int] = {}
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                key, _, rest = line.partition(b":")
                if key in (b"MemTotal", b"MemAvailable"):
                    found[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return found.get(b"MemTotal"), found.get(b"MemAvailable")


__all__ = [
    "COSTLY",
    "DONE",
    "MEMORY_SHARE",
    "REFUSED",
    "TRIAL_SECONDS",
    "UNCHECKED",
    "UNKNOWN_MEMORY",
    "memory_budget",
    "tried",
]
