"""Reads a container's cgroup counters from the host: the evidence of which limit was hit.

The guest's own report can be wrong (a program may catch the error a limit caused, or take the
runner down with it); the kernel's counters cannot be forged from inside the container. Both
cgroup v1 and v2 layouts of Docker's ``cgroupfs`` and ``systemd`` drivers are tried; when none
is readable the evidence is simply absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupEvidence", "read_evidence"]

_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class CgroupEvidence:
    """Counters of one container's cgroup at the moment they were read."""

    pids_limit_hit: bool
    oom_killed: bool
    memory_bytes: int | None
    """Current memory charged to the container (resident memory plus tmpfs)."""
    peak_memory_bytes: int | None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _counter(text: str | None, key: str) -> int:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def read_evidence(container_id: str, root: Path = _ROOT) -> CgroupEvidence | None:
    """Read limit evidence for a running (or just stopped) container, or ``None``."""
    for v2 in (
        root / "docker" / container_id,
        root / "system.slice" / f"docker-{container_id}.scope",
    ):
        if (v2 / "cgroup.controllers").exists():
            return CgroupEvidence(
                pids_limit_hit=_counter(_read(v2 / "pids.events"), "max") > 0,
                oom_killed=_counter(_read(v2 / "memory.events"), "oom_kill") > 0,
                memory_bytes=_number(_read(v2 / "memory.current")),
                peak_memory_bytes=_number(_read(v2 / "memory.peak")),
            )
    for parent in ("docker", f"system.slice/docker-{container_id}.scope"):
        leaf = container_id if parent == "docker" else ""
        memory = root / "memory" / parent / leaf
        pids = root / "pids" / parent / leaf
        if memory.is_dir() or pids.is_dir():
            return CgroupEvidence(
                pids_limit_hit=_counter(_read(pids / "pids.events"), "max") > 0,
                oom_killed=_counter(_read(memory / "memory.oom_control"), "oom_kill") > 0,
                memory_bytes=_number(_read(memory / "memory.usage_in_bytes")),
                peak_memory_bytes=_number(_read(memory / "memory.max_usage_in_bytes")),
            )
    return None
