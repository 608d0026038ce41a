"""Busy processes beside a benchmark: the loaded machine a goal must also hold on."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["busy_processes"]


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` processes, each spinning on a processor until the block ends (none for 0)."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
        for process in spinning:
            process.wait()
