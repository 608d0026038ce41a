"""Registration: build a :class:`ToolSpec` from a function and refuse contracts that break
the rules of the tool contract, each with a :class:`UsageError` that says what to change."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel
from pydantic_core import SchemaSerializer

from airlock.policies import SCOPE_PATTERN, Effect, Grant, UsageError
from airlock.tools._arguments import (
    EffectsResolver,
    ModelValidator,
    effect_field_problems,
    effects_resolver,
    parameter_names,
    plain_fields,
    sent_form_fields,
)
from airlock.tools._context import CALLERS, Caller
from airlock.tools._credential import CREDENTIAL_NAME, Credential
from airlock.tools._destination import Destination, parse_destination
from airlock.tools._egress import DeclaredReach
from airlock.tools._invoke import is_async_callable
from airlock.tools._json import JSONObject
from airlock.tools._records import RecordsRead, refuse_bad_records
from airlock.tools._schema import schema_problems, strict_schema
from airlock.tools._signature import shape_of_handler
from airlock.tools._spec import Precondition, Secret, ToolSpec
from airlock.tools._write_contract import unbound_currency_problem, write_contract_problems

if TYPE_CHECKING:
    from airlock.tools._admission import Authorization

__all__ = ["NAME_PATTERN", "CompiledTool", "build_spec", "compile_tool"]

NAME_PATTERN: Final = r"^[a-z][a-z0-9]*(?:_[a-z0-9]+){2,}$"
"""``service_object_verb``: at least three lower-case parts joined by ``_``."""
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
_MAX_TIMEOUT = 600.0
_MAX_RESULT_BYTES = 16 * 1024 * 1024
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")


@dataclass(frozen=True, slots=True)
class CompiledTool:
    """A checked spec with what admission needs precomputed."""

    spec: ToolSpec
    schema: JSONObject
    is_async: bool
    reach: DeclaredReach
    """What its code may reach while it runs (the runtime check of its declarations)."""
    input_validator: ModelValidator
    """The input model's validator (read once: a model class's attributes cost more)."""
    input_serializer: SchemaSerializer
    """The input model's serializer, for the argument hash."""
    hash_leaves_out: set[str] | None
    """The secret fields the argument hash leaves out; ``None`` when there are none."""
    sent_fields: tuple[str, ...] | None
    """The input fields, when arguments sent in their order are hashed as they were sent
    (:func:`~airlock.tools._arguments.sent_form_fields`)."""
    parameters: frozenset[str]
    """The argument names the input model takes
    (:func:`~airlock.tools._arguments.parameter_names`)."""
    output_validator: ModelValidator
    """The output model's validator, for shaping."""
    output_serializer: SchemaSerializer
    """The output model's serializer, for shaping."""
    plain_output: bool
    """Whether the output model is plain (:func:`~airlock.tools._arguments.plain_fields`),
    so that shaping may take its values as they are (``shape_plain``)."""
    resolve: EffectsResolver
    """The concrete effects of a call from its validated arguments (made once)."""
    judged_once: bool
    """Whether a read's authorization depends on its grant alone, not on its arguments, when
    no approval rule applies: the kinds of its resolved effects are those it declares (no
    ``{field[]}`` list, which may resolve to none) and it spends nothing (an amount is
    judged on every call)."""
    judged: list[tuple[Grant, Authorization] | None]
    """The last grant such a read was judged under without approval rules, and the verdict
    (one entry, replaced whole: see ``Registry._admit``)."""


def build_spec(
    fn: Callable[..., Any],
    *,
    effects: Iterable[Effect],
    scope: str,
    callers: Iterable[Caller],
    timeout: float,
    output: type[BaseModel] | None,
    name: str | None,
    description: str | None,
    reversible: bool | None,
    preconditions: Iterable[Precondition],
    max_result_bytes: int,
    destinations: Iterable[str] = (),
    credentials: Iterable[str] = (),
    tenant_credentials: Mapping[str, str] | None = None,
    records: RecordsRead | None = None,
) -> ToolSpec:
    """A :class:`ToolSpec` for ``fn`` from its signature, docstring and the given options.

    Raises:
        UsageError: the signature cannot define a strict input model, or no output model.
    """
    tool_name = name or fn.__name__
    shape = shape_of_handler(fn, tool=tool_name)
    output_model = output or shape.returns
    if output_model is None:
        raise UsageError(
            f"tool {tool_name!r}: declare the result's allow-list with output=SomeModel "
            "or annotate the function's return type with a pydantic model"
        )
    effects = tuple(effects)
    side = any(isinstance(e, Effect) and e.is_side_effect for e in effects)
    return ToolSpec(
        name=tool_name,
        description=inspect.cleandoc(description or inspect.getdoc(fn) or ""),
        handler=fn,
        input_model=shape.input_model,
        output_model=output_model,
        effects=effects,
        callers=frozenset(callers),
        scope=scope,
        timeout=timeout,
        reversible=(not side) if reversible is None else reversible,
        preconditions=tuple(preconditions),
        max_result_bytes=max_result_bytes,
        destinations=tuple(destinations),
        credentials=tuple(credentials),
        tenant_credentials=dict(tenant_credentials or {}),
        records=records,
        takes_context=shape.takes_context,
        secret_fields=frozenset(
            field
            for field, info in shape.input_model.model_fields.items()
            if any(isinstance(m, Secret) for m in info.metadata)
        ),
    )


def compile_tool(spec: ToolSpec) -> CompiledTool:
    """Check ``spec`` against the tool contract and precompute its schema.

    The compiled spec lists, in canonical form, every destination and credential name the
    tool declares, its adapter's included (a handler's own ``destinations`` and
    ``credentials`` attributes), so the effect inventory reads them from the spec alone.
    What the runtime check compares the tool's connections with must be consistent: every
    destination and ``network`` effect names hosts (not every host), an adapter reaches
    nothing outside the destinations and credentials the tool declares for it, and a tool
    that sends credentials declares where to.

    Raises:
        UsageError: the first rule ``spec`` breaks, and how to fix it.
    """
    name = spec.name

    def refuse(message: str) -> UsageError:
        return UsageError(f"tool {name!r}: {message}")

    if not (1 <= len(name) <= 64 and re.fullmatch(NAME_PATTERN, name)):
        raise UsageError(
            f"tool name {name!r} must be service_object_verb: 1-64 lower-case letters and "
            "digits in at least three parts joined by '_', for example 'billing_invoice_get'"
        )
    sentences = len(_SENTENCE_END.findall(spec.description.strip()))
    if sentences < 3:
        raise refuse(
            f"the description has {sentences} sentence(s); write three or four: what the tool "
            "does, when to use it, and what it does not return"
        )
    if spec.input_model.model_config.get("extra") != "forbid":
        raise refuse("the input model must refuse extra fields; set model_config extra='forbid'")
    raw_schema = spec.input_model.model_json_schema()
    problems = schema_problems(raw_schema)
    if problems:
        raise refuse("the input " + "; ".join(problems))
    if spec.output_model.model_config.get("extra", "ignore") != "ignore":
        raise refuse(
            "the output model must ignore extra fields (the pydantic default) so results are "
            "projected onto it; remove its extra= setting"
        )
    for effect in spec.effects:
        if not isinstance(effect, Effect):
            raise refuse(f"{effect!r} is not an Effect; build it with read(), write(), ...")
    _check_callers(spec, refuse)
    refuse_bad_records(
        spec.records, output_model=spec.output_model, effects=spec.effects, refuse=refuse
    )
    if not re.match(SCOPE_PATTERN, spec.scope):
        raise refuse(f"scope {spec.scope!r} must be dotted lower case, e.g. 'billing.read'")
    if not 0 < spec.timeout <= _MAX_TIMEOUT:
        raise refuse(f"timeout {spec.timeout!r} must be over 0 and at most {_MAX_TIMEOUT:g} s")
    if not 0 < spec.max_result_bytes <= _MAX_RESULT_BYTES:
        raise refuse(f"max_result_bytes must be between 1 and {_MAX_RESULT_BYTES}")
    spec = replace(
        spec,
        destinations=_destinations(spec, refuse),
        credentials=_credentials(spec, refuse),
        tenant_credentials=MappingProxyType(dict(spec.tenant_credentials)),
    )
    reach = _reach(spec, refuse)
    fields = set(spec.input_model.model_fields)
    if spec.write is None:
        _check_effects(spec, fields, refuse)
    else:  # a write tool's effects are read from the effect that prepare computed
        problems = write_contract_problems(spec.write, input_fields=fields, effects=spec.effects)
        if problems:
            raise refuse("; ".join(problems))
    for condition in spec.preconditions:
        if not re.fullmatch(NAME_PATTERN, condition.tool):
            raise refuse(f"precondition tool {condition.tool!r} is not a tool name")
        unknown = sorted(set(condition.fields) - fields)
        if unknown or not condition.fields:
            raise refuse(
                f"precondition on {condition.tool!r} must name input fields of this tool; "
                f"unknown: {unknown or 'none given'}"
            )
    return CompiledTool(
        spec=spec,
        schema=strict_schema(spec.input_model),
        is_async=is_async_callable(spec.handler),
        reach=reach,
        input_validator=spec.input_model.__pydantic_validator__,
        input_serializer=spec.input_model.__pydantic_serializer__,
        hash_leaves_out=set(spec.secret_fields) or None,
        sent_fields=sent_form_fields(spec.input_model),
        parameters=parameter_names(spec.input_model),
        output_validator=spec.output_model.__pydantic_validator__,
        output_serializer=spec.output_model.__pydantic_serializer__,
        plain_output=plain_fields(spec.output_model) is not None,
        resolve=effects_resolver(spec.effects),
        judged_once=spec.write is None
        and all(e.each is None and e.kind != "spend" for e in spec.effects),
        judged=[None],
    )


def _check_callers(spec: ToolSpec, refuse: Callable[[str], UsageError]) -> None:
    unknown = sorted(set(spec.callers) - set(CALLERS))
    if unknown:
        raise refuse(f"unknown callers {unknown}; use {{'direct'}} or {{'direct', 'code'}}")
    if "direct" not in spec.callers:
        raise refuse("callers must include 'direct': use {'direct'} or {'direct', 'code'}")
    side = [str(e) for e in spec.effects if e.is_side_effect]
    if side and "code" in spec.callers:
        raise refuse(
            f"it has the side effect(s) {', '.join(side)}, so it cannot be called from code; "
            "use callers={'direct'} (writes go through preview and approval)"
        )


def _check_effects(spec: ToolSpec, fields: set[str], refuse: Callable[[str], UsageError]) -> None:
    if not spec.effects:
        raise refuse(
            "declare at least one effect, e.g. effects=[read('service:object/{id}')], so the "
            "grant and the effect inventory can see what it touches"
        )
    for effect in spec.effects:
        missing = sorted(effect.placeholders - fields)
        if missing:
            raise refuse(f"effect {effect} names {missing}, which are not input fields")
    problems = effect_field_problems(spec.effects, spec.input_model)
    if problems:
        raise refuse("; ".join(problems))
    unbound = unbound_currency_problem(spec.effects, spec.input_model, computed=False)
    if unbound:
        raise refuse(unbound)


def _adapter_facts(
    spec: ToolSpec, attribute: str, refuse: Callable[[str], UsageError]
) -> list[object]:
    """What the handler (an adapter object) declares under ``attribute``, if anything."""
    value = getattr(spec.handler, attribute, None)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return list(value)
    raise refuse(
        f"its handler's {attribute!r} is a {type(value).__name__}; an adapter declares "
        f"{attribute} as a list of strings, for the effect inventory"
    )


def _destinations(spec: ToolSpec, refuse: Callable[[str], UsageError]) -> tuple[str, ...]:
    declared = _parsed(spec.destinations, refuse)
    adapter = _parsed(_adapter_facts(spec, "destinations", refuse), refuse)
    if declared:  # the tool says where its adapter goes: the adapter must agree
        for destination in adapter:
            if not any(mine.covers(destination) for mine in declared):
                raise refuse(
                    f"its adapter reaches {destination.text!r}, outside the destinations the "
                    f"tool declares {sorted(d.text for d in declared)}; declare it too, or "
                    "leave destinations= out to take the adapter's"
                )
    return tuple(sorted({d.text for d in (*declared, *adapter)}))


def _parsed(items: Iterable[object], refuse: Callable[[str], UsageError]) -> list[Destination]:
    found = []
    for item in items:
        if not isinstance(item, str):
            raise refuse(f"destination {item!r} must be a string such as 'https://api.example.com'")
        try:
            found.append(parse_destination(item))
        except ValueError as exc:
            raise refuse(str(exc)) from None
    return found


def _credentials(spec: ToolSpec, refuse: Callable[[str], UsageError]) -> tuple[str, ...]:
    adapter = [
        item.name if isinstance(item, Credential) else item
        for item in _adapter_facts(spec, "credentials", refuse)
    ]
    names: set[str] = set()
    for credential in (*spec.credentials, *adapter, *spec.tenant_credentials.values()):
        if not (isinstance(credential, str) and re.match(CREDENTIAL_NAME, credential)):
            raise refuse(
                f"credential {credential!r} must be a credential's name (letters, digits, "
                "'_', '.', ':', '-'), e.g. 'BILLING_TOKEN': pass Credential.name, never a value"
            )
        names.add(credential)
    from_adapter = {name for name in adapter if isinstance(name, str)}
    outside = sorted(from_adapter - set(spec.credentials)) if spec.credentials else []
    if outside:
        raise refuse(
            f"its adapter may send the credentials {outside}, which the tool does not declare "
            f"{sorted(spec.credentials)}; declare them too, or leave credentials= out to take "
            "the adapter's"
        )
    for tenant in spec.tenant_credentials:
        if not (isinstance(tenant, str) and _TENANT.fullmatch(tenant)):
            raise refuse(
                f"tenant_credentials key {tenant!r} must be a tenant id (letters, digits and "
                "_ . @ : -, starting with a letter or digit)"
            )
    return tuple(sorted(names))


def _reach(spec: ToolSpec, refuse: Callable[[str], UsageError]) -> DeclaredReach:
    """What the runtime check holds the tool to; refuses declarations it cannot check."""
    try:
        reach = DeclaredReach.of(spec)
    except ValueError as exc:
        raise refuse(str(exc)) from None
    if spec.credentials and not (reach.destinations or reach.network):
        raise refuse(
            f"it declares the credentials {list(spec.credentials)} but no destination to send "
            "them to; declare destinations=[...] (its adapter's) or a network effect"
        )
    return reach
