"""What differs between the container runtimes a profile may choose (``runc``, ``runsc``).

Under ``runc`` the program's process is a host process: the bridge socket's peer is the
container's first process, which Docker reports as its pid. Under ``runsc`` (gVisor) the
program runs on gVisor's own kernel and reaches a host Unix socket through gVisor's file
proxy, ``runsc-gofer``: the peer the host sees is that container's gofer, a process in the
container's own cgroup.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["is_runner_peer"]


def is_runner_peer(peer_pid: int, *, runtime: str, container_pid: int, container_id: str) -> bool:
    """Whether the process at the other end of the bridge socket speaks for the container's
    runner (and for nothing else on the host). ``runtime`` is the engine's name for it."""
    if runtime != "runsc":
        return peer_pid == container_pid
    try:
        command = Path(f"/proc/{peer_pid}/cmdline").read_bytes().split(b"\0", 1)[0]
        cgroups = Path(f"/proc/{peer_pid}/cgroup").read_text()
    except OSError:
        return False
    return command.endswith(b"runsc-gofer") and f"/{container_id}" in cgroups
