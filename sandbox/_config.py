"""The container configuration of a profile, as plain data, for whoever reports on it.

:func:`describe_container` reads the very keyword arguments the Docker backend passes to
``containers.run`` for a profile (``_container.container_config``) and says what they allow:
nothing here restates the hardening, so a change there shows up in every report built on
it (the effect inventory, its lock file and ``--check``). No Docker type leaves this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from airlock.policies import SandboxProfile
from airlock.sandbox._container import container_config

__all__ = ["ContainerConfig", "ContainerMount", "describe_container"]

# The bridge socket's host directory differs per container; only its mount point is reported.
_SOCKET_DIR: Final = Path("/nonexistent/airlock-describe")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerMount:
    """One file system mounted into the container."""

    path: str
    """Where the program sees it."""
    kind: Literal["tmpfs", "bind"]
    """``tmpfs`` (memory, gone with the container) or ``bind`` (a host directory)."""
    options: str
    """Mount options without size and mode, e.g. ``rw,noexec,nosuid,nodev`` or ``ro``."""
    size_bytes: int | None
    """The size cap of a tmpfs; ``None`` for a bind mount."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerConfig:
    """What a container of one profile is started with, as the engine is asked for it."""

    image: str
    network_mode: str
    """Docker network mode: ``none`` means no interface but loopback."""
    read_only_root: bool
    """Whether the image's file system is mounted read-only."""
    mounts: tuple[ContainerMount, ...]
    """tmpfs and bind mounts, sorted by path."""
    user: str
    """``uid:gid`` the program runs as."""
    capabilities: tuple[str, ...]
    """Linux capabilities left: the added ones when all are dropped, else ``default`` too."""
    no_new_privileges: bool
    """Whether set-uid binaries cannot gain rights."""
    environment: tuple[str, ...]
    """Names of the environment variables passed in, sorted; never their values."""
    memory_bytes: int
    swap_bytes: int
    """Swap on top of memory (0: none)."""
    cpus: float
    pids_limit: int
    open_files: int
    """The hard ``nofile`` limit."""
    seccomp_filter: Mapping[str, Any]
    """The seccomp profile handed to the engine, as Docker's JSON (empty: none)."""


def describe_container(profile: SandboxProfile, *, image: str) -> ContainerConfig:
    """The configuration the Docker backend starts a container of ``profile`` in ``image``
    with, read from the keyword arguments it passes the engine."""
    config = container_config(profile, image=image, socket_dir=_SOCKET_DIR, labels={})
    options = [str(o) for o in config.get("security_opt", [])]
    seccomp = next((o.removeprefix("seccomp=") for o in options if o.startswith("seccomp=")), "")
    ulimits = {str(u["Name"]): int(u["Hard"]) for u in config.get("ulimits", [])}
    memory = int(config.get("mem_limit", 0))
    return ContainerConfig(
        image=str(config.get("image", image)),
        network_mode=str(config.get("network_mode", "default")),
        read_only_root=bool(config.get("read_only")),
        mounts=_mounts(config),
        user=str(config.get("user", "root")),
        capabilities=_capabilities(config),
        no_new_privileges="no-new-privileges:true" in options,
        environment=tuple(sorted(config.get("environment", {}))),
        memory_bytes=memory,
        swap_bytes=max(0, int(config.get("memswap_limit", memory)) - memory),
        cpus=int(config.get("nano_cpus", 0)) / 1e9,
        pids_limit=int(config.get("pids_limit", 0)),
        open_files=ulimits.get("nofile", 0),
        seccomp_filter=json.loads(seccomp) if seccomp else {},
    )


def _mounts(config: dict[str, Any]) -> tuple[ContainerMount, ...]:
    mounts: list[ContainerMount] = []
    for path, text in dict(config.get("tmpfs", {})).items():
        parts = [p for p in str(text).split(",") if p]
        size = next((p.removeprefix("size=") for p in parts if p.startswith("size=")), None)
        mounts.append(
            ContainerMount(
                path=str(path),
                kind="tmpfs",
                options=",".join(p for p in parts if not p.startswith(("size=", "mode="))),
                size_bytes=int(size) if size is not None and size.isdigit() else None,
            )
        )
    for bind in dict(config.get("volumes", {})).values():
        mounts.append(
            ContainerMount(
                path=str(bind["bind"]), kind="bind", options=str(bind["mode"]), size_bytes=None
            )
        )
    return tuple(sorted(mounts, key=lambda m: m.path))


def _capabilities(config: dict[str, Any]) -> tuple[str, ...]:
    added = tuple(sorted(str(c) for c in config.get("cap_add", []) or []))
    if "ALL" in (config.get("cap_drop") or []):
        return added
    return ("default", *added)
