"""Which host process owns a sandbox container, and reaping the containers of dead owners.

Every container this package starts carries these labels::

    io.airlock.sandbox      "1"
    io.airlock.owner        "HOST/PID/CREATED/NONCE"  CREATED: the owner's start, epoch seconds
    io.airlock.owner.start  "BOOT_ID:PID_NS:TICKS"    Linux: the owner's start, clock-independent

Several airlock processes may share one engine (two test runs, tests and a benchmark, a server
and a CLI). At start-up each removes the containers of owners that are gone, and nothing else:
a container is an orphan only when its owner ran on this host and no process with that pid
and that start exists now (it exited, is a zombie, or its pid was reused, or the machine has
rebooted since), or it is a closed backend's of this very process (:func:`retire`: a removal
its close() gave up waiting for, on an engine slow to answer). Whatever cannot be judged
(another host, another PID namespace, a label this version cannot read, a process it may not
inspect) is left alone.

Whether an owner still runs is judged by :class:`airlock.tools.ProcessMark`, the one
liveness check (the write path's leases use it too): the labels are a mark written out.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any, Final

import docker
import docker.errors

from airlock.sandbox._errors import SandboxError, map_docker_errors
from airlock.tools import ProcessMark, ProcessState

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
    "retire",
]

LABEL: Final = "io.airlock.sandbox"
OWNER_LABEL: Final = "io.airlock.owner"
START_LABEL: Final = "io.airlock.owner.start"

OwnerState = ProcessState
"""``dead`` is the only state whose containers are removed."""

_log = logging.getLogger(__name__)
_retired: set[str] = set()
"""Owner labels of this process's closed backends: nothing runs in their containers."""


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """The owner labels of a new identity for ``pid`` (default: this process).

    ``OWNER_LABEL`` holds the host name, pid and start time, and a nonce that keeps two
    backends in one process from removing each other's containers; ``START_LABEL``, where the
    kernel offers it, the start in a form that does not move with the wall clock.

    Raises:
        psutil.NoSuchProcess: ``pid`` does not exist.
    """
    mark = ProcessMark.of(pid)
    labels = {OWNER_LABEL: f"{mark.host}/{mark.pid}/{mark.created:.3f}/{uuid.uuid4().hex[:12]}"}
    if mark.start is not None:
        labels[START_LABEL] = mark.start
    return labels


def owner_label() -> str:
    """A new owner identity for this process (the value of ``OWNER_LABEL``)."""
    return owner_labels()[OWNER_LABEL]


def owner_state(labels: Mapping[str, str]) -> OwnerState:
    """Whether the process named by a container's ``labels`` still runs, judged on this host."""
    host, _, rest = labels.get(OWNER_LABEL, "").partition("/")
    pid_text, _, rest = rest.partition("/")
    created_text, _, _nonce = rest.partition("/")
    try:
        created = float(created_text)
    except ValueError:
        return "unknown"  # a label this version cannot read: leave its containers alone
    if not pid_text.isdigit():
        return "unknown"
    start = labels.get(START_LABEL) or None
    return ProcessMark(host=host, pid=int(pid_text), created=created, start=start).state()


def retire(owner: str) -> None:
    """Mark ``owner`` (an ``OWNER_LABEL`` value of this process) closed: the next reaper removes
    whatever of its containers is still on the engine, although this process lives on."""
    _retired.add(owner)


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
    """Remove sandbox containers whose owning process on this host no longer exists, and
    those of this process's closed backends (:func:`retire`).

    Containers of live processes, of other hosts sharing the engine and of owners that cannot
    be judged are left alone. A container that another process removes first is not an error.
    Returns the ids this call removed.

    Raises:
        SandboxError: the engine could not list the containers.
    """
    removed = []
    for entry in labelled_containers(client):
        labels = entry.get("Labels") or {}
        if owner_state(labels) != "dead" and labels.get(OWNER_LABEL) not in _retired:
            continue
        container_id = str(entry["Id"])
        try:
            if remove_container(client, container_id):
                removed.append(container_id)
        except SandboxError as exc:  # one stuck orphan must not stop a start-up
            _log.warning("could not remove orphaned sandbox container %s: %s", container_id, exc)
    return removed
