"""What the engine costs a container: bare ``docker run --rm`` against the same program in a
container that ``crun`` starts directly, with no ``dockerd``, ``containerd`` or shim.

Run (as root, with ``crun`` installed, as ``sandbox/image/ensure-engine.sh`` leaves it):
``.venv/bin/python bench/engine_floor.py [--seconds 6] [--rounds 2] [--workers 8]``.

Every case runs the benchmarks' bare program (``bench/_bare_docker.py``, which prints 1) as
user 65534 with no network, ``--workers`` at a time, for ``--seconds``, in ``--rounds``
interleaved rounds; it prints each run's latency (median, p99, ratio to bare ``docker run
--rm``), the runs per second, and the machine's CPU per run (``/proc/stat``: every process,
the engine's included). The direct container gets its own pid, network, ipc, uts and mount
namespaces and a tmpfs ``/tmp``, on the image's root file system exported once and shared
read-only; it has no seccomp profile, no cgroup limits and no copy-on-write layer. It is no
sandbox of airlock's: it measures what starting containers without the engine would save, the
question behind issue 17's goal for a new principal per request.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import docker

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airlock.sandbox import DEFAULT_IMAGE
from bench._args import at_least, positive_seconds
from bench._bare_docker import BARE_COMMAND, run_bare
from bench._table import print_table

BASELINE = "docker run --rm, runc"


def _bundle(client: docker.DockerClient, image: str, into: Path) -> Path:
    """An OCI bundle of ``image``'s root file system that runs :data:`BARE_COMMAND`."""
    rootfs = into / "rootfs"
    rootfs.mkdir()
    created = client.containers.create(image, BARE_COMMAND, entrypoint=[])
    try:
        with tempfile.TemporaryFile() as archive:
            for chunk in created.export():
                archive.write(chunk)  # type: ignore[arg-type]  # (bytes: the stubs say str)
            archive.seek(0)
            with tarfile.open(fileobj=archive) as tar:
                tar.extractall(rootfs, filter="tar")
    finally:
        created.remove(force=True)
    subprocess.run(["crun", "spec"], cwd=into, check=True)
    config = json.loads((into / "config.json").read_text())
    config["process"].update(args=BARE_COMMAND, terminal=False, user={"uid": 65534, "gid": 65534})
    config["root"]["readonly"] = True
    config["hostname"] = "sandbox"
    config["mounts"] = [m for m in config["mounts"] if m["destination"] != "/tmp"] + [
        {
            "destination": "/tmp",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "noexec", "size=64m"],
        }
    ]
    (into / "config.json").write_text(json.dumps(config))
    return into


def _busy_ticks() -> int:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def _measure(run: Callable[[], bytes], seconds: float, workers: int) -> tuple[list[float], float]:
    """Latencies of the runs made in ``seconds`` by ``workers`` threads; machine CPU s a run."""
    stop = time.monotonic() + seconds
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        while time.monotonic() < stop and not failures:
            began = time.perf_counter()
            try:
                out = run()
                if out.strip() != b"1":
                    raise AssertionError(f"the program printed {out!r}, not 1")
            except BaseException as exc:
                failures.append(exc)
                return
            with lock:
                latencies.append(time.perf_counter() - began)

    ticks = _busy_ticks()
    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    cpu = (_busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK")
    return latencies, cpu / max(len(latencies), 1)


def main(image: str, seconds: float, rounds: int, workers: int) -> None:
    if os.geteuid() != 0 or shutil.which("crun") is None:
        raise SystemExit("run it as root with crun installed (sandbox/image/ensure-engine.sh)")
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = str(_bundle(client, image, Path(tmp)))

        def direct() -> bytes:
            return subprocess.run(
                ["crun", "run", "-b", bundle, "floor-" + uuid.uuid4().hex[:12]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                check=True,
            ).stdout

        cases: dict[str, Callable[[], bytes]] = {
            BASELINE: lambda: run_bare(client, image, None),
            "docker run --rm, crun": lambda: run_bare(client, image, "crun"),
            "crun run, no engine": direct,
        }
        latencies: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        elapsed = {name: 0.0 for name in cases}
        for _ in range(rounds):  # interleaved: drift falls on every case alike
            for name, run in cases.items():
                began = time.perf_counter()
                lat, per_run = _measure(run, seconds, workers)
                elapsed[name] += time.perf_counter() - began
                latencies[name] += lat
                cpu[name].append(per_run)
    print_table(
        f"one run of the bare program, {workers} at a time, {rounds} x {seconds:g} s (ms)",
        [
            (name, [x * 1000 for x in lat], BASELINE if name != BASELINE else "")
            for name, lat in latencies.items()
        ],
        "ms",
    )
    base_rate = len(latencies[BASELINE]) / elapsed[BASELINE]
    print(f"\n{'case':<38}{'runs':>6}{'runs/s':>10}{'x bare':>9}{'CPU ms a run':>16}")
    for name, lat in latencies.items():
        rate = len(lat) / elapsed[name]
        cpu_ms = ", ".join(f"{x * 1000:.1f}" for x in cpu[name])
        print(f"{name:<38}{len(lat):>6}{rate:>10.1f}{rate / base_rate:>8.2f}x{cpu_ms:>16}")
    print(f"load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default=os.environ.get("AIRLOCK_IMAGE", DEFAULT_IMAGE))
    parser.add_argument("--seconds", type=positive_seconds, default=6.0)
    parser.add_argument("--rounds", type=at_least(1), default=2)
    parser.add_argument("--workers", type=at_least(1), default=8)
    args = parser.parse_args()
    main(args.image, args.seconds, args.rounds, args.workers)
