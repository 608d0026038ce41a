"""The sandbox's system-call allow-list, rendered to Docker's seccomp JSON.

Everything not listed fails with ``EPERM`` (the default action). The list is what CPython,
its standard library and the C library need to run a program, talk over an inherited Unix
socket and start threads and child processes; it is checked by the sandbox tests, which run
real programs under it. Kernel attack surface that a program never needs stays out:
``io_uring_*``, ``ptrace``, ``mount``, ``unshare``, ``setns``, ``keyctl``, ``bpf``,
``perf_event_open``, ``userfaultfd``, module loading, ``kexec``, ``reboot``, ``memfd_create``
and ``execveat`` (a binary that is not in the image) and the like (:data:`FORBIDDEN_SYSCALLS`,
asserted absent by a test).

Some calls are allowed only with certain arguments (:data:`SECCOMP_ARGUMENT_RULES`):
``socket`` and ``socketpair`` for ``AF_UNIX`` only (the bridge is a Unix socket; every other
family, ``AF_VSOCK`` and ``AF_NETLINK`` among them, is refused), ``personality`` only to
query or to keep ``PER_LINUX``, and ``clone`` only without namespace flags. ``clone3``
answers ``ENOSYS`` so the C library falls back to ``clone``, whose flags seccomp can inspect
(``clone3`` passes them in memory, out of a filter's reach).

This is the outer layer, enforced by the container runtime. The guest runner loads a second,
stricter one before a program runs (``sandbox/guest/airlock_seccomp.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

__all__ = [
    "FORBIDDEN_SYSCALLS",
    "SECCOMP_ALLOWED_SYSCALLS",
    "SECCOMP_ARGUMENT_RULES",
    "ArgumentRule",
    "ContainerRuntime",
    "render_docker_seccomp",
    "seccomp_profile_hash",
]

ContainerRuntime = Literal["runc", "crun", "runsc"]
"""The OCI runtime a container runs under: ``runc`` or ``crun`` (Linux namespaces and the host
kernel; crun is a smaller runtime in C that starts a container with less CPU) or ``runsc``
(gVisor: a user-space kernel between the program and the host's)."""

SECCOMP_ALLOWED_SYSCALLS: Final[frozenset[str]] = frozenset(
    {
        # memory
        "brk", "mmap", "mmap2", "mprotect", "munmap", "mremap", "madvise", "mincore",
        "msync", "membarrier",
        # files and descriptors
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "preadv2", "pwritev2", "open", "openat", "close", "close_range", "creat",
        "stat", "fstat", "lstat", "newfstatat", "statx", "fstatfs", "statfs", "lseek",
        "_llseek", "access", "faccessat", "faccessat2", "getdents", "getdents64",
        "readlink", "readlinkat", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir",
        "unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat",
        "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "umask", "truncate",
        "ftruncate", "fsync", "fdatasync", "fadvise64", "fallocate", "flock", "fcntl",
        "fcntl64", "dup", "dup2", "dup3", "pipe", "pipe2", "ioctl", "sendfile",
        "copy_file_range", "splice", "tee", "utime", "utimes", "utimensat", "futimesat",
        "eventfd", "eventfd2", "getxattr", "lgetxattr", "fgetxattr",
        "listxattr", "llistxattr", "flistxattr",
        # waiting and polling
        "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1",
        "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "futex", "futex_waitv",
        "nanosleep", "clock_nanosleep", "sched_yield", "pause",
        # sockets: AF_UNIX only (SECCOMP_ARGUMENT_RULES), for the bridge and local pairs
        "socket", "socketpair", "connect", "accept", "accept4", "bind", "listen",
        "getsockname", "getpeername", "getsockopt", "setsockopt", "shutdown", "sendto",
        "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
        # processes and threads
        "clone", "fork", "vfork", "execve", "exit", "exit_group", "wait4",
        "waitid", "kill", "tgkill", "tkill", "set_tid_address", "set_robust_list",
        "get_robust_list", "rseq", "arch_prctl", "prctl", "getpid", "getppid", "gettid",
        "getpgid", "getpgrp", "getsid", "setsid", "setpgid", "getuid", "geteuid", "getgid",
        "getegid", "getresuid", "getresgid", "getgroups", "capget", "sched_getaffinity",
        "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
        "sched_get_priority_min", "getpriority", "setpriority", "getrlimit", "setrlimit",
        "prlimit64", "ugetrlimit", "getrusage", "times", "sysinfo", "uname", "personality",
        "restart_syscall",
        # the runner's second, stricter filter (filters only ever add refusals)
        "seccomp",
        # signals and time
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending",
        "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack",
        "sigreturn", "alarm", "setitimer", "getitimer", "timer_create", "timer_settime",
        "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create",
        "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4", "clock_gettime",
        "clock_getres", "clock_gettime64", "gettimeofday", "time",
        # randomness
        "getrandom",
    }
)  # fmt: skip

FORBIDDEN_SYSCALLS: Final[frozenset[str]] = frozenset(
    {
        "io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace", "mount",
        "umount", "umount2", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
        "perf_event_open", "userfaultfd", "init_module", "finit_module", "delete_module",
        "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "pivot_root",
        "chroot", "open_by_handle_at", "name_to_handle_at", "process_vm_readv",
        "process_vm_writev", "clone3", "move_mount", "open_tree", "fsopen", "fsmount",
        "fsconfig", "fspick", "setuid", "setgid", "setreuid", "setregid", "setresuid",
        "setresgid", "capset", "acct", "quotactl", "syslog", "iopl", "ioperm", "lookup_dcookie",
        "kcmp", "pidfd_getfd", "settimeofday", "clock_settime", "clock_adjtime",
        "adjtimex", "mbind", "set_mempolicy", "move_pages", "migrate_pages",
        # ways to run a binary that is not in the image: a memfd holds any ELF despite
        # ``noexec`` on /tmp, and execveat runs one from a descriptor
        "memfd_create", "execveat",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ArgumentRule:
    """An allowed call that is allowed only when one argument has one of some values."""

    index: int
    """Which argument (0: the first)."""
    values: tuple[int, ...]
    """The call is allowed when ``argument & mask`` equals one of these; refused otherwise."""
    mask: int | None = None
    """``None``: compare the whole argument (``SCMP_CMP_EQ``); else ``SCMP_CMP_MASKED_EQ``."""
    why: str
    """What the allowed values are for."""

    @property
    def op(self) -> Literal["SCMP_CMP_EQ", "SCMP_CMP_MASKED_EQ"]:
        """Docker's name of the comparison."""
        return "SCMP_CMP_EQ" if self.mask is None else "SCMP_CMP_MASKED_EQ"


_AF_UNIX: Final = 1
_PER_LINUX: Final = 0x0
_PERSONALITY_QUERY: Final = 0xFFFFFFFF
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
# | CLONE_NEWNET: a clone that asks for any of them is refused like ``unshare``.
_CLONE_NAMESPACE_FLAGS: Final = 0x7E020000

SECCOMP_ARGUMENT_RULES: Final[Mapping[str, ArgumentRule]] = MappingProxyType(
    {
        "clone": ArgumentRule(
            index=0,
            mask=_CLONE_NAMESPACE_FLAGS,
            values=(0,),
            why="threads and processes, never a new namespace",
        ),
        "personality": ArgumentRule(
            index=0,
            values=(_PER_LINUX, _PERSONALITY_QUERY),
            why="query the execution domain or keep PER_LINUX; nothing changes the ABI",
        ),
        "socket": ArgumentRule(
            index=0, values=(_AF_UNIX,), why="AF_UNIX only: the bridge is a Unix socket"
        ),
        "socketpair": ArgumentRule(
            index=0, values=(_AF_UNIX,), why="AF_UNIX only: asyncio's self-pipe is a pair"
        ),
    }
)
"""Allowed calls that are allowed only with these arguments; any other value fails with the
default errno (``EPERM``)."""

_ENOSYS: Final = 38
_EPERM: Final = 1
_ARCHITECTURES: Final = [
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X32",
    "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_ARM",
]


def render_docker_seccomp(
    allowed: frozenset[str] = SECCOMP_ALLOWED_SYSCALLS,
    *,
    runtime: ContainerRuntime = "runc",
) -> dict[str, Any]:
    """Render an allow-list as Docker's seccomp profile JSON (a dict, stable order).

    Calls of :data:`SECCOMP_ARGUMENT_RULES` get one rule per allowed value (Docker ANDs the
    conditions of one rule, so alternatives are separate rules). For ``runsc``, ``clone3``
    is passed to gVisor's kernel, which answers it ``ENOSYS`` itself: gVisor's enforcement
    of the profile answers every refusal with the default errno, and a ``clone3`` refused
    with ``EPERM`` stops the C library from starting threads (it falls back to ``clone``
    only on ``ENOSYS``). Namespaces made there would be gVisor's, never the host's.

    Raises:
        ValueError: when ``allowed`` names a forbidden system call.
    """
    leaked = sorted(allowed & FORBIDDEN_SYSCALLS)
    if leaked:
        raise ValueError(f"the seccomp allow-list must not contain {leaked!r}; remove them")
    plain = sorted(allowed - SECCOMP_ARGUMENT_RULES.keys())
    rules: list[dict[str, Any]] = [{"names": plain, "action": "SCMP_ACT_ALLOW"}]
    for name in sorted(allowed & SECCOMP_ARGUMENT_RULES.keys()):
        rule = SECCOMP_ARGUMENT_RULES[name]
        for value in rule.values:
            condition = {
                "index": rule.index,
                "value": value if rule.mask is None else rule.mask,
                "valueTwo": 0 if rule.mask is None else value,
                "op": rule.op,
            }
            rules.append({"names": [name], "action": "SCMP_ACT_ALLOW", "args": [condition]})
    if runtime == "runsc":
        rules[0]["names"] = sorted([*plain, "clone3"])
    else:
        rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": _ENOSYS})
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": _EPERM,
        "architectures": list(_ARCHITECTURES),
        "syscalls": rules,
    }


def seccomp_profile_hash(profile: dict[str, Any]) -> str:
    """SHA-256 of the profile's canonical JSON: names the exact filter in an inventory."""
    canonical = json.dumps(profile, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
