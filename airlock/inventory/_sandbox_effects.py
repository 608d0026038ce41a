"""The sandbox's own effect set, read from the container configuration the backend uses.

Nothing here restates the hardening: :func:`sandbox_effects` reports what
:func:`airlock.sandbox.describe_container` reads from the very keyword arguments the Docker
backend passes to ``containers.run`` for the profile, so a change there shows up in the
inventory and in ``--check``; a setting no field describes is listed in ``other_settings``,
whose every change ``--check`` judges growth. The second seccomp layer (what the guest
runner refuses before a program runs) comes from the rule list the image ships, rendered on
this host. The data image's packages come from the list this airlock builds it with
(:data:`airlock.sandbox.DATA_PACKAGES`), so the lock holds them without an engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from airlock.inventory._model import Mount, SandboxEffects, SandboxLimits
from airlock.policies import SandboxProfile, seccomp_profile_hash
from airlock.sandbox import DATA_PACKAGES, UNKNOWN_DIGEST, describe_container

__all__ = ["REFUSING_ACTIONS", "sandbox_effects"]


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
        seccomp_default=str(filter_json.get("defaultAction", UNKNOWN_DIGEST)),
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
        other_settings=config.other_settings,
    )


def _allowed_syscalls(filter_json: Mapping[str, Any]) -> tuple[str, ...]:
    """One entry per rule that lets calls through: ``name`` when any arguments pass, else
    ``name when <conditions>``, so a condition dropped from a rule shows up as the bare name
    added (growth), never only as another hash."""
    entries: set[str] = set()
    for rule in filter_json.get("syscalls", []):
        if str(rule.get("action")) in REFUSING_ACTIONS:
            continue
        condition = _condition_text(rule)
        for name in rule.get("names", []):
            entries.add(f"{name} when {condition}" if condition else str(name))
    return tuple(sorted(entries))


REFUSING_ACTIONS: Final = frozenset(
    {"SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP",
     "SCMP_ACT_ERRNO"}
)  # fmt: skip
"""Actions that refuse a call. Any other (ALLOW, LOG, TRACE, NOTIFY, one this airlock does not
know) may let it run, so it counts as allowing: fail closed."""
_OPERATORS: Final = {
    "SCMP_CMP_EQ": "==",
    "SCMP_CMP_NE": "!=",
    "SCMP_CMP_LT": "<",
    "SCMP_CMP_LE": "<=",
    "SCMP_CMP_GT": ">",
    "SCMP_CMP_GE": ">=",
}
# Keys of a rule that do not change which calls it lets through.
_INERT_KEYS: Final = frozenset({"names", "name", "action", "args", "comment", "errnoRet"})


def _condition_text(rule: Mapping[str, Any]) -> str:
    parts = []
    for arg in rule.get("args") or []:
        where, op = f"arg{arg.get('index')}", str(arg.get("op"))
        value, two = arg.get("value"), arg.get("valueTwo")
        if op == "SCMP_CMP_MASKED_EQ":  # Docker's value is the mask, valueTwo the datum
            parts.append(f"{where} & {value:#x} == {two}" if isinstance(value, int) else
                         f"{where} & {value} == {two}")  # fmt: skip
        elif op in _OPERATORS:
            parts.append(f"{where} {_OPERATORS[op]} {value}")
        else:  # an operator this airlock does not know: keep all of it, so it is compared
            parts.append(f"{where} {op} {value} {two}")
    # Anything else (includes, excludes by capability or architecture) limits the rule too.
    parts += [
        f"{key} {json.dumps(rule[key], sort_keys=True)}"
        for key in sorted(rule)
        if key not in _INERT_KEYS
    ]
    return " and ".join(parts)
