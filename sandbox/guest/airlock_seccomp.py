"""The second seccomp layer: a stricter filter the runner loads before a program runs.

Standard library plus ``pyseccomp`` (libseccomp's Python binding over ctypes, shipped in the
image as a wheel, over the image's ``libseccomp2``). Docker's profile, generated from the
host's allow-list, stays the outer layer; this one refuses, for the rest of the runner's
life and in every thread (``TSYNC``), what a program never needs once the runner is
connected to the bridge:

- ``execve``/``execveat``: no program but the runner's interpreter runs;
- ``socket`` of any family (the bridge is connected already) and ``socketpair`` of any family
  but ``AF_UNIX`` (asyncio's self-pipe is an ``AF_UNIX`` pair, which reaches nothing);
- ``bind`` and ``listen``, and ``setsockopt`` of ``SO_PASSCRED`` or ``SO_PASSPIDFD`` (at
  ``SOL_SOCKET``): no program names a socket, neither itself nor by autobind, which Linux
  does to an ``AF_UNIX`` socket with either option set when it sends (datagram, seqpacket) or
  connects (an abstract name lives in the container's network namespace, not in a process,
  so it could carry data to the next program of a kept container); the runner never binds
  nor sets either option, and neither does asyncio;
- ``ptrace``, ``personality``, ``memfd_create``;
- ``prlimit64`` but with pid 0 (the calling process), and ``setpriority`` (the runner runs
  as the same user, and its limits and priority are every later program's);
- in ``restricted`` mode, new processes: ``fork``, ``vfork`` and ``clone`` without
  ``CLONE_THREAD`` (threads stay allowed).

``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``, whose flags a filter
can read. The rules are data (:data:`RULES`); the host renders the same list as libseccomp's
PFC text (:func:`export_pfc`) for ``airlock doctor`` and the effect inventory.

Here the rules are compiled (:func:`build`): by the image's build, into the files of BPF a
runner loads (``airlock_confine``, which compiles them itself only where those are missing),
and on the host, to render them.
"""

from __future__ import annotations

import errno
import sys
import types
from typing import Any, NamedTuple

_LIBRARIES = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}
"""The libraries pyseccomp loads, by the names the image's (Debian's) have."""


def _import_pyseccomp() -> Any:
    """pyseccomp, which finds its libraries with ``ctypes.util.find_library``: that imports
    subprocess, shutil and tempfile and runs ``ldconfig`` twice, about 15 ms of CPU in every
    container before its first program. Its lookups are answered from :data:`_LIBRARIES`
    instead (a name not there is not found); ``ctypes.util`` stays unimported for whoever
    imports it later."""
    import ctypes

    known = types.ModuleType("ctypes.util")
    known.find_library = _LIBRARIES.get  # type: ignore[attr-defined]
    sys.modules["ctypes.util"] = known
    setattr(ctypes, "util", known)  # noqa: B010  # what "import ctypes.util" then reads
    try:
        import pyseccomp
    finally:
        del sys.modules["ctypes.util"]
        vars(ctypes).pop("util", None)
    return pyseccomp


try:
    pyseccomp = _import_pyseccomp()
except Exception as exc:  # reported by build(): a runner then runs nothing
    pyseccomp = None
    _IMPORT_ERROR: Exception | None = exc
else:
    _IMPORT_ERROR = None

__all__ = [
    "MODES",
    "RULES",
    "ConfinementError",
    "GuestRule",
    "build",
    "export_pfc",
]

MODES = ("restricted", "full")
_AF_UNIX = 1
_CLONE_THREAD = 0x00010000
_SOL_SOCKET = 1
_SO_PASSCRED = 16
_SO_PASSPIDFD = 76
_INT = 0xFFFFFFFF
"""An ``int`` argument's bits: the kernel reads no more of the register, so neither may a rule."""

Condition = tuple[int, str, int, int]
"""(argument index, ``"ne"`` or ``"masked_eq"``, a, b): holds when ``arg != a`` (``ne``) or
when ``arg & a == b`` (``masked_eq``)."""


class GuestRule(NamedTuple):
    """One refusal of the second layer."""

    syscall: str
    errno: int
    """What the refused call answers (``EPERM``; ``ENOSYS`` for ``clone3``)."""
    when: tuple[Condition, ...] | None
    """``None``: always; else refused when every one of these conditions holds."""
    modes: tuple[str, ...]
    """The language modes the refusal applies to."""
    why: str


RULES: tuple[GuestRule, ...] = (
    GuestRule("execve", errno.EPERM, None, MODES, "no program but the runner's interpreter"),
    GuestRule("execveat", errno.EPERM, None, MODES, "no binary from a descriptor"),
    GuestRule("socket", errno.EPERM, None, MODES, "the bridge is connected; no new socket"),
    GuestRule(
        "socketpair", errno.EPERM, ((0, "ne", _AF_UNIX, 0),), MODES, "AF_UNIX pairs only (asyncio)"
    ),
    GuestRule("bind", errno.EPERM, None, MODES, "no program names a socket itself"),
    GuestRule("listen", errno.EPERM, None, MODES, "no program listens on a socket"),
    *(
        GuestRule(
            "setsockopt",
            errno.EPERM,
            ((1, "masked_eq", _INT, _SOL_SOCKET), (2, "masked_eq", _INT, option)),
            MODES,
            f"no {name}: with it, a socket that sends or connects is named by autobind",
        )
        for name, option in (("SO_PASSCRED", _SO_PASSCRED), ("SO_PASSPIDFD", _SO_PASSPIDFD))
    ),
    GuestRule("ptrace", errno.EPERM, None, MODES, "no tracing of any process"),
    GuestRule("personality", errno.EPERM, None, MODES, "the execution domain stays as it is"),
    GuestRule("memfd_create", errno.EPERM, None, MODES, "no anonymous executable files"),
    GuestRule("clone3", errno.ENOSYS, None, MODES, "the C library falls back to clone"),
    # The zygote runs as the same user, and every later program's process inherits its
    # limits and priority: a program may lower its own limits, and changes nothing else.
    GuestRule("prlimit64", errno.EPERM, ((0, "ne", 0, 0),), MODES, "its own limits only"),
    GuestRule("setpriority", errno.EPERM, None, MODES, "the priority stays the runner's"),
    GuestRule("fork", errno.EPERM, None, ("restricted",), "no new process"),
    GuestRule("vfork", errno.EPERM, None, ("restricted",), "no new process"),
    GuestRule(
        "clone",
        errno.EPERM,
        ((0, "masked_eq", _CLONE_THREAD, 0),),
        ("restricted",),
        "a clone without CLONE_THREAD is a new process; threads stay allowed",
    ),
)


class ConfinementError(Exception):
    """The second seccomp layer could not be built: no program may run."""


def build(mode: str, after: str | None = None) -> Any:
    """A libseccomp filter of the rules for ``mode`` (default: allow; the outer layer is
    Docker's); ``after``: without the rules of that mode, which the process holds already.

    Raises:
        ConfinementError: pyseccomp is not importable here.
    """
    seccomp = pyseccomp
    if seccomp is None:
        raise ConfinementError(f"pyseccomp is not importable: {_IMPORT_ERROR}")
    operators = {"ne": seccomp.NE, "masked_eq": seccomp.MASKED_EQ}
    layer = seccomp.SyscallFilter(seccomp.ALLOW)
    # Every thread of the runner, not only the calling one; a foreign architecture's calls
    # (which the rules would not match) are all refused. EPERM rather than a kill: gVisor's
    # seccomp has no "kill process", and one filter, the same everywhere, is what the host
    # renders for a person to read.
    layer.set_attr(seccomp.Attr.CTL_TSYNC, 1)
    layer.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.ERRNO(errno.EPERM))
    if seccomp.system_arch() == seccomp.Arch.X86_64:
        # x32 calls carry x86_64's architecture tag with bit 30 set in the number: without
        # their own section they would match no rule and be allowed.
        layer.add_arch(seccomp.Arch.X32)
    for rule in RULES:
        if mode not in rule.modes or after in rule.modes:
            continue
        action = seccomp.ERRNO(rule.errno)
        if rule.when is None:
            layer.add_rule(action, rule.syscall)
        else:
            arguments = [seccomp.Arg(i, operators[op], a, b) for i, op, a, b in rule.when]
            layer.add_rule(action, rule.syscall, *arguments)
    return layer


def _mode(mode: object) -> str:
    # Anything but an explicit "full" gets the stricter layer.
    return "full" if mode == "full" else "restricted"


def export_pfc(mode: str) -> str:
    """libseccomp's PFC text of the layer a fresh runner loads for ``mode`` (this machine's
    architecture): the exact filter, for a person to read.

    Raises:
        ConfinementError: ``pyseccomp`` or libseccomp is not available here.
    """
    import tempfile  # for this reading only: it imports random, and random hashing

    try:
        layer = build(_mode(mode))
        with tempfile.TemporaryFile("w+") as out:
            layer.export_pfc(out)
            out.seek(0)
            return out.read()
    except (ConfinementError, OSError, RuntimeError) as exc:
        raise ConfinementError(f"cannot render the second seccomp layer: {exc}") from exc
