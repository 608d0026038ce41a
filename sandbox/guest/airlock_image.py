"""What the image adds to the runner's warm-up: its manifest, its packages' settings.

Standard library only; shipped in the image next to the runner. An image that adds packages
(the data image) carries a manifest beside the runner (``airlock_wire.IMAGE_MANIFEST``):
``{"image": "data", "packages": {name: version}, "warm_imports": [...],
"matplotlib_cache": DIR}``. The base image has none, and then nothing here does anything.

The runner calls :func:`prepare` before it warms up, while it still has no program: the
native libraries' thread pools are sized to the container's CPU quota (a pool as large as the
host's core count would hit the pids limit on a large host), matplotlib draws without a
display and finds its font list (built when the image was built) instead of rebuilding it,
and the image's packages are imported, so a run does not pay for importing pandas. After the
warm-up, :func:`settle` fixes Arrow's pools (created lazily) at the same size and empties the
environment again: a program sees none of these variables, in either image.
"""

from __future__ import annotations

import math
import os
import sys

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",  # Arrow's and OpenMP's pools
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
)
_MAX_THREADS = 8
_MATPLOTLIB_HOME = "/tmp/.matplotlib"


def read_manifest(directory: str, name: str) -> dict[str, Any]:
    """The manifest in ``directory``, or ``{}`` when the image has none (the base image)."""
    try:
        with open(os.path.join(directory, name), encoding="utf-8") as file:
            import json  # an image with a manifest: its packages import json anyway

            manifest = json.load(file)
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def cpu_quota() -> int:
    """Whole CPUs the container may use: its cgroup's quota, else the CPUs it may run on
    (gVisor shows no cgroup files), at most :data:`_MAX_THREADS`."""
    quota = None
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as file:  # cgroup v2
            limit, period = file.read().split()[:2]
        if limit != "max":
            quota = int(limit) / int(period)
    except (OSError, ValueError):
        try:
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", encoding="ascii") as file:
                limit_us = int(file.read())
            with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us", encoding="ascii") as file:
                period_us = int(file.read())
            if limit_us > 0:
                quota = limit_us / period_us
        except (OSError, ValueError):
            quota = None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, min(cpus, _MAX_THREADS))


def prepare(manifest: dict[str, Any]) -> list[str]:
    """Set what the image's packages read from the environment; the modules to import while
    warming up (``warm_imports``), in order."""
    if not manifest:
        return []
    threads = str(cpu_quota())
    for variable in _THREAD_VARIABLES:
        os.environ[variable] = threads
    cache = manifest.get("matplotlib_cache")
    if isinstance(cache, str):
        import shutil  # an image with packages only: the base image's runner does without

        os.environ["MPLBACKEND"] = "Agg"
        # matplotlib wants a writable directory for its settings; the font list built with
        # the image is copied there, so it is not rebuilt on every start.
        os.makedirs(_MATPLOTLIB_HOME, mode=0o700, exist_ok=True)
        try:
            for entry in os.scandir(cache):
                if entry.is_file(follow_symlinks=False):
                    shutil.copy(entry.path, os.path.join(_MATPLOTLIB_HOME, entry.name))
        except OSError:
            pass  # matplotlib rebuilds the list: slower, not wrong
        os.environ["MPLCONFIGDIR"] = _MATPLOTLIB_HOME
    imports = manifest.get("warm_imports") or []
    return [str(name) for name in imports if isinstance(name, str)]


def settle() -> None:
    """After the warm-up: size Arrow's thread pools (created on first use, when the variables
    would be gone), have numpy's global generator reseeded in every forked process, and empty
    the environment, as the base image's runner leaves it."""
    threads = os.environ.get("OMP_NUM_THREADS")
    arrow = sys.modules.get("pyarrow")
    if arrow is not None and threads:
        arrow.set_cpu_count(int(threads))
        arrow.set_io_thread_count(int(threads))
    generator = sys.modules.get("numpy.random")
    if generator is not None:
        # Imported in the warm-up, numpy seeded its global generator once: every process
        # forked from this one (each program's, in a kept or reused container) would draw
        # the same numbers. The standard random module reseeds itself after a fork; numpy
        # does not, so each child reseeds it from the system's entropy.
        os.register_at_fork(after_in_child=generator.seed)
    os.environ.clear()


WARM_UP_DATA_PROGRAM = """
import io
import pandas as pd
import matplotlib.pyplot as plt
frame = pd.DataFrame({"region": ["north", "south", "north"], "amount": [1, 2, 3]})
totals = frame.groupby("region", as_index=False)["amount"].sum()
back = pd.read_csv(io.StringIO(totals.to_csv(index=False)))
figure, axes = plt.subplots(figsize=(2, 2))
axes.bar(back["region"], back["amount"])
buffer = io.BytesIO()
figure.savefig(buffer, format="png")
plt.close(figure)
len(buffer.getvalue())
"""
"""Run once, in full mode, while a data image's runner warms up: the first real program that
reads a CSV, groups and draws a chart then finds those paths warm."""


__all__ = ["WARM_UP_DATA_PROGRAM", "cpu_quota", "prepare", "read_manifest", "settle"]
