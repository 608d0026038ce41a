"""A probe program that reports, from inside a container, whether the profile is in force.

``airlock doctor`` runs it, and so does the test suite: what the probe checks is what a
user is told is enforced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from airlock.policies import SandboxProfile
from airlock.sandbox._result import RunResult

__all__ = ["PROBE_PROGRAM", "ProbeFinding", "judge_probe"]

PROBE_PROGRAM = r"""
import ctypes, errno, os, platform, resource, socket

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

def errno_of(call):
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0

status = dict(line.split(":", 1) for line in (read("/proc/self/status") or "").splitlines())
libc = ctypes.CDLL(None, use_errno=True)
ptrace = {"x86_64": 101, "aarch64": 117}.get(platform.machine())
ptrace_errno = None
if ptrace is not None:
    libc.syscall(ptrace, 0, 0, 0, 0)
    ptrace_errno = ctypes.get_errno()
families = {}
for name in ("AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET", "AF_VSOCK"):
    if hasattr(socket, name):
        ctypes.set_errno(0)
        libc.socket(getattr(socket, name), socket.SOCK_STREAM, 0)
        families[name] = ctypes.get_errno()
def connect():
    probe = socket.socket(); probe.settimeout(1); probe.connect(("1.1.1.1", 53))
network = "reachable" if errno_of(connect) == 0 else "unreachable"
root_writable = errno_of(lambda: open("/probe-root", "w")) == 0
{
    "uid": os.getuid(),
    "cap_eff": status.get("CapEff", "").strip(),
    "no_new_privs": status.get("NoNewPrivs", "").strip() or None,
    "seccomp": status.get("Seccomp", "").strip(),
    "ptrace_errno": ptrace_errno,
    "families": families,
    "execve_errno": errno_of(lambda: os.execv("/bin/true", ["/bin/true"])),
    "unix_socket_errno": errno_of(lambda: socket.socket(socket.AF_UNIX)),
    "interfaces": sorted(os.listdir("/sys/class/net")),
    "network": network,
    "root_writable": root_writable,
    "environ": sorted(os.environ),
    "kernel": platform.release(),
    "memory": first("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"),
    "memory_swap": first("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
    "pids": first("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"),
    "nofile": str(resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
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
    """Compare what the probe saw with what ``profile`` promises.

    Under ``runsc`` the program sees gVisor's kernel: it reports no ``NoNewPrivs`` and shows
    no cgroup files (the limits hold on the gVisor sandbox from the host), so those findings
    say what gVisor shows instead."""
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
    gvisor = profile.runtime == "runsc"
    swap = seen["memory_swap"]
    refused_families = {name: code for name, code in seen["families"].items() if code != 1}
    host_kernel = os.uname().release
    checks = [
        (
            "runtime",
            (seen["kernel"] != host_kernel) == gvisor,
            f"{profile.runtime}: the program sees kernel {seen['kernel']} (host {host_kernel})",
            "register runsc with `sandbox/image/ensure-engine.sh`"
            if gvisor
            else "the engine ran another runtime than runc",
        ),
        ("non-root user", seen["uid"] != 0, f"uid {seen['uid']}", "keep the profile's user"),
        (
            "no capabilities",
            int(seen["cap_eff"] or "1", 16) == 0,
            f"CapEff {seen['cap_eff']}",
            "the engine ignored cap_drop; upgrade Docker",
        ),
        (
            "no new privileges",
            seen["no_new_privs"] == "1" or (gvisor and seen["no_new_privs"] is None),
            f"NoNewPrivs {seen['no_new_privs'] or 'not reported by gVisor'}",
            "the engine ignored no-new-privileges; upgrade Docker",
        ),
        (
            "seccomp filter",
            seen["seccomp"] == "2" and seen["ptrace_errno"] in (1, None),
            f"Seccomp {seen['seccomp']}, ptrace errno {seen['ptrace_errno']}",
            "enable seccomp in the kernel and the engine (`docker info` lists it)",
        ),
        (
            "socket families",
            not refused_families,
            f"AF_UNIX only; errno of the others: {seen['families']}",
            "the seccomp profile must refuse every family but AF_UNIX",
        ),
        (
            "second seccomp layer",
            seen["execve_errno"] == 1 and seen["unix_socket_errno"] == 1,
            f"execve errno {seen['execve_errno']}, new socket errno {seen['unix_socket_errno']}",
            "rebuild the image with `make image` (the runner loads the layer through pyseccomp)",
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
        _cgroup_check(
            "memory limit, no swap",
            seen["memory"] == str(profile.memory_bytes)
            and swap in (None, str(profile.memory_bytes)),
            f"memory {seen['memory']}, memory+swap {swap}",
            "enable the memory cgroup controller (and swap accounting)",
            gvisor=gvisor and seen["memory"] is None,
        ),
        _cgroup_check(
            "pids limit",
            seen["pids"] == str(profile.pids_limit),
            f"pids.max {seen['pids']}",
            "enable the pids cgroup controller",
            gvisor=gvisor and seen["pids"] is None,
        ),
        (
            "open-files limit",
            seen["nofile"] == str(profile.nofile_limit),
            f"nofile {seen['nofile']}",
            "the engine must honour ulimits",
        ),
    ]
    return [ProbeFinding(check, bool(ok), observed, fix) for check, ok, observed, fix in checks]


def _cgroup_check(
    check: str, ok: bool, seen: str, fix: str, *, gvisor: bool
) -> tuple[str, bool, str, str]:
    if gvisor:
        # gVisor shows the program no cgroup files; the engine sets the limit on the
        # sandbox's cgroup on the host, where the backend reads its counters.
        return (check, True, "set on the gVisor sandbox's cgroup (not visible inside)", "")
    return (check, ok, seen, fix)
