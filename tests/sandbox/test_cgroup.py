from __future__ import annotations

from pathlib import Path

import pytest

from airlock.sandbox._cgroup import CgroupEvidence, read_evidence

CID = "abc123"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(("pids_max", "oom_kill"), [(0, 0), (3, 0), (0, 1), (2, 5)])
def test_cgroup_v1(tmp_path: Path, pids_max: int, oom_kill: int) -> None:
    _write(tmp_path / "pids/docker" / CID / "pids.events", f"max {pids_max}\n")
    memory = tmp_path / "memory/docker" / CID
    _write(memory / "memory.oom_control", f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n")
    _write(memory / "memory.usage_in_bytes", "1000\n")
    _write(memory / "memory.max_usage_in_bytes", "5000\n")
    assert read_evidence(CID, tmp_path) == CgroupEvidence(
        pids_limit_hit=pids_max > 0,
        oom_killed=oom_kill > 0,
        memory_bytes=1000,
        peak_memory_bytes=5000,
    )


def test_cgroup_v2_systemd(tmp_path: Path) -> None:
    scope = tmp_path / "system.slice" / f"docker-{CID}.scope"
    _write(scope / "cgroup.controllers", "memory pids\n")
    _write(scope / "pids.events", "max 1\n")
    _write(scope / "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    _write(scope / "memory.current", "42\n")
    evidence = read_evidence(CID, tmp_path)
    assert evidence == CgroupEvidence(
        pids_limit_hit=True, oom_killed=True, memory_bytes=42, peak_memory_bytes=None
    )


def test_missing_cgroup_is_no_evidence(tmp_path: Path) -> None:
    assert read_evidence(CID, tmp_path) is None
