"""Reads a container's cgroup counters from the host: the evidence of which limit was hit.

The guest's own report can be wrong (a program may catch the error a limit caused, or take the
runner down with it); the kernel's counters cannot be forged from inside the container. Both
cgroup v1 and v2 layouts of Docker's ``cgroupfs`` and ``systemd`` drivers are tried; when none
is readable the evidence is simply absent.

The counters add up over the container's life. A fresh container serves one run, so they are
that run's; a kept container serves many, so each of its runs is judged on what changed since
it began (:func:`mark_run`, then :func:`read_evidence` ``since`` the mark): a pids limit an
earlier program hit, or the process of one the OOM killer ended, is not the next program's.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupEvidence", "RunMark", "mark_run", "read_evidence"]

_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class CgroupEvidence:
    """Counters of one container's cgroup at the moment they were read: over its life, or
    over one run when read ``since`` that run's :class:`RunMark`."""

    pids_limit_hit: bool
    oom_killed: bool
    memory_bytes: int | None
    """Current memory charged to the container (resident memory plus tmpfs)."""
    peak_memory_bytes: int | None
    """The most memory charged to the container at once (its runner included). Since a
    run's mark: that run's own when the mark restarted the high-water mark (cgroup v1),
    else only when the run raised it above the mark's, and ``None`` otherwise (the mark is
    an earlier program's, and how much this one used is not known)."""


@dataclass(frozen=True, slots=True)
class RunMark:
    """The counters when one run of a kept container began."""

    pids_limit_hits: int
    oom_kills: int
    peak_memory_bytes: int | None
    """The high-water mark then; ``None`` when the mark restarted it (or there is none)."""


@dataclass(frozen=True, slots=True)
class _Counters:
    pids_limit_hits: int
    oom_kills: int
    memory_bytes: int | None
    peak_memory_bytes: int | None
    peak_reset: str | None
    """The high-water mark's file when writing to it restarts it (cgroup v1)."""


@dataclass(frozen=True, slots=True)
class _Files:
    """Where one container's counters are: found once, read at every run of a kept one."""

    pids_events: str
    oom_kills: str  # memory.events (v2) or memory.oom_control (v1): an ``oom_kill`` line each
    current: str
    peak: str
    peak_resets: bool  # (cgroup v1: writing to the high-water mark restarts it)


_found: dict[tuple[str, str], _Files] = {}
_MOST_FOUND = 1024
"""Containers whose files are remembered; the oldest is forgotten past this many."""


def _read(path: str) -> str | None:
    # A kept container's run reads these as it begins: a raw read is a third of what a text
    # file object costs (each counter file holds a few lines).
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _counter(text: str | None, key: str) -> int:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _find(container_id: str, root: Path) -> _Files | None:
    for v2 in (
        root / "docker" / container_id,
        root / "system.slice" / f"docker-{container_id}.scope",
    ):
        if (v2 / "cgroup.controllers").exists():
            # memory.peak restarts (kernel 6.12+) only for reads through the descriptor
            # that wrote to it: the mark compares high-water marks instead.
            return _Files(
                pids_events=str(v2 / "pids.events"),
                oom_kills=str(v2 / "memory.events"),
                current=str(v2 / "memory.current"),
                peak=str(v2 / "memory.peak"),
                peak_resets=False,
            )
    for parent in ("docker", f"system.slice/docker-{container_id}.scope"):
        leaf = container_id if parent == "docker" else ""
        memory = root / "memory" / parent / leaf
        pids = root / "pids" / parent / leaf
        if memory.is_dir() or pids.is_dir():
            return _Files(
                pids_events=str(pids / "pids.events"),
                oom_kills=str(memory / "memory.oom_control"),
                current=str(memory / "memory.usage_in_bytes"),
                peak=str(memory / "memory.max_usage_in_bytes"),
                peak_resets=True,
            )
    return None


def _read_counters(container_id: str, root: Path) -> _Counters | None:
    key = (container_id, str(root))
    files = _found.get(key)
    if files is None:
        files = _find(container_id, root)
        if files is None:
            return None
        if len(_found) >= _MOST_FOUND:
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # (threads)
                del _found[next(iter(_found))]
        _found[key] = files
    texts = [_read(path) for path in (files.pids_events, files.oom_kills, files.current)]
    peak_text = _read(files.peak)
    if peak_text is None and all(text is None for text in texts):
        _found.pop(key, None)  # the container's cgroup is gone (it was removed)
        return None
    peak_bytes = _number(peak_text)
    return _Counters(
        pids_limit_hits=_counter(texts[0], "max"),
        oom_kills=_counter(texts[1], "oom_kill"),
        memory_bytes=_number(texts[2]),
        peak_memory_bytes=peak_bytes,
        peak_reset=files.peak if files.peak_resets and peak_bytes is not None else None,
    )


def read_evidence(
    container_id: str, root: Path = _ROOT, *, since: RunMark | None = None
) -> CgroupEvidence | None:
    """Read limit evidence for a running (or just stopped) container, or ``None``; ``since``
    a run's mark, only what changed after it (see :class:`CgroupEvidence`)."""
    counters = _read_counters(container_id, root)
    if counters is None:
        return None
    if since is None:
        return CgroupEvidence(
            pids_limit_hit=counters.pids_limit_hits > 0,
            oom_killed=counters.oom_kills > 0,
            memory_bytes=counters.memory_bytes,
            peak_memory_bytes=counters.peak_memory_bytes,
        )
    peak = counters.peak_memory_bytes
    if since.peak_memory_bytes is not None and (peak is None or peak <= since.peak_memory_bytes):
        peak = None
    return CgroupEvidence(
        pids_limit_hit=counters.pids_limit_hits > since.pids_limit_hits,
        oom_killed=counters.oom_kills > since.oom_kills,
        memory_bytes=counters.memory_bytes,
        peak_memory_bytes=peak,
    )


def mark_run(container_id: str, root: Path = _ROOT) -> RunMark | None:
    """The counters as a run of a kept container begins, or ``None`` when none is readable.

    On cgroup v1 the memory high-water mark restarts here at the current usage (writing to
    ``memory.max_usage_in_bytes``, when the host's user may), so that the run's peak is its
    own; where it cannot, the mark keeps the old one to compare with.
    """
    counters = _read_counters(container_id, root)
    if counters is None:
        return None
    restarted = False
    if counters.peak_reset is not None:
        try:
            Path(counters.peak_reset).write_text("0")
            restarted = True
        except OSError:
            pass
    return RunMark(
        pids_limit_hits=counters.pids_limit_hits,
        oom_kills=counters.oom_kills,
        peak_memory_bytes=None if restarted else counters.peak_memory_bytes,
    )
