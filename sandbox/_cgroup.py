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
    peak_reset: Path | None
    """The high-water mark's file when writing to it restarts it (cgroup v1)."""


def _read(path: Path) -> str | None:
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


def _read_counters(container_id: str, root: Path) -> _Counters | None:
    for v2 in (
        root / "docker" / container_id,
        root / "system.slice" / f"docker-{container_id}.scope",
    ):
        if (v2 / "cgroup.controllers").exists():
            # memory.peak restarts (kernel 6.12+) only for reads through the descriptor
            # that wrote to it: the mark compares high-water marks instead.
            return _Counters(
                pids_limit_hits=_counter(_read(v2 / "pids.events"), "max"),
                oom_kills=_counter(_read(v2 / "memory.events"), "oom_kill"),
                memory_bytes=_number(_read(v2 / "memory.current")),
                peak_memory_bytes=_number(_read(v2 / "memory.peak")),
                peak_reset=None,
            )
    for parent in ("docker", f"system.slice/docker-{container_id}.scope"):
        leaf = container_id if parent == "docker" else ""
        memory = root / "memory" / parent / leaf
        pids = root / "pids" / parent / leaf
        if memory.is_dir() or pids.is_dir():
            peak = memory / "memory.max_usage_in_bytes"
            peak_bytes = _number(_read(peak))
            return _Counters(
                pids_limit_hits=_counter(_read(pids / "pids.events"), "max"),
                oom_kills=_counter(_read(memory / "memory.oom_control"), "oom_kill"),
                memory_bytes=_number(_read(memory / "memory.usage_in_bytes")),
                peak_memory_bytes=peak_bytes,
                peak_reset=peak if peak_bytes is not None else None,
            )
    return None


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
            counters.peak_reset.write_text("0")
            restarted = True
        except OSError:
            pass
    return RunMark(
        pids_limit_hits=counters.pids_limit_hits,
        oom_kills=counters.oom_kills,
        peak_memory_bytes=None if restarted else counters.peak_memory_bytes,
    )
