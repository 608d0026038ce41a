"""A uid and gid of each container's own, for a profile whose ``user`` is ``distinct``.

Containers run without a user namespace, so what the kernel counts per uid is shared by
every process of that uid on the host: pipe buffers against ``fs.pipe-user-pages-soft``
(spent, every new pipe of the uid holds 8 KiB and none can be enlarged), pending signals
against ``RLIMIT_SIGPENDING``. A uid per container keeps each program to its own budget.

Uids are taken in turn from a range of 268 million that hosts leave unassigned (above their
users, user namespaces and systemd-nspawn's containers; below systemd's "foreign" range),
starting at a random point in each process (and again in a forked child), so containers of
one process never share one and two processes meet only if their starting points fall
within as many starts of each other. A uid or gid the host knows (its
``passwd`` or ``group`` names it) is passed over: such a uid owns files on the host.
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import threading
from typing import Final

from airlock.policies import DISTINCT_USER, SandboxProfile, UsageError

__all__ = ["container_user"]

FIRST_UID: Final = 0x7000_0000
"""The first uid taken (1,879,048,192): above the uids of users, of ``/etc/subuid`` ranges
on common hosts and of systemd-nspawn's containers (up to ``0x6FFFFFFF``)."""
UID_COUNT: Final = 0x0FFE_0000
"""Uids in the range (268,304,384): it ends below systemd's "foreign" range
(``0x7FFE0000``) and below 2**31, which some tools read as a negative number."""
_MAX_PASSED_OVER: Final = 1000


class _Uids:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        self.restart()

    def restart(self) -> None:
        self._lock = threading.Lock()  # (a forked child may inherit it held)
        self._next = secrets.randbelow(UID_COUNT)

    def take(self) -> int:
        with self._lock:
            for _ in range(_MAX_PASSED_OVER):
                uid = FIRST_UID + self._next
                self._next = (self._next + 1) % UID_COUNT
                if not _known_to_host(uid):
                    return uid
        raise UsageError(
            f"{_MAX_PASSED_OVER} uids in a row from {FIRST_UID} up are users or groups of this "
            "host; give the sandbox profile a fixed 'uid:gid' as its user"
        )


def _known_to_host(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        try:
            grp.getgrgid(uid)
        except KeyError:
            return False
    return True


_uids = _Uids()
os.register_at_fork(after_in_child=_uids.restart)


def container_user(profile: SandboxProfile) -> str:
    """The ``uid:gid`` one new container of ``profile`` runs as: a pair of its own when the
    profile's user is ``distinct``, else the profile's."""
    if profile.user != DISTINCT_USER:
        return profile.user
    uid = _uids.take()
    return f"{uid}:{uid}"
