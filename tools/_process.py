"""Which host process holds something (a claimed write, a sandbox container), and whether it
still runs: the one liveness check, safe against pid reuse.

A :class:`ProcessMark` names a process by host, pid and start. A process is judged ``dead``
only when it ran on this host and no process with that pid *and that start* exists now (it
exited, is a zombie, or its pid was reused); whatever cannot be judged (another host, another
PID namespace, another kernel on a machine of the same hostname, a process it may not inspect)
is ``unknown``. Two judgements lie between (:meth:`ProcessMark.judge`): ``other_boot``, a
process of another kernel that started before this one booted (this machine before a reboot,
or a machine of this hostname that has been up longer), and ``unseen``, no such process here
where only its pid and wall-clock start are to go on (it may run in a PID namespace, or on a
machine of this hostname, that this host cannot see). What machines share (a ledger) must
take them as ``unknown``; :meth:`ProcessMark.state` reads them as ``dead``, for what only this
machine holds (a container on its engine).

A process's wall-clock start is derived from the boot time, which moves when the clock is
stepped, so two processes can compute different values for the same process: the boot id
and the start in clock ticks since boot are compared wherever the kernel offers them, and the
wall-clock start only with some slack.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import psutil

__all__ = ["Judgement", "ProcessMark", "ProcessState"]

ProcessState = Literal["alive", "dead", "unknown"]
"""Only ``dead`` lets another process take over what the marked process held."""

Judgement = Literal["alive", "dead", "other_boot", "unseen", "unknown"]
"""A :data:`ProcessState` that keeps apart the two ``dead`` verdicts another machine of this
hostname could be behind: ``other_boot`` and ``unseen``."""

_PROC: Final = Path("/proc")
_BOOT_ID: Final = _PROC / "sys" / "kernel" / "random" / "boot_id"
_STAT: Final = _PROC / "stat"
# Wall-clock start times of one process computed in two processes differ by up to a second
# (the boot time is whole seconds); a pid reused within this window is not told apart.
_WALL_CLOCK_SLACK_S: Final = 2.0


class _Gone(Exception):
    """No live process has that pid: it exited, or it is a zombie."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessMark:
    """A process, named so that a later process with the same pid is not mistaken for it."""

    host: str
    pid: int
    created: float | None
    """Wall-clock start, epoch seconds; ``None`` when not recorded."""
    start: str | None = None
    """``BOOT_ID:PID_NS:TICKS``: the start in a form that does not move with the clock, where
    the kernel offers it."""

    @classmethod
    def of(cls, pid: int | None = None) -> ProcessMark:
        """The mark of ``pid`` (default: this process).

        Raises:
            psutil.NoSuchProcess: ``pid`` does not exist.
        """
        process = psutil.Process(os.getpid() if pid is None else pid)
        here = _boot_and_pid_namespace()
        try:
            ticks = _start_ticks(process.pid)
        except _Gone:
            ticks = None
        start = None if here is None or ticks is None else f"{here[0]}:{here[1]}:{ticks}"
        return cls(
            host=socket.gethostname(), pid=process.pid, created=process.create_time(), start=start
        )

    def token(self) -> str:
        """One-string form, ``HOST@CREATED@START:PID`` (:meth:`parse` reads it back)."""
        created = "" if self.created is None else f"{self.created:.3f}"
        return f"{self.host}@{created}@{self.start or ''}:{self.pid}"

    @classmethod
    def parse(cls, token: str) -> ProcessMark | None:
        """Read a :meth:`token` (or a bare ``HOST:PID``); ``None`` when it is neither."""
        head, _, pid_text = token.rpartition(":")
        if not pid_text.isdigit() or not head:
            return None
        host, _, rest = head.partition("@")
        created_text, _, start = rest.partition("@")
        try:
            created = float(created_text) if created_text else None
        except ValueError:
            return None
        return cls(host=host, pid=int(pid_text), created=created, start=start or None)

    def state(self) -> ProcessState:
        """Whether the marked process still runs, judged on this host for what only this
        machine holds: ``other_boot`` and ``unseen`` read as ``dead`` (:meth:`judge`)."""
        judged = self.judge()
        if judged == "other_boot" or judged == "unseen":
            return "dead"
        return judged

    def judge(self) -> Judgement:
        """Whether the marked process still runs, judged on this host, keeping apart what
        another machine of this hostname could be behind (see the module's docstring)."""
        if self.host != socket.gethostname():
            return "unknown"
        mark = (self.start or "").split(":")
        here = _boot_and_pid_namespace()
        if len(mark) == 3 and mark[2].isdigit() and here is not None:
            boot, namespace, ticks_text = mark
            if boot != here[0]:
                return _other_boot_state(self.created)
            if namespace != here[1]:
                return "unknown"  # its pid names another process here, or none
            try:
                ticks = _start_ticks(self.pid)
            except _Gone:
                return "dead"
            if ticks is not None:
                return "alive" if ticks == int(ticks_text) else "dead"
            return _wall_clock_state(self.pid, self.created)  # of this PID namespace
        # Its PID namespace and kernel unknown, its pid may name another process here or none.
        state = _wall_clock_state(self.pid, self.created)
        return "unseen" if state == "dead" else state


def _other_boot_state(created: float | None) -> Judgement:
    """A process of another kernel on a host of this name: ``other_boot`` when it started
    before this boot (every process of an earlier boot of this machine is gone, but another
    machine that bears this hostname may have been up longer), else ``unknown``: another
    machine that bears this hostname (a cloned VM, replicas sharing one ledger) runs its own."""
    booted = _boot_time()
    if created is None or booted is None:
        return "unknown"
    return "other_boot" if created < booted - _WALL_CLOCK_SLACK_S else "unknown"


def _boot_time() -> float | None:
    """When this kernel booted, epoch seconds; None where /proc does not say."""
    try:
        with _STAT.open("rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _wall_clock_state(pid: int, created: float | None) -> ProcessState:
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return "dead"
        started = process.create_time()
    except psutil.NoSuchProcess:
        return "dead"
    except psutil.Error:
        return "unknown"  # not ours to inspect: leave what it holds alone
    if created is None:  # a mark without its start: the pid is all there is to go on
        return "alive"
    return "alive" if abs(started - created) <= _WALL_CLOCK_SLACK_S else "dead"


def _boot_and_pid_namespace() -> tuple[str, str] | None:
    """This kernel's boot id and this process's PID namespace: a pid means one process only
    within both. None where the kernel does not say (not Linux)."""
    try:
        boot = _BOOT_ID.read_text().strip()
        namespace = os.readlink(_PROC / "self" / "ns" / "pid")  # "pid:[4026531836]"
    except OSError:
        return None
    inode = namespace.partition("[")[2].rstrip("]")
    if not boot or not inode.isdigit():
        return None
    return boot, inode


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None where /proc does not say.

    Raises:
        _Gone: no such process, or a zombie.
    """
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        if _PROC.joinpath("self").exists():
            raise _Gone from None
        return None  # no /proc here: not Linux
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        raise _Gone
    return int(fields[19])  # field 22, starttime
