"""Which host process owns a sandbox container, and reaping the containers of dead owners.

Every container this package starts carries these labels::

    io.airlock.sandbox      "1"
    io.airlock.owner        "HOST/PID/CREATED/NONCE"  CREATED: the owner's start, epoch seconds
    io.airlock.owner.start  "BOOT_ID:PID_NS:TICKS"    Linux: the owner's start, clock-independent

Several airlock processes may share one engine (two test runs, tests and a benchmark, a server
and a CLI). At start-up each removes the containers of owners that are gone, and nothing else:
a container is an orphan only when its owner ran on this host and no process with that pid
and that start exists now (it exited, is a zombie, or its pid was reused, or the machine has
rebooted since). Whatever cannot be judged (another host, another PID namespace, a label this
version cannot read, a process it may not inspect) is left alone.

A process's wall-clock start time is derived from the boot time, which moves when the clock is
stepped, so two processes can compute different values for the same process: the boot id and
the start in clock ticks since boot are compared instead wherever the kernel offers them, and
the wall-clock value only with some slack.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import docker
import docker.errors
import psutil

from airlock.sandbox._errors import SandboxError, map_docker_errors

__all__ = [
    "LABEL",
    "OWNER_LABEL",
    "START_LABEL",
    "OwnerState",
    "labelled_containers",
    "owner_label",
    "owner_labels",
    "owner_state",
    "reap_orphans",
    "remove_container",
]

LABEL: Final = "io.airlock.sandbox"
OWNER_LABEL: Final = "io.airlock.owner"
START_LABEL: Final = "io.airlock.owner.start"

OwnerState = Literal["alive", "dead", "unknown"]
"""``dead`` is the only state whose containers are removed."""

_PROC: Final = Path("/proc")
_BOOT_ID: Final = _PROC / "sys" / "kernel" / "random" / "boot_id"
# Wall-clock start times of one process computed in two processes differ by up to a second
# (the boot time is whole seconds); a pid reused within this window is not told apart.
_WALL_CLOCK_SLACK_S: Final = 2.0
_log = logging.getLogger(__name__)


class _Gone(Exception):
    """No live process has that pid: it exited, or it is a zombie."""


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


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """The owner labels of a new identity for ``pid`` (default: this process).

    ``OWNER_LABEL`` holds the host name, pid and start time, and a nonce that keeps two
    backends in one process from removing each other's containers; ``START_LABEL``, where the
    kernel offers it, the start in a form that does not move with the wall clock.

    Raises:
        psutil.NoSuchProcess: ``pid`` does not exist.
    """
    process = psutil.Process(os.getpid() if pid is None else pid)
    owner = (
        f"{socket.gethostname()}/{process.pid}/{process.create_time():.3f}/{uuid.uuid4().hex[:12]}"
    )
    labels = {OWNER_LABEL: owner}
    here = _boot_and_pid_namespace()
    try:
        ticks = _start_ticks(process.pid)
    except _Gone:
        ticks = None
    if here is not None and ticks is not None:
        boot, namespace = here
        labels[START_LABEL] = f"{boot}:{namespace}:{ticks}"
    return labels


def owner_label() -> str:
    """A new owner identity for this process (the value of ``OWNER_LABEL``)."""
    return owner_labels()[OWNER_LABEL]


def owner_state(labels: Mapping[str, str]) -> OwnerState:
    """Whether the process named by a container's ``labels`` still runs, judged on this host."""
    host, _, rest = labels.get(OWNER_LABEL, "").partition("/")
    pid_text, _, rest = rest.partition("/")
    created_text, _, _nonce = rest.partition("/")
    if host != socket.gethostname() or not pid_text.isdigit():
        return "unknown"
    pid = int(pid_text)
    mark = labels.get(START_LABEL, "").split(":")
    here = _boot_and_pid_namespace()
    if len(mark) == 3 and mark[2].isdigit() and here is not None:
        boot, namespace, ticks_text = mark
        if boot != here[0]:
            return "dead"  # every process of an earlier boot is gone
        if namespace != here[1]:
            return "unknown"  # its pid names another process here, or none
        try:
            ticks = _start_ticks(pid)
        except _Gone:
            return "dead"
        if ticks is not None:
            return "alive" if ticks == int(ticks_text) else "dead"
    return _wall_clock_state(pid, created_text)


def _wall_clock_state(pid: int, created_text: str) -> OwnerState:
    try:
        created = float(created_text)
    except ValueError:
        return "unknown"
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return "dead"
        started = process.create_time()
    except psutil.NoSuchProcess:
        return "dead"
    except psutil.Error:
        return "unknown"  # not ours to inspect: keep its containers
    return "alive" if abs(started - created) <= _WALL_CLOCK_SLACK_S else "dead"


def labelled_containers(
    client: docker.DockerClient, *, owner: str | None = None
) -> list[dict[str, Any]]:
    """Sandbox containers on the engine (only ``owner``'s when given), as the engine lists
    them: ``Id``, ``Labels``, ``State``, ...

    One listing call and no inspection of each container, so a container another process
    removes meanwhile cannot fail it.

    Raises:
        SandboxError: the engine failed.
    """
    label = LABEL if owner is None else f"{OWNER_LABEL}={owner}"
    with map_docker_errors():
        listed = client.api.containers(all=True, filters={"label": [label]})
    return list(listed)


def remove_container(client: docker.DockerClient, container_id: str) -> bool:
    """Force-remove a container; False when it is gone or being removed by someone else.

    Raises:
        SandboxError: the engine refused for another reason.
    """
    with map_docker_errors():
        try:
            client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "removal already in progress"
                return False
            raise
    return True


def reap_orphans(client: docker.DockerClient) -> list[str]:
    """Remove sandbox containers whose owning process on this host no longer exists.

    Containers of live processes, of other hosts sharing the engine and of owners that cannot
    be judged are left alone. A container that another process removes first is not an error.
    Returns the ids this call removed.

    Raises:
        SandboxError: the engine could not list the containers.
    """
    removed = []
    for entry in labelled_containers(client):
        labels = entry.get("Labels") or {}
        if owner_state(labels) != "dead":
            continue
        container_id = str(entry["Id"])
        try:
            if remove_container(client, container_id):
                removed.append(container_id)
        except SandboxError as exc:  # one stuck orphan must not stop a start-up
            _log.warning("could not remove orphaned sandbox container %s: %s", container_id, exc)
    return removed
