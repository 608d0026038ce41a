"""The sandbox's own effect set, read from the container configuration the backend uses.

Nothing here restates the hardening: :func:`sandbox_effects` reports what
:func:`airlock.sandbox.describe_container` reads from the very keyword arguments the Docker
backend passes to ``containers.run`` for the profile, so a change there shows up in the
inventory and in ``--check``. The second seccomp layer (what the guest runner refuses
before a program runs) comes from the rule list the image ships, rendered on this host. The
data image's packages come from the list this airlock builds it with
(:data:`airlock.sandbox.DATA_PACKAGES`), so the lock holds them without an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airlock.inventory._model import Mount, SandboxEffects, SandboxLimits
from airlock.policies import SandboxProfile, seccomp_profile_hash
from airlock.sandbox import DATA_PACKAGES, UNKNOWN_DIGEST, describe_container

__all__ = ["sandbox_effects"]


def sandbox_effects(profile: SandboxProfile, *, image: str, image_digest: str) -> SandboxEffects:
    """What a program running under ``profile`` in ``image`` can do by itself."""
    config = describe_container(profile, image=image)
    filter_json = dict(config.seccomp_filter)
    return SandboxEffects(
        network=config.network_mode,
        root_filesystem="read-only" if config.read_only_root else "writable",
        mounts=tuple(
            Mount(path=m.path, mode=f"{m.kind} {m.options}", size_bytes=m.size_bytes)
            for m in config.mounts
        ),
        user=config.user,
        capabilities=config.capabilities,
        no_new_privileges=config.no_new_privileges,
        environment=config.environment,
        limits=SandboxLimits(
            timeout_s=profile.timeout_s,
            memory_bytes=config.memory_bytes,
            swap_bytes=config.swap_bytes,
            cpus=config.cpus,
            pids=config.pids_limit,
            open_files=config.open_files,
            output_bytes=profile.output_limit_bytes,
            input_bytes=profile.input_limit_bytes,
            artifact_bytes=profile.artifact_limit_bytes,
            artifact_files=profile.artifact_limit_files,
            proposals=profile.max_proposals,
        ),
        language_mode=profile.language_mode,
        allowed_imports=tuple(sorted(profile.allowed_imports)),
        seccomp_sha256=seccomp_profile_hash(filter_json) if filter_json else UNKNOWN_DIGEST,
        seccomp_allowed=_allowed_syscalls(filter_json),
        runtime=config.runtime,
        masked_paths=config.masked_paths,
        guest_seccomp=tuple(
            f"{r.syscall}: {r.errno} {r.when} ({r.why})" for r in config.guest_filter.rules
        ),
        guest_seccomp_pfc=config.guest_filter.pfc,
        image=image,
        image_digest=image_digest,
        image_kind=profile.image,
        image_packages=tuple(
            f"{name}=={version}" for name, version in sorted(DATA_PACKAGES.items())
        )
        if profile.image == "data"
        else (),
    )


def _allowed_syscalls(filter_json: Mapping[str, Any]) -> tuple[str, ...]:
    names: set[str] = set()
    for rule in filter_json.get("syscalls", []):
        if rule.get("action") == "SCMP_ACT_ALLOW":
            names.update(str(n) for n in rule.get("names", []))
    return tuple(sorted(names))
