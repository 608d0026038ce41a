"""The sandbox's system-call allow-list, rendered to Docker's seccomp JSON.

Everything not listed fails with ``EPERM`` (the default action). The list is what CPython,
its standard library and the C library need to run a program, talk over an inherited Unix
socket and start threads and child processes; it is checked by the sandbox tests, which run
real programs under it. Kernel attack surface that a program never needs stays out:
``io_uring_*``, ``ptrace``, ``mount``, ``unshare``, ``setns``, ``keyctl``, ``bpf``,
``perf_event_open``, ``userfaultfd``, module loading, ``kexec``, ``reboot`` and the like
(:data:`FORBIDDEN_SYSCALLS`, asserted absent by a test).

``clone`` is allowed only without namespace flags, and ``clone3`` answers ``ENOSYS`` so the
C library falls back to ``clone``, whose flags seccomp can inspect (``clone3`` passes them
in memory, out of a filter's reach).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

__all__ = [
    "FORBIDDEN_SYSCALLS",
    "SECCOMP_ALLOWED_SYSCALLS",
    "render_docker_seccomp",
    "seccomp_profile_hash",
]

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
        "memfd_create", "eventfd", "eventfd2", "getxattr", "lgetxattr", "fgetxattr",
        "listxattr", "llistxattr", "flistxattr",
        # waiting and polling
        "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1",
        "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "futex", "futex_waitv",
        "nanosleep", "clock_nanosleep", "sched_yield", "pause",
        # sockets: only the inherited bridge socket and local pairs are usable, because the
        # container has no network interface besides loopback-less ``none``
        "socket", "socketpair", "connect", "accept", "accept4", "bind", "listen",
        "getsockname", "getpeername", "getsockopt", "setsockopt", "shutdown", "sendto",
        "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
        # processes and threads
        "clone", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4",
        "waitid", "kill", "tgkill", "tkill", "set_tid_address", "set_robust_list",
        "get_robust_list", "rseq", "arch_prctl", "prctl", "getpid", "getppid", "gettid",
        "getpgid", "getpgrp", "getsid", "setsid", "setpgid", "getuid", "geteuid", "getgid",
        "getegid", "getresuid", "getresgid", "getgroups", "capget", "sched_getaffinity",
        "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
        "sched_get_priority_min", "getpriority", "setpriority", "getrlimit", "setrlimit",
        "prlimit64", "ugetrlimit", "getrusage", "times", "sysinfo", "uname", "personality",
        "restart_syscall",
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
    }
)  # fmt: skip

# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
# | CLONE_NEWNET: a clone that asks for any of them is refused like ``unshare``.
_CLONE_NAMESPACE_FLAGS: Final = 0x7E020000
_ENOSYS: Final = 38
_EPERM: Final = 1
_ARCHITECTURES: Final = [
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X32",
    "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_ARM",
]


def render_docker_seccomp(allowed: frozenset[str] = SECCOMP_ALLOWED_SYSCALLS) -> dict[str, Any]:
    """Render an allow-list as Docker's seccomp profile JSON (a dict, stable order).

    Raises:
        ValueError: when ``allowed`` names a forbidden system call.
    """
    leaked = sorted(allowed & FORBIDDEN_SYSCALLS)
    if leaked:
        raise ValueError(f"the seccomp allow-list must not contain {leaked!r}; remove them")
    plain = sorted(allowed - {"clone"})
    rules: list[dict[str, Any]] = [{"names": plain, "action": "SCMP_ACT_ALLOW"}]
    if "clone" in allowed:
        rules.append(
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ALLOW",
                "args": [
                    {
                        "index": 0,
                        "value": _CLONE_NAMESPACE_FLAGS,
                        "valueTwo": 0,
                        "op": "SCMP_CMP_MASKED_EQ",
                    }
                ],
            }
        )
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
