"""The container configuration of a profile, as plain data, for whoever reports on it.

:func:`describe_container` reads the very keyword arguments the Docker backend passes to
``containers.run`` for a profile (``_hardening.container_config``) and says what they allow:
nothing here restates the hardening, so a change there shows up in every report built on
it (the effect inventory, its lock file and ``--check``). A setting no field of its own
describes (``privileged``, ``pid_mode``, ``devices``, an AppArmor option, a key added
tomorrow) is still reported, as a line of :attr:`ContainerConfig.other_settings`. No Docker
type leaves this module.

:func:`describe_guest_filter` renders the second seccomp layer, which the guest runner loads
before a program runs, from the very rule list the image ships (``airlock_seccomp.RULES``),
as libseccomp's PFC text when ``pyseccomp`` and libseccomp are importable here.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from airlock.policies import DISTINCT_USER, LanguageMode, SandboxProfile
from airlock.sandbox._hardening import container_config
from airlock.sandbox.guest import airlock_seccomp

__all__ = [
    "ContainerConfig",
    "ContainerMount",
    "GuestFilter",
    "GuestFilterRule",
    "describe_container",
    "describe_guest_filter",
]

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
    """``uid:gid`` the program runs as, or ``distinct``: a pair of each container's own."""
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
    runtime: str
    """The OCI runtime: ``runc`` or ``runsc`` (gVisor)."""
    masked_paths: tuple[str, ...]
    """Kernel files the program sees empty, sorted."""
    guest_filter: GuestFilter
    """The second seccomp layer the runner loads for the profile's language mode."""
    other_settings: tuple[str, ...]
    """Every other setting, one ``key: canonical JSON`` line each, sorted: the keys no field
    above describes, the security options besides the seccomp filter and
    ``no-new-privileges``, and the ulimits besides ``nofile``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GuestFilterRule:
    """One refusal of the second seccomp layer."""

    syscall: str
    errno: str
    """What the refused call answers, by name (``EPERM``, ``ENOSYS``)."""
    when: str
    """``always``, or the argument condition under which the call is refused."""
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GuestFilter:
    """The second seccomp layer of one language mode: its rules and the exact filter."""

    mode: LanguageMode
    rules: tuple[GuestFilterRule, ...]
    pfc: str | None
    """libseccomp's PFC text of the filter for this machine's architecture; ``None`` when
    ``pyseccomp`` or libseccomp is not available on this host."""


def describe_container(profile: SandboxProfile, *, image: str) -> ContainerConfig:
    """The configuration the Docker backend starts a container of ``profile`` in ``image``
    with, read from the keyword arguments it passes the engine."""
    config = container_config(profile, image=image, socket_dir=_SOCKET_DIR, labels={})
    options = [str(o) for o in config.get("security_opt", [])]
    seccomp = next((o for o in options if o.startswith("seccomp=")), None)
    seccomp_filter = _seccomp_json(seccomp)  # None: no option, or one that is no filter
    ulimits = {str(u["Name"]): int(u["Hard"]) for u in config.get("ulimits", [])}
    memory = int(config.get("mem_limit", 0))
    return ContainerConfig(
        image=str(config.get("image", image)),
        network_mode=str(config.get("network_mode", "default")),
        read_only_root=bool(config.get("read_only")),
        mounts=_mounts(config),
        # (not the uid this description's config took: each container takes its own)
        user=profile.user if profile.user == DISTINCT_USER else str(config.get("user", "root")),
        capabilities=_capabilities(config),
        no_new_privileges="no-new-privileges:true" in options,
        environment=tuple(sorted(config.get("environment", {}))),
        memory_bytes=memory,
        swap_bytes=max(0, int(config.get("memswap_limit", memory)) - memory),
        cpus=int(config.get("nano_cpus", 0)) / 1e9,
        pids_limit=int(config.get("pids_limit", 0)),
        open_files=ulimits.get("nofile", 0),
        seccomp_filter=seccomp_filter or {},
        runtime=str(config.get("runtime") or "runc"),
        masked_paths=tuple(sorted(str(p) for p in config.get("masked_paths", []))),
        guest_filter=describe_guest_filter(profile.language_mode),
        # The filter's option is described when it reads as one (not "seccomp=unconfined").
        other_settings=_other_settings(
            config,
            options=[o for o in options if o != "no-new-privileges:true"],
            seccomp=seccomp if seccomp_filter is not None else None,
        ),
    )


def describe_guest_filter(mode: LanguageMode) -> GuestFilter:
    """The second seccomp layer a runner loads for a program in ``mode``."""
    rules = tuple(
        GuestFilterRule(
            syscall=rule.syscall,
            errno=errno.errorcode.get(rule.errno, str(rule.errno)),
            when=_condition(rule.when),
            why=rule.why,
        )
        for rule in airlock_seccomp.RULES
        if mode in rule.modes
    )
    try:
        pfc: str | None = airlock_seccomp.export_pfc(mode)
    except airlock_seccomp.ConfinementError:
        pfc = None
    return GuestFilter(mode=mode, rules=rules, pfc=pfc)


def _condition(when: tuple[tuple[int, str, int, int], ...] | None) -> str:
    if when is None:
        return "always"
    return " and ".join(
        f"argument {index} != {a:#x}" if op == "ne" else f"argument {index} & {a:#x} == {b:#x}"
        for index, op, a, b in when
    )


# Keys a field of ContainerConfig describes in full, and the labels, which name one container
# (a bind mount's host directory, in "volumes", also differs per container).
_DESCRIBED: Final = frozenset(
    {"image", "network_mode", "read_only", "tmpfs", "mounts", "volumes", "user", "cap_add",
     "cap_drop", "environment", "mem_limit", "memswap_limit", "nano_cpus", "pids_limit",
     "runtime", "masked_paths", "labels"}
)  # fmt: skip


def _seccomp_json(option: str | None) -> dict[str, Any] | None:
    if option is None:
        return None
    try:
        found = json.loads(option.removeprefix("seccomp="))
    except ValueError:
        return None  # "unconfined", a file path: no filter described; the option is reported
    return found if isinstance(found, dict) else None


def _other_settings(
    config: dict[str, Any], *, options: list[str], seccomp: str | None
) -> tuple[str, ...]:
    """What no field describes, as sorted ``key: JSON`` lines: any change to the hardening
    shows up in a report, even one this module has no words for. ``options`` are the
    security options but ``no-new-privileges:true``; ``seccomp`` the one the filter came
    from."""
    rest = {key: value for key, value in config.items() if key not in _DESCRIBED}
    if "security_opt" in rest:
        if seccomp is not None:
            options = options.copy()
            options.remove(seccomp)
        rest["security_opt"] = options
    if "ulimits" in rest:
        rest["ulimits"] = [u for u in rest["ulimits"] if u.get("Name") != "nofile"]
    return tuple(sorted(f"{key}: {_canonical(value)}" for key, value in rest.items()))


def _canonical(value: Any) -> str:
    # Docker's types are dicts; anything else is written as its repr, so it is still compared.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


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
    for mount in config.get("mounts", []):  # a run's inputs
        mounts.append(
            ContainerMount(
                path=str(mount["Target"]),
                kind="bind",
                options="ro" if mount.get("ReadOnly") else "rw",
                size_bytes=None,
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
