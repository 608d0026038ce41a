"""The model tools of a session's direct calls, as the model sees them listed: each with
the hints (read-only, destructive, idempotent, open world) its effects give."""

from __future__ import annotations

from collections.abc import Collection

from airlock.harness._model_tools import ModelTool
from airlock.policies import Principal
from airlock.tools import Registry

__all__ = ["direct_tools"]


def direct_tools(
    registry: Registry, principal: Principal, *, names: Collection[str]
) -> list[ModelTool]:
    """The tools of ``names`` that ``principal`` may call directly, in the registry's order."""
    listed = []
    for definition in registry.visible(principal, "direct"):
        spec = registry.get(definition.name)
        if spec is None or definition.name not in names:
            continue
        changes = any(e.is_side_effect for e in spec.effects)
        network = spec.reaches_network
        listed.append(
            ModelTool(
                name=definition.name,
                description=definition.description,
                input_schema=dict(definition.parameters),
                read_only=not changes and not network,
                destructive=changes and not spec.reversible,
                # A write's idempotency key (run, tool, intent) makes a repeated call of
                # the same intent in this session answer with the same preview.
                idempotent=not changes or spec.write is not None,
                open_world=network,
            )
        )
    return listed
