"""Loading the second seccomp layer into the runner, before a program runs.

Standard library only. The layer's rules, and libseccomp's compilation of them, live in
``airlock_seccomp``; the image's build writes the compiled filters beside the runner
(:data:`FILTER_DIR`, one file of BPF per :func:`filter_name`), so that a container loads its
layer with one system call instead of importing pyseccomp (and with it ``typing``, ``re`` and
``enum``) and compiling the rules at every start. Where a filter file is missing (the runner
run outside the image) the layer is compiled here with ``airlock_seccomp``, to the same effect.

A runner that warms up makes every filter ready to load ahead (:func:`ready`): a kept
program's process, forked from it, then loads its layer with the two system calls alone.

Filters only ever add up, and ``full``'s rules are a subset of ``restricted``'s: a kept
program's process, forked before its program is known, loads ``full``'s while it waits
(:func:`confine_ahead`), then ``restricted``'s others on top when its program is restricted.
A layer that cannot be loaded ends the run before any of the program's code runs
(:func:`confine`).
"""

from __future__ import annotations

import ctypes  # here, not on a run's path: every run loads a filter
import os

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from airlock.sandbox.guest import airlock_seccomp  # noqa: F401

__all__ = [
    "FILTER_DIR",
    "SHARED",
    "confine",
    "confine_ahead",
    "filter_name",
    "ready",
    "write_filters",
]

SHARED = "full"
"""The mode whose rules every mode has."""
FILTER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccomp")
"""Where the image keeps the compiled filters."""

_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_PR_SET_NO_NEW_PRIVS = 38
_BPF_INSTRUCTION_BYTES = 8


class _Program(ctypes.Structure):
    """``struct sock_fprog``: a filter's length in instructions, and where they are."""

    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


_loaded: str | None = None
"""The mode whose layer this process has loaded (``restricted``'s holds ``full``'s)."""
_LAYERS = (("full", None), ("restricted", None), ("restricted", SHARED))
"""Every filter a runner may load: each mode's, and ``restricted``'s on top of ``full``'s."""
_ready: dict[str, _Filter] = {}
"""The filters made ready to load (:func:`ready`), by file name."""


def filter_name(mode: str, after: str | None = None) -> str:
    """The file of ``mode``'s filter; ``after``: without the rules of that mode's, loaded
    already."""
    return f"{mode}.bpf" if after is None else f"{mode}-after-{after}.bpf"


def write_filters(directory: str = FILTER_DIR) -> None:
    """Compile every filter a runner may load into ``directory`` (the image's build does)."""
    if not TYPE_CHECKING:
        import airlock_seccomp
    os.makedirs(directory, exist_ok=True)
    for mode, after in _LAYERS:
        with open(os.path.join(directory, filter_name(mode, after)), "wb") as file:
            airlock_seccomp.build(mode, after).export_bpf(file)


def _mode(mode: object) -> str:
    # Anything but an explicit "full" gets the stricter layer.
    return "full" if mode == "full" else "restricted"


def confine(mode: object, refuse: Callable[[dict[str, Any]], object]) -> None:
    """Load the layer of ``mode`` (what is not loaded yet) into this process, for good.

    On failure ``refuse`` gets the ``done`` result that reports it (it sends it and ends the
    runner); if ``refuse`` returns, the process exits: it never returns without the layer.
    """
    try:
        _load(_mode(mode))
    except Exception as exc:  # any failure means no layer: never run the program then
        message = (
            f"the sandbox's second seccomp layer did not load ({type(exc).__name__}: {exc}); "
            "the program did not run. Rebuild the image with `make image`."
        )
        refuse(
            {
                "status": "error",
                "exit_status": 1,
                "has_value": False,
                "value": None,
                "stdout": "",
                "stderr": "",
                "truncated": False,
                "limit": None,
                "error": {"type": "ConfinementError", "message": message},
            }
        )
        os._exit(4)


def confine_ahead() -> None:
    """Load the rules every mode shares, before the program (and so its mode) is known; a
    failure is left for :func:`confine` to meet again and report."""
    try:
        _load(SHARED)
    except Exception:
        return


def ready() -> None:
    """Read every compiled filter and make it ready to load, in this process and in every
    process it forks afterwards: a kept program's process then loads its layer with two
    system calls, with none of the reading and ``ctypes`` set-up: in a process just forked,
    where every first touch of a page costs, that was about 0.4 ms of the 1.1 ms from its
    fork to its layer loaded. A filter missing or unreadable is left to :func:`confine`."""
    for mode, after in _LAYERS:
        name = filter_name(mode, after)
        try:
            with open(os.path.join(FILTER_DIR, name), "rb") as file:
                _ready[name] = _Filter(file.read())
        except (OSError, ValueError):  # met again, and reported, when it is loaded
            continue


def _load(mode: str) -> None:
    global _loaded
    if _loaded in (mode, "restricted"):
        return
    after = _loaded
    name = filter_name(mode, after)
    compiled = _ready.get(name)
    if compiled is None:
        try:
            with open(os.path.join(FILTER_DIR, name), "rb") as file:
                compiled = _Filter(file.read())
        except FileNotFoundError:
            if not TYPE_CHECKING:  # outside the image: compiled here
                import airlock_seccomp
            airlock_seccomp.build(mode, after).load()
    if compiled is not None:
        compiled.load()
    _loaded = mode


class _Filter:
    """A compiled filter, made ready to load into every thread of the process that calls
    :meth:`load` (``TSYNC``), as libseccomp would: no new privileges first, then
    ``seccomp(SET_MODE_FILTER)``."""

    def __init__(self, program: bytes) -> None:
        number = _SYS_SECCOMP.get(os.uname().machine)
        if number is None or not program or len(program) % _BPF_INSTRUCTION_BYTES:
            raise ValueError(f"no filter of {len(program)} bytes loads on {os.uname().machine}")
        libc = ctypes.CDLL(None, use_errno=True)
        self._prctl, self._syscall = libc.prctl, libc.syscall
        self._code = ctypes.create_string_buffer(program, len(program))
        self._fprog = _Program(len(program) // _BPF_INSTRUCTION_BYTES, ctypes.addressof(self._code))
        # Both are variadic in C: each argument passed at the width the kernel reads.
        unused = ctypes.c_ulong(0)
        self._no_new_privs = (
            ctypes.c_int(_PR_SET_NO_NEW_PRIVS),
            ctypes.c_ulong(1),
            unused,
            unused,
            unused,
        )
        self._set_filter = (
            ctypes.c_long(number),
            ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
            ctypes.c_ulong(_SECCOMP_FILTER_FLAG_TSYNC),
            ctypes.byref(self._fprog),
        )

    def load(self) -> None:
        if self._prctl(*self._no_new_privs):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        answer = self._syscall(*self._set_filter)
        if answer < 0:
            raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER)")
        if answer > 0:  # TSYNC names the thread it could not synchronise
            raise OSError(f"seccomp: thread {answer} could not take the filter")
