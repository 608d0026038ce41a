"""The deny lists' system calls by number, and how to call each so that only a filter can
refuse it: what ``test_isolation.py`` and ``test_seccomp_layers.py`` try from inside a run.

Two lists: the outer layer's deny list (:data:`SYSCALL_NUMBERS`, Docker's profile) and the
rules of the guest's second layer (:data:`GUEST_CALLS`, ``airlock_seccomp.RULES``).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import Any

from airlock.policies import FORBIDDEN_SYSCALLS, render_docker_seccomp

__all__ = [
    "ARCH_COLUMN",
    "GUEST_CALLS",
    "SYSCALL_ARGS",
    "SYSCALL_NUMBERS",
    "callable_here",
    "expected_errno",
    "guest_call_program",
    "guest_rule_keys",
]

# Numbers of every call in the deny list (x86_64, aarch64); None: the architecture has no
# such call. A name added to FORBIDDEN_SYSCALLS fails test_every_denied_call_has_a_number
# until it is added here, and from then on is tried from inside a container
# (test_isolation.py).
SYSCALL_NUMBERS: dict[str, tuple[int | None, int | None]] = {
    "acct": (163, 89),
    "add_key": (248, 217),
    "adjtimex": (159, 171),
    "bpf": (321, 280),
    "capset": (126, 91),
    "chroot": (161, 51),
    "clock_adjtime": (305, 266),
    "clock_settime": (227, 112),
    "clone3": (435, 435),
    "delete_module": (176, 106),
    "finit_module": (313, 273),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fsopen": (430, 430),
    "fspick": (433, 433),
    "init_module": (175, 105),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "io_uring_setup": (425, 425),
    "ioperm": (173, None),
    "iopl": (172, None),
    "kcmp": (312, 272),
    "kexec_file_load": (320, 294),
    "execveat": (322, 281),
    "kexec_load": (246, 104),
    "keyctl": (250, 219),
    "lookup_dcookie": (212, 18),
    "mbind": (237, 235),
    "memfd_create": (319, 279),
    "migrate_pages": (256, 238),
    "mount": (165, 40),
    "move_mount": (429, 429),
    "move_pages": (279, 239),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "open_tree": (428, 428),
    "perf_event_open": (298, 241),
    "pidfd_getfd": (438, 438),
    "pivot_root": (155, 41),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "ptrace": (101, 117),
    "quotactl": (179, 60),
    "reboot": (169, 142),
    "request_key": (249, 218),
    "set_mempolicy": (238, 237),
    "setgid": (106, 144),
    "setns": (308, 268),
    "setregid": (114, 143),
    "setresgid": (119, 149),
    "setresuid": (117, 147),
    "setreuid": (113, 145),
    "settimeofday": (164, 170),
    "setuid": (105, 146),
    "swapoff": (168, 225),
    "swapon": (167, 224),
    "syslog": (103, 116),
    "umount": (None, None),  # only 32-bit architectures have it; umount2 everywhere
    "umount2": (166, 39),
    "unshare": (272, 97),
    "userfaultfd": (323, 282),
}
ARCH_COLUMN = {"x86_64": 0, "aarch64": 1}
# Arguments with which an unprivileged call would succeed, or fail with another errno than
# EPERM, if the filter let it through: the filter, not the arguments or the missing
# privilege, must be what refuses. Every other call gets zeros. "@pid" is the caller's pid.
SYSCALL_ARGS: dict[str, list[int | str]] = {
    "unshare": [0x10000000],  # CLONE_NEWUSER: allowed to an unprivileged user elsewhere
    "ptrace": [0, 0, 0, 0],  # PTRACE_TRACEME
    "io_uring_setup": [8, "@params"],
    "setuid": [65534],
    "setgid": [65534],
    "setreuid": [-1, -1],
    "setregid": [-1, -1],
    "setresuid": [-1, -1, -1],
    "setresgid": [-1, -1, -1],
    "userfaultfd": [1],  # UFFD_USER_MODE_ONLY
    "kcmp": ["@pid", "@pid", 0, 0, 0],
    "memfd_create": ["@name", 0],  # would make an anonymous file
    "process_vm_readv": ["@pid", 0, 0, 0, 0, 0],
    "process_vm_writev": ["@pid", 0, 0, 0, 0, 0],
}


def expected_errno(name: str) -> int:
    """The errno the rendered filter answers ``name`` with (its default: EPERM)."""
    rendered = render_docker_seccomp()
    for rule in rendered["syscalls"]:
        if name in rule["names"] and rule["action"] == "SCMP_ACT_ERRNO":
            return int(rule["errnoRet"])
    return int(rendered["defaultErrnoRet"])


def callable_here() -> list[str]:
    """The denied calls this machine's architecture has, sorted."""
    column = ARCH_COLUMN.get(platform.machine())
    if column is None:
        return []
    return sorted(n for n in FORBIDDEN_SYSCALLS if SYSCALL_NUMBERS.get(n, (None, None))[column])


# The second layer's rules: (number on x86_64, aarch64) and arguments with which the call
# would succeed, or fail with another errno, if the layer let it through ("@name": a string,
# "@fds": room for two descriptors, "@self": its own pid, where the layer lets only 0 name
# it). Keyed by the rule's system call, "call (2)" for the second rule of one call
# (guest_rule_keys); a rule added to airlock_seccomp.RULES fails
# test_every_guest_rule_is_tried until it is added here.
GUEST_CALLS: dict[str, tuple[tuple[int | None, int | None], list[int | str]]] = {
    "execve": ((59, 221), ["@true", 0, 0]),  # /bin/true would replace the program
    "execveat": ((322, 281), [0, 0, 0, 0, 0]),
    "socket": ((41, 198), [1, 1, 0]),  # AF_UNIX, SOCK_STREAM: the outer layer allows it
    "socketpair": ((53, 199), [2, 1, 0, "@fds"]),  # AF_INET
    "bind": ((49, 200), [-1, 0, 0]),  # no descriptor: EBADF, where the layer lets it through
    "listen": ((50, 201), [-1, 0]),
    # SOL_SOCKET, then SO_PASSCRED and SO_PASSPIDFD, on no descriptor (EBADF otherwise)
    "setsockopt": ((54, 208), [-1, 1, 16, "@fds", 4]),
    "setsockopt (2)": ((54, 208), [-1, 1, 76, "@fds", 4]),
    "ptrace": ((101, 117), [0, 0, 0, 0]),  # PTRACE_TRACEME
    "personality": ((135, 92), [0xFFFFFFFF]),  # a query: the outer layer allows it
    "memfd_create": ((319, 279), ["@name", 0]),
    "clone3": ((435, 435), [0, 0]),
    "fork": ((57, None), []),
    "vfork": ((58, None), []),
    "clone": ((56, 220), [17, 0, 0, 0, 0]),  # SIGCHLD only: a new process, like fork
    "prlimit64": ((302, 261), ["@self", 7, 0, 0]),  # reads RLIMIT_NOFILE; glibc passes 0
    "setpriority": ((141, 140), [0, "@self", 0]),  # its own nice value, left at 0
}


def guest_rule_keys(rules: Sequence[Any]) -> list[str]:
    """The :data:`GUEST_CALLS` key of each of ``rules`` (``airlock_seccomp.RULES``), in order:
    its system call, and after it `` (n)`` for the n-th rule of the same call."""
    keys: list[str] = []
    for rule in rules:
        seen = sum(1 for other in keys if other.split(" ")[0] == rule.syscall)
        keys.append(rule.syscall if not seen else f"{rule.syscall} ({seen + 1})")
    return keys


def guest_call_program(names: list[str]) -> str:
    """A program that makes each of ``names`` (keys of :data:`GUEST_CALLS`) once and returns
    ``{name: [return value, errno]}``. It runs in both language modes (``ctypes``, ``os``
    and ``platform`` must be importable)."""
    column = ARCH_COLUMN[platform.machine()]
    calls = {
        name: (GUEST_CALLS[name][0][column], GUEST_CALLS[name][1])
        for name in names
        if GUEST_CALLS[name][0][column] is not None
    }
    return f"""
import ctypes
import os
libc = ctypes.CDLL(None, use_errno=True)
fds = ctypes.create_string_buffer(8)
special = {{"@name": ctypes.c_char_p(b"x"), "@true": ctypes.c_char_p(b"/bin/true"),
           "@fds": fds, "@self": ctypes.c_long(os.getpid())}}
runner = os.getpid()
outcomes = {{}}
for name, (number, args) in {calls!r}.items():
    ctypes.set_errno(0)
    values = [special[a] if a in special else ctypes.c_long(a) for a in args]
    rc = libc.syscall(number, *values)
    outcomes[name] = [rc, ctypes.get_errno()]
    if os.getpid() != runner:
        os.abort()
outcomes
"""
