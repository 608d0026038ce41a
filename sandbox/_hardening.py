"""The keyword arguments a sandbox container is created with: the hardened profile.

:func:`container_config` is the one place the container's isolation is written down: what
:class:`~airlock.sandbox._container.SandboxContainer` asks the engine for, and what
:func:`~airlock.sandbox.describe_container` reports (the inventory and its lock read it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from docker.types import LogConfig, Mount, Ulimit

from airlock.bridge import airlock_wire as wire
from airlock.policies import SandboxProfile
from airlock.sandbox._inputs import RunInput
from airlock.sandbox._masked import MASKED_PATHS
from airlock.sandbox._users import container_user

__all__ = [
    "GUEST_MOUNT",
    "WarmUp",
    "container_config",
    "container_settings",
    "mounted",
    "same_files",
    "tmpfs_files",
]

_OUT_DEPTH: Final = 9
"""Inodes one artifact may take in /out: the file and the eight directories above it the
runner collects from (deeper ones it skips)."""
GUEST_MOUNT: Final = wire.SOCKET_DIR
"""Where the bridge socket's host directory is mounted (read-only)."""

WarmUp = Literal["first", "when_idle", "never"]
"""When a container's runner warms up: ``first``, before it says hello (a pooled container);
``when_idle``, once it has waited idle after hello (a pooled container started while runs find
the pool empty: it is taken at once, or warms up once the burst is over); ``never`` (a run
waits for it: its one program is on its way)."""
_WARM_UP_FLAGS: Final[dict[WarmUp, tuple[str, ...]]] = {
    "first": (),
    "when_idle": (wire.WARM_WHEN_IDLE,),
    "never": (wire.RUN_WAITING,),
}


def container_settings(profile: SandboxProfile) -> tuple[object, ...]:
    """What of ``profile`` is fixed when a container starts (the rest travels with each run):
    a pooled or kept container serves a run only when these are the run's."""
    return (
        profile.image,
        profile.memory_bytes,
        profile.cpus,
        profile.pids_limit,
        profile.nofile_limit,
        profile.tmpfs_bytes,
        profile.user,
        profile.seccomp_allowed,
        profile.runtime,
        profile.artifact_limit_bytes,
        profile.artifact_limit_files,  # (the size and inodes of /out)
    )


def tmpfs_files(size_bytes: int) -> int:
    """Files and directories a tmpfs of ``size_bytes`` holds at most: one per KiB of room.

    Empty files take no room, only an inode each; without a cap, a program fills ``/tmp``
    with millions of them in its deadline (70,000 a second here), and clearing them for the
    next program of a kept or reused container takes seconds. (gVisor's tmpfs does not
    enforce the cap; its files count against the container's memory.)"""
    return max(1024, size_bytes // 1024)


def _out_bytes(profile: SandboxProfile) -> int:
    """The size of ``/out``: the artifact limit, and a page more for each file it allows and
    one for the runner's check. A file takes whole pages, so files that hold the limit's
    bytes or less would otherwise fill ``/out`` (and a full ``/out`` fails the run: a file
    in it may have been cut short); the bytes themselves are counted against the limit."""
    # 4 KiB whatever the host's pages, so that the size, which the effect inventory and its
    # lock report, is the same on every machine (a kernel of 64 KiB pages keeps the edge).
    return profile.artifact_limit_bytes + (profile.artifact_limit_files + 1) * 4096


def _tmpfs(size_bytes: int, *, files: int | None = None) -> str:
    files = tmpfs_files(size_bytes) if files is None else files
    return f"rw,noexec,nosuid,nodev,nr_inodes={files},size={size_bytes},mode=1777"


def mounted(inputs: tuple[RunInput, ...]) -> tuple[tuple[str, str, bool], ...]:
    """The inputs a container was created with, comparable by name and path."""
    return tuple((i.name, str(i.source), i.directory) for i in inputs)


def same_files(made: tuple[RunInput, ...], asked: tuple[RunInput, ...]) -> bool:
    """Whether a container made with the inputs ``made`` shows the very files ``asked`` are
    now: a mount holds the inode that was at the path, so a file replaced on the host since
    (``os.replace``, an editor's save) is not what the container shows."""
    return mounted(made) == mounted(asked) and all(
        m.identity == a.identity for m, a in zip(made, asked, strict=True)
    )


def _bind(entry: RunInput) -> Mount:
    # Not recursive: a recursive bind carries what is mounted under a directory input into
    # the container, and the engine makes only the top mount read-only (runc, crun). Private,
    # not the engine's default rprivate: crun (1.8) reads the "r" as a recursive bind.
    mount = Mount(
        target=entry.mount_path,
        source=str(entry.source),
        type="bind",
        read_only=True,
        propagation="private",
    )
    mount["BindOptions"] = {**mount["BindOptions"], "NonRecursive": True}
    return mount


def container_config(
    profile: SandboxProfile,
    *,
    image: str,
    socket_dir: Path,
    labels: dict[str, str],
    inputs: tuple[RunInput, ...] = (),
    warm_up: WarmUp = "first",
) -> dict[str, Any]:
    """Keyword arguments for ``containers.run``: the hardened profile, nothing optional, and
    the run's ``inputs`` bind-mounted read-only and alone, without the mounts under them (the
    engine refuses a source that does not exist, rather than creating it as ``-v`` would).
    ``warm_up``: when its runner warms up (:data:`WarmUp`)."""
    return {
        "image": image,
        "command": [f"{GUEST_MOUNT}/{wire.SOCKET_NAME}", *_WARM_UP_FLAGS[warm_up]],
        "detach": True,
        "network_mode": "none",
        # No interface but loopback either way; disabled, the engine does not build a network
        # sandbox for the container at all (a namespace runc makes instead, without the two
        # re-executions of dockerd that set it up): about half of what a start costs the machine.
        "network_disabled": True,
        "read_only": True,
        "tmpfs": {
            "/tmp": _tmpfs(profile.tmpfs_bytes),
            # Room for every file the artifact limit allows, each in directories of its own.
            wire.OUT_DIR: _tmpfs(
                _out_bytes(profile),
                files=max(
                    tmpfs_files(profile.artifact_limit_bytes),
                    profile.artifact_limit_files * _OUT_DEPTH,
                ),
            ),
        },
        "mounts": [_bind(i) for i in inputs],
        "user": container_user(profile),
        "cap_drop": ["ALL"],
        "security_opt": [
            "no-new-privileges:true",
            "seccomp=" + json.dumps(profile.docker_seccomp(), separators=(",", ":")),
        ],
        "pids_limit": profile.engine_pids_limit,
        "mem_limit": profile.memory_bytes,
        "memswap_limit": profile.memory_bytes,
        "nano_cpus": int(profile.cpus * 1e9),
        "ulimits": [
            Ulimit(name="nofile", soft=profile.nofile_limit, hard=profile.nofile_limit),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "environment": {},
        "labels": labels,
        "volumes": {str(socket_dir): {"bind": GUEST_MOUNT, "mode": "ro"}},
        # The guest's stdout is captured by the runner; anything written to the container's
        # own streams is dropped, never stored on the host.
        "log_config": LogConfig(type=LogConfig.types.NONE),
        "ipc_mode": "none",
        "runtime": profile.runtime,
        "masked_paths": list(MASKED_PATHS),
        "hostname": "sandbox",
        "working_dir": "/tmp",
    }
