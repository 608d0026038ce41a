"""Paths of ``/proc`` and ``/sys`` a program sees empty, and starting a container with them.

Docker masks some kernel files by default (``/proc/kcore``, ``/proc/keys``, ...); the host's
boot command line and boot id are not among them, so they are masked here: they are the
plainest marks of the machine and the boot every sandbox on the host shares. Masking them does
not hide the boot. Under ``runc`` and ``crun`` the boot time (``btime`` in ``/proc/stat``) and
``/proc/uptime`` are the host's, the same in every sandbox; ``/proc/self/cgroup`` names the
container's id (Docker keeps the host's cgroup namespace on cgroup v1); and
``/proc/self/mountinfo`` shows the host path of the bridge's socket directory. SECURITY.md
lists these under "Known open". gVisor shows its own ``/proc`` (its own boot time and uptime,
no cgroup, no host path).

``/sys/fs/cgroup`` is made read-only as well: ``crun`` on cgroup v1 mounts it as a tmpfs every
user may write (``runc`` does not), where files a program leaves would reach the next program
of a reused container, and where the runner looks for its cgroup v2 limits.

docker-py's ``containers.run`` has no setting for masked or read-only paths, so
:func:`run_masked` creates the container through the engine's API with
``HostConfig.MaskedPaths`` and ``HostConfig.ReadonlyPaths`` (each replaces Docker's list: they
repeat it).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any, Final

import docker
import requests.exceptions
from docker.models import containers
from docker.models.containers import Container

from airlock.sandbox._errors import SandboxError
from airlock.sandbox._owner import remove_container

__all__ = ["MASKED_PATHS", "READONLY_PATHS", "UNANSWERED", "run_masked"]

_log = logging.getLogger(__name__)

# The split of run()'s keyword arguments into create and host-config ones that run() itself
# uses (docker-py keeps it private), so that every other setting means what it means there.
_create_args: Callable[[dict[str, Any]], dict[str, Any]] = containers._create_container_args  # type: ignore[attr-defined]

MASKED_PATHS: Final[tuple[str, ...]] = (
    # Docker's defaults (moby oci/defaults.go)
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    # which machine, which boot: shared by every sandbox on the host
    "/proc/cmdline",
    "/proc/sys/kernel/random/boot_id",
)

UNANSWERED: Final[tuple[type[BaseException], ...]] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
)
"""A create's errors that are no answer from the engine: it may have made the container all
the same, later (an API error is an answer: nothing was made)."""

READONLY_PATHS: Final[tuple[str, ...]] = (
    # Docker's defaults (moby oci/defaults.go)
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
    # a program's scratch under crun otherwise (above)
    "/sys/fs/cgroup",
)


def run_masked(
    client: docker.DockerClient,
    config: dict[str, Any],
    *,
    unanswered: Callable[[str], object] | None = None,
) -> Container:
    """Create and start a container from ``containers.run`` keyword arguments plus
    ``masked_paths``; the started container (its ``attrs`` hold only its id until reloaded).
    One the engine created but did not start, or created although the create failed (answered
    after the client's timeout: found by its name, ``airlock-`` and a random part unless
    ``name`` is given), is removed (forced) before the error is raised. When the create got
    no answer (:data:`UNANSWERED`) and no container of that name was there to remove yet
    (the engine usually is still making it), ``unanswered(name)`` is called before the error
    is raised: whoever called goes on looking for it by that name.

    Raises:
        docker.errors.DockerException: as ``containers.run`` would (a failed start's own
            error, whatever its removal did).
    """
    options = {k: v for k, v in config.items() if k not in ("detach", "masked_paths")}
    options.setdefault("command", None)
    # A name of its own, to find it by: a create answered after the client's timeout leaves
    # a container whose id nobody learns.
    name = options.setdefault("name", f"airlock-{secrets.token_hex(8)}")
    options["version"] = client.api.api_version
    arguments = _create_args(options)
    arguments["host_config"]["MaskedPaths"] = list(config.get("masked_paths", MASKED_PATHS))
    arguments["host_config"]["ReadonlyPaths"] = list(READONLY_PATHS)
    try:
        created = client.api.create_container(**arguments)
    except BaseException as exc:
        # The engine may have made it all the same (it answered too late): removed by name
        # now. One it makes later still is the caller's to look for (``unanswered``).
        if not _remove_quietly(client, name) and isinstance(exc, UNANSWERED) and unanswered:
            unanswered(name)
        raise
    try:
        client.api.start(created["Id"])
    except BaseException:
        # Nobody else learns its id: an OCI runtime error (no runner in the image), or the
        # client's timeout on an engine that starts it late, would leave it for the backend's
        # whole life, one more at each retry of a warm pool. Removed before the error is
        # raised, so that a caller retrying at once never piles them up on a slow engine.
        _remove_quietly(client, created["Id"])
        raise
    # A model of the id alone, not an inspection: one call less on every start (the engine's
    # CPU is what bounds how many runs a machine serves); whoever needs its state reloads it.
    return client.containers.prepare_model({"Id": created["Id"]})


def _remove_quietly(client: docker.DockerClient, container_id: str) -> bool:
    """Whether the engine removed the container (``False``: none was there, or the removal
    failed; logged, not raised)."""
    try:
        return remove_container(client, container_id)
    except SandboxError as exc:  # the start's error is the one to raise; close() sweeps it
        _log.warning(
            "could not remove sandbox container %s that did not start: %s", container_id, exc
        )
        return False
