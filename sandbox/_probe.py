"""A probe program that reports, from inside a container, whether the profile is in force.

``airlock doctor`` runs it, and so does the test suite: what the probe checks is what a
user is told is enforced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airlock.policies import SandboxProfile
from airlock.sandbox._result import RunResult

__all__ = ["PROBE_PROGRAM", "ProbeFinding", "judge_probe"]

PROBE_PROGRAM = r"""
import ctypes, errno, os, platform, socket

def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None

def first(*paths):
    for path in paths:
        value = read(path)
        if value is not None:
            return value
    return None

status = dict(line.split(":", 1) for line in read("/proc/self/status").splitlines())
limits = {}
for line in read("/proc/self/limits").splitlines()[1:]:
    if line.startswith("Max open files"):
        limits["nofile"] = line.split()[3]
libc = ctypes.CDLL(None, use_errno=True)
ptrace = {"x86_64": 101, "aarch64": 117}.get(platform.machine())
ptrace_errno = None
if ptrace is not None:
    libc.syscall(ptrace, 0, 0, 0, 0)
    ptrace_errno = ctypes.get_errno()
try:
    probe = socket.socket(); probe.settimeout(1); probe.connect(("1.1.1.1", 53))
    network = "reachable"
except OSError:
    network = "unreachable"
root_writable = True
try:
    open("/probe-root", "w")
except OSError:
    root_writable = False
{
    "uid": os.getuid(),
    "cap_eff": status["CapEff"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "seccomp": status["Seccomp"].strip(),
    "ptrace_errno": ptrace_errno,
    "interfaces": [name for _, name in socket.if_nameindex()],
    "network": network,
    "root_writable": root_writable,
    "environ": sorted(os.environ),
    "memory": first("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"),
    "memory_swap": first("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
    "pids": first("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"),
    "nofile": limits.get("nofile"),
}
"""


@dataclass(frozen=True, slots=True)
class ProbeFinding:
    """One check of the profile, as seen from inside the container."""

    check: str
    ok: bool
    seen: str
    fix: str


def judge_probe(result: RunResult, profile: SandboxProfile) -> list[ProbeFinding]:
    """Compare what the probe saw with what ``profile`` promises."""
    if not result.ok or not isinstance(result.value, dict):
        return [
            ProbeFinding(
                "probe ran",
                False,
                result.reason(),
                "rebuild the image with `make image` and check `docker info`",
            )
        ]
    seen: dict[str, Any] = result.value
    swap = seen["memory_swap"]
    checks = [
        ("non-root user", seen["uid"] != 0, f"uid {seen['uid']}", "keep the profile's user"),
        (
            "no capabilities",
            int(seen["cap_eff"], 16) == 0,
            f"CapEff {seen['cap_eff']}",
            "the engine ignored cap_drop; upgrade Docker",
        ),
        (
            "no new privileges",
            seen["no_new_privs"] == "1",
            f"NoNewPrivs {seen['no_new_privs']}",
            "the engine ignored no-new-privileges; upgrade Docker",
        ),
        (
            "seccomp filter",
            seen["seccomp"] == "2" and seen["ptrace_errno"] in (1, None),
            f"Seccomp {seen['seccomp']}, ptrace errno {seen['ptrace_errno']}",
            "enable seccomp in the kernel and the engine (`docker info` lists it)",
        ),
        (
            "no network",
            seen["interfaces"] == ["lo"] and seen["network"] == "unreachable",
            f"interfaces {seen['interfaces']}, network {seen['network']}",
            "the engine must honour network_mode=none",
        ),
        (
            "read-only root",
            not seen["root_writable"],
            "writable" if seen["root_writable"] else "read-only",
            "the engine must honour read_only",
        ),
        ("empty environment", seen["environ"] == [], f"{seen['environ']}", "check the image's ENV"),
        (
            "memory limit, no swap",
            seen["memory"] == str(profile.memory_bytes)
            and swap in (None, str(profile.memory_bytes)),
            f"memory {seen['memory']}, memory+swap {swap}",
            "enable the memory cgroup controller (and swap accounting)",
        ),
        (
            "pids limit",
            seen["pids"] == str(profile.pids_limit),
            f"pids.max {seen['pids']}",
            "enable the pids cgroup controller",
        ),
        (
            "open-files limit",
            seen["nofile"] == str(profile.nofile_limit),
            f"nofile {seen['nofile']}",
            "the engine must honour ulimits",
        ),
    ]
    return [ProbeFinding(check, bool(ok), observed, fix) for check, ok, observed, fix in checks]
