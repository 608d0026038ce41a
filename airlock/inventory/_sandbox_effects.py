"""The sandbox's own effect set, read from the container configuration the backend uses.

Nothing here restates the hardening: :func:`sandbox_effects` builds the very keyword
arguments the Docker backend passes to ``containers.run`` for the profile and reports what
they say, so a change there shows up in the inventory and in ``--check``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import docker

from airlock.inventory._model import Mount, SandboxEffects, SandboxLimits
from airlock.policies import SandboxProfile, seccomp_profile_hash
from airlock.sandbox import SandboxError, map_docker_errors
from airlock.sandbox._container import container_config

__all__ = ["UNKNOWN_DIGEST", "read_image_digest", "sandbox_effects"]

UNKNOWN_DIGEST: Final = "unknown"
_SOCKET_DIR: Final = Path("/nonexistent/airlock-inventory")


def sandbox_effects(profile: SandboxProfile, *, image: str, image_digest: str) -> SandboxEffects:
    """What a program running under ``profile`` in ``image`` can do by itself."""
    config = container_config(profile, image=image, socket_dir=_SOCKET_DIR, labels={})
    options = [str(o) for o in config.get("security_opt", [])]
    seccomp = next((o.removeprefix("seccomp=") for o in options if o.startswith("seccomp=")), "")
    filter_json: dict[str, Any] = json.loads(seccomp) if seccomp else {}
    ulimits = {str(u["Name"]): int(u["Hard"]) for u in config.get("ulimits", [])}
    memory = int(config.get("mem_limit", 0))
    return SandboxEffects(
        network=str(config.get("network_mode", "default")),
        root_filesystem="read-only" if config.get("read_only") else "writable",
        mounts=_mounts(config),
        user=str(config.get("user", "root")),
        capabilities=_capabilities(config),
        no_new_privileges="no-new-privileges:true" in options,
        environment=tuple(sorted(config.get("environment", {}))),
        limits=SandboxLimits(
            timeout_s=profile.timeout_s,
            memory_bytes=memory,
            swap_bytes=max(0, int(config.get("memswap_limit", memory)) - memory),
            cpus=int(config.get("nano_cpus", 0)) / 1e9,
            pids=int(config.get("pids_limit", 0)),
            open_files=ulimits.get("nofile", 0),
            output_bytes=profile.output_limit_bytes,
        ),
        language_mode=profile.language_mode,
        allowed_imports=tuple(sorted(profile.allowed_imports)),
        seccomp_sha256=seccomp_profile_hash(filter_json) if filter_json else UNKNOWN_DIGEST,
        seccomp_allowed=_allowed_syscalls(filter_json),
        image=image,
        image_digest=image_digest,
    )


def _mounts(config: dict[str, Any]) -> tuple[Mount, ...]:
    mounts: list[Mount] = []
    for path, text in dict(config.get("tmpfs", {})).items():
        parts = [p for p in str(text).split(",") if p]
        size = next((p.removeprefix("size=") for p in parts if p.startswith("size=")), None)
        mode = ",".join(p for p in parts if not p.startswith(("size=", "mode=")))
        mounts.append(Mount(path=str(path), mode=f"tmpfs {mode}", size_bytes=_int(size)))
    for bind in dict(config.get("volumes", {})).values():
        mounts.append(Mount(path=str(bind["bind"]), mode=f"bind {bind['mode']}", size_bytes=None))
    return tuple(sorted(mounts, key=lambda m: m.path))


def _capabilities(config: dict[str, Any]) -> tuple[str, ...]:
    added = tuple(sorted(str(c) for c in config.get("cap_add", []) or []))
    if "ALL" in (config.get("cap_drop") or []):
        return added
    return ("default", *added)


def _allowed_syscalls(filter_json: dict[str, Any]) -> tuple[str, ...]:
    names: set[str] = set()
    for rule in filter_json.get("syscalls", []):
        if rule.get("action") == "SCMP_ACT_ALLOW":
            names.update(str(n) for n in rule.get("names", []))
    return tuple(sorted(names))


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def read_image_digest(image: str, *, timeout: float = 3.0) -> str:
    """The content digest of ``image`` on the local engine, or ``"unknown"``.

    A repository digest (``name@sha256:...``) when the image was pulled, else the image id
    (``sha256:...``) of a local build. Never raises: no engine, no image and engine errors
    all answer ``"unknown"``.
    """
    try:
        with map_docker_errors():
            client = docker.from_env(timeout=int(max(1, timeout)))
            try:
                attrs = client.images.get(image).attrs
            finally:
                client.close()
    except SandboxError:
        return UNKNOWN_DIGEST
    digests = [str(d) for d in attrs.get("RepoDigests") or []]
    return digests[0] if digests else str(attrs.get("Id") or UNKNOWN_DIGEST)
