from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airlock.sandbox._cgroup import CgroupEvidence, RunMark, mark_run, read_evidence

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


# -- a kept container's run is judged on what changed since it began ---------------------------


def _v1(root: Path, *, pids_max: int, oom_kill: int, peak: int) -> None:
    _write(root / "pids/docker" / CID / "pids.events", f"max {pids_max}\n")
    memory = root / "memory/docker" / CID
    _write(memory / "memory.oom_control", f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n")
    _write(memory / "memory.usage_in_bytes", "1000\n")
    _write(memory / "memory.max_usage_in_bytes", f"{peak}\n")


def _v2(root: Path, *, pids_max: int, oom_kill: int, peak: int) -> None:
    scope = root / "system.slice" / f"docker-{CID}.scope"
    _write(scope / "cgroup.controllers", "memory pids\n")
    _write(scope / "pids.events", f"max {pids_max}\n")
    _write(scope / "memory.events", f"low 0\nhigh 0\nmax 0\noom 0\noom_kill {oom_kill}\n")
    _write(scope / "memory.current", "1000\n")
    _write(scope / "memory.peak", f"{peak}\n")


LAYOUTS = {"v1": _v1, "v2": _v2}

# (pids.events max, oom_kill) when the run began, then when it is judged -> what it hit
SINCE_MARK = [
    pytest.param((0, 0), (0, 0), (False, False), id="nothing-ever"),
    pytest.param((7, 0), (7, 0), (False, False), id="earlier-pids-hit"),
    pytest.param((0, 2), (0, 2), (False, False), id="earlier-oom-kill"),
    pytest.param((7, 2), (7, 2), (False, False), id="earlier-both"),
    pytest.param((7, 0), (9, 0), (True, False), id="pids-hit-again"),
    pytest.param((0, 2), (0, 3), (False, True), id="oom-kill-again"),
    pytest.param((0, 0), (1, 1), (True, True), id="both-in-this-run"),
]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize(("before", "after", "hit"), SINCE_MARK)
def test_a_run_is_judged_on_what_changed_since_its_mark(
    tmp_path: Path,
    layout: str,
    before: tuple[int, int],
    after: tuple[int, int],
    hit: tuple[bool, bool],
) -> None:
    write = LAYOUTS[layout]
    write(tmp_path, pids_max=before[0], oom_kill=before[1], peak=5000)
    mark = mark_run(CID, tmp_path)
    assert mark is not None
    write(tmp_path, pids_max=after[0], oom_kill=after[1], peak=5000)
    evidence = read_evidence(CID, tmp_path, since=mark)
    assert evidence is not None
    assert (evidence.pids_limit_hit, evidence.oom_killed) == hit
    # Without a mark, the counters are the container's whole life's, as for a fresh one.
    whole = read_evidence(CID, tmp_path)
    assert whole is not None
    assert (whole.pids_limit_hit, whole.oom_killed) == (after[0] > 0, after[1] > 0)


def test_cgroup_v1_restarts_the_peak_at_the_mark(tmp_path: Path) -> None:
    _v1(tmp_path, pids_max=0, oom_kill=0, peak=900_000_000)
    mark = mark_run(CID, tmp_path)
    # Writing to the high-water mark restarts it (the kernel: at the current usage).
    peak_file = tmp_path / "memory/docker" / CID / "memory.max_usage_in_bytes"
    assert peak_file.read_text().strip() == "0"
    assert mark == RunMark(pids_limit_hits=0, oom_kills=0, peak_memory_bytes=None)
    peak_file.write_text("3000\n")  # this run's own peak, smaller than an earlier one
    evidence = read_evidence(CID, tmp_path, since=mark)
    assert evidence is not None
    assert evidence.peak_memory_bytes == 3000


# cgroup v2's memory.peak cannot be restarted for the next reader: a run's peak is known only
# when the run raised the high-water mark; else it is not reported (it is an earlier run's).
@pytest.mark.parametrize(
    ("peak_then", "peak_now", "reported"),
    [(5000, 5000, None), (5000, 4000, None), (5000, 8000, 8000)],
)
def test_cgroup_v2_reports_a_peak_only_when_the_run_raised_it(
    tmp_path: Path, peak_then: int, peak_now: int, reported: int | None
) -> None:
    _v2(tmp_path, pids_max=0, oom_kill=0, peak=peak_then)
    mark = mark_run(CID, tmp_path)
    assert mark == RunMark(pids_limit_hits=0, oom_kills=0, peak_memory_bytes=peak_then)
    _v2(tmp_path, pids_max=0, oom_kill=0, peak=peak_now)
    evidence = read_evidence(CID, tmp_path, since=mark)
    assert evidence is not None
    assert evidence.peak_memory_bytes == reported


def test_no_cgroup_is_no_mark(tmp_path: Path) -> None:
    assert mark_run(CID, tmp_path) is None


def test_a_cgroup_found_once_is_read_again_and_forgotten_when_gone(tmp_path: Path) -> None:
    # Where a container's counters are is found at its first read and kept for its runs;
    # once its cgroup is gone there is no evidence, and a new one is found afresh.
    _v1(tmp_path, pids_max=1, oom_kill=0, peak=10)
    assert read_evidence(CID, tmp_path) == CgroupEvidence(
        pids_limit_hit=True, oom_killed=False, memory_bytes=1000, peak_memory_bytes=10
    )
    _v1(tmp_path, pids_max=1, oom_kill=3, peak=20)
    seen = read_evidence(CID, tmp_path)
    assert seen is not None
    assert seen.oom_killed
    assert seen.peak_memory_bytes == 20
    for controller in ("pids", "memory"):
        shutil.rmtree(tmp_path / controller)
    assert read_evidence(CID, tmp_path) is None
    _v2(tmp_path, pids_max=0, oom_kill=0, peak=30)
    assert read_evidence(CID, tmp_path) == CgroupEvidence(
        pids_limit_hit=False, oom_killed=False, memory_bytes=1000, peak_memory_bytes=30
    )
