"""``write_tool``: the spec of a tool that writes through preview, approval and commit."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from airlock.policies import Effect
from airlock.tools._arguments import secret_fields_of
from airlock.tools._spec import ToolSpec
from airlock.tools._write_contract import WriteContract

__all__ = ["write_tool"]


def write_tool(
    *,
    name: str,
    description: str,
    input_model: type[BaseModel],
    effect_model: type[BaseModel],
    receipt_model: type[BaseModel],
    prepare: Callable[..., Any],
    commit: Callable[..., Any],
    effects: Iterable[Effect],
    scope: str,
    intent: Iterable[str] | None = None,
    lookup: Callable[..., Any] | None = None,
    summarize: Callable[[Any], str] | None = None,
    timeout: float = 10.0,
    reversible: bool = False,
    max_result_bytes: int = 64_000,
    destinations: Iterable[str] = (),
    credentials: Iterable[str] = (),
    tenant_credentials: Mapping[str, str] | None = None,
    proposable: bool = False,
) -> ToolSpec:
    """The :class:`ToolSpec` of a write tool; register it with ``registry.register(spec)``.

    ``input_model`` is what the model fills in (strict, ``extra="forbid"``; never an amount
    code can compute). ``prepare(args, principal)`` computes an ``effect_model`` instance
    without changing anything; ``commit(effect, idempotency_key)`` sends it and returns the
    system's receipt, of which ``receipt_model`` is the allow-list. ``effects`` name fields
    of the effect model (``spend("{amount_minor}")``), so grants and approval rules judge
    the computed effect. ``intent`` (default: every input field not marked
    :class:`~airlock.tools.Secret`) names the fields that, with the run id and tool, make the
    idempotency key; a tool without input fields has the empty intent: the tool itself, for
    the run's principal (one such write per run). ``lookup(effect, key)`` answers
    whether the system of record holds the key, for reconciliation. ``destinations`` are the origins
    its adapter reaches and ``credentials`` the names of the credentials it sends, for the
    effect inventory; ``tenant_credentials`` maps each tenant id to the name its calls send,
    when the tool picks a credential by the principal's tenant.

    Fields marked ``Secret()`` are honoured as for read tools: an input field so marked is
    left out of the audit log's argument hash and of the default intent; an effect-model
    field so marked (a ``str``) is sealed in the ledger (the preview stores a marker, the
    value stays in the memory of the process that prepared it and is handed back to
    ``commit``), see :class:`~airlock.tools.WritePath`.

    The tool is callable directly only; registration checks the contract. ``proposable``
    lets a program *propose* it from code (``tools.propose.NAME(...)``): the host prepares
    each proposal as a direct call would and the run's previews wait for approval as one
    batch; a program never commits. The policy must allow it too (``propose`` in a grant).

    Raises:
        UsageError: only when registered (``Registry.register``), like every contract rule.
    """
    secret = secret_fields_of(input_model)
    if intent is None:
        intent = tuple(name for name in input_model.model_fields if name not in secret)
    return ToolSpec(
        name=name,
        description=inspect.cleandoc(description),
        handler=prepare,
        input_model=input_model,
        output_model=receipt_model,
        effects=tuple(effects),
        callers=frozenset({"direct"}),
        scope=scope,
        timeout=timeout,
        reversible=reversible,
        max_result_bytes=max_result_bytes,
        destinations=tuple(destinations),
        credentials=tuple(credentials),
        tenant_credentials=dict(tenant_credentials or {}),
        secret_fields=secret,
        write=WriteContract(
            prepare=prepare,
            commit=commit,
            effect_model=effect_model,
            intent=tuple(intent),
            lookup=lookup,
            summarize=summarize,
            secret_inputs=secret,
            proposable=proposable,
        ),
    )
