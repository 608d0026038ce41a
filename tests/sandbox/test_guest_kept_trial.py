"""The child that tries a kept session's names, on the host: it measures its own mapped memory
and lets go of its parent's descriptors without opening anything under ``/proc/self`` (gVisor
keeps such a directory for good once opened: ``test_kept_memory.py``), and it still finds what
``/proc/self/statm`` says and holds none of its parent's descriptors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.sandbox.guest_image import GUEST_DIR, load_guest

trial = load_guest("airlock_kept_trial")

MiB = 1024 * 1024
# Lowers the process's RLIMIT_AS while it looks: in a process of its own, not the test's.
_MEASURE = """
import os, resource, airlock_kept_trial
soft = resource.getrlimit(resource.RLIMIT_AS)
probed = airlock_kept_trial._mapped_bytes()
with open("/proc/self/statm", "rb") as statm:
    pages = int(statm.read().split()[0])
print(probed, pages * os.sysconf("SC_PAGE_SIZE"), resource.getrlimit(resource.RLIMIT_AS) == soft)
"""


def test_the_child_finds_its_mapped_memory_as_statm_counts_it() -> None:
    program = f"import sys\nsys.path.insert(0, {str(GUEST_DIR)!r})\n{_MEASURE}"
    measured = subprocess.run(
        [sys.executable, "-I", "-c", program], capture_output=True, text=True, check=True
    ).stdout.split()
    probed, statm, restored = int(measured[0]), int(measured[1]), measured[2]
    assert restored == "True"  # the limit is as it was
    assert statm > 0
    assert abs(probed - statm) <= MiB  # (an allocator's arena at most between the two)


def test_the_child_holds_none_of_its_parents_descriptors() -> None:
    read_end, write_end = os.pipe()
    try:
        outcomes = trial.tried(
            [lambda: os.write(write_end, b"reached"), lambda: "fine"], memory=64 * MiB
        )
        os.set_blocking(read_end, False)
        with pytest.raises(BlockingIOError):
            os.read(read_end, 16)  # nothing came through the parent's descriptor
    finally:
        os.close(read_end)
        os.close(write_end)
    assert outcomes == [trial.REFUSED, trial.DONE]
