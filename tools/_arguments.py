"""Arguments on their way in: JSON encoding, strict validation, effects, hashing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import pydantic_core
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaSerializer, SchemaValidator

from airlock.policies import Effect, EffectArgumentError
from airlock.tools._errors import FieldIssue, InvalidInputError
from airlock.tools._secret import Secret

if TYPE_CHECKING:
    from pydantic.plugin._schema_validator import PluggableSchemaValidator

ModelValidator: TypeAlias = "SchemaValidator | PluggableSchemaValidator"
"""What ``Model.__pydantic_validator__`` is."""

__all__ = [
    "ModelValidator",
    "effect_field_problems",
    "encode_arguments",
    "hash_input",
    "raw_args_hash",
    "resolve_effects",
    "secret_fields_of",
    "validate_arguments",
    "validate_input",
    "validated_args_hash",
]

_REASONS = {
    "extra_forbidden": "is not a parameter of this tool; remove it",
    "missing": "is required",
}


def encode_arguments(args: object, *, max_bytes: int) -> bytes:
    """The arguments as JSON bytes, for strict validation in JSON mode.

    JSON mode lets strict validation accept what JSON spells as strings (dates) while still
    refusing ``"5"`` for an integer.

    Raises:
        InvalidInputError: not an object of plain JSON values (no NaN), or over ``max_bytes``.
    """
    if type(args) is not dict and not isinstance(args, Mapping):  # (most often a dict)
        raise InvalidInputError(issues=(FieldIssue("", "arguments must be a JSON object"),))
    try:
        raw = pydantic_core.to_json(args, inf_nan_mode="constants")
        if b"NaN" in raw or b"Infinity" in raw:  # rare: only then pay for the exact check
            json.dumps(args, allow_nan=False)
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        raise InvalidInputError(
            issues=(FieldIssue("", "arguments must be plain JSON values (no NaN)"),),
            detail=str(exc)[:200],
        ) from None
    if len(raw) > max_bytes:
        raise InvalidInputError(
            issues=(FieldIssue("", f"arguments are {len(raw)} bytes; the limit is {max_bytes}"),)
        )
    return raw


def validate_arguments(model: type[BaseModel], raw: bytes) -> BaseModel:
    """Validate JSON against the strict input model.

    Raises:
        InvalidInputError: with one :class:`FieldIssue` per problem (values never echoed).
    """
    return validate_input(model.__pydantic_validator__, raw)


def validate_input(validator: ModelValidator, raw: bytes) -> BaseModel:
    """:func:`validate_arguments` with the input model's validator (which a registry reads
    once per tool).

    Raises:
        InvalidInputError: as :func:`validate_arguments`.
    """
    try:
        instance: BaseModel = validator.validate_json(raw, strict=True)
        return instance
    except ValidationError as exc:
        issues = tuple(
            FieldIssue(
                ".".join(str(part) for part in error["loc"]),
                _REASONS.get(error["type"], error["msg"])[:200],
            )
            for error in exc.errors(include_url=False, include_input=False, include_context=False)
        )
        raise InvalidInputError(issues=issues) from None


def resolve_effects(effects: tuple[Effect, ...], values: Mapping[str, Any]) -> tuple[Effect, ...]:
    """The concrete effects of one call: one per declared effect, or one per element of a
    ``{field[]}`` list.

    Raises:
        InvalidInputError: a value cannot stand in a resource (``../admin``, ``a/b``), or a
            URL cannot be judged (``https://docs.example.com@evil.example/``).
    """
    try:
        out: list[Effect] = []
        for effect in effects:
            if effect.each is None:
                out.append(effect.resolve(values))
            else:
                out.extend(effect.resolve_all(values))
        return tuple(out)
    except EffectArgumentError as exc:
        raise InvalidInputError(issues=(FieldIssue(exc.field, exc.reason),)) from None


def secret_fields_of(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` marked :class:`~airlock.tools.Secret`."""
    return frozenset(
        name
        for name, info in model.model_fields.items()
        if any(isinstance(m, Secret) for m in info.metadata)
    )


def effect_field_problems(effects: Iterable[Effect], model: type[BaseModel]) -> list[str]:
    """What is wrong with the placeholders of ``effects`` against the fields of ``model``:
    a ``{field[]}`` must name a list, a ``{field}`` one value, and no placeholder may name a
    field marked :class:`~airlock.tools.Secret` (effects are recorded in clear)."""
    problems: list[str] = []
    properties = model.model_json_schema().get("properties", {})
    secret = secret_fields_of(model)
    for effect in effects:
        for name in sorted(effect.placeholders & set(model.model_fields)):
            if name in secret:
                problems.append(
                    f"effect {effect} names the secret field {name!r}; effects are recorded "
                    "in clear, so declare them from fields that are not secret"
                )
                continue
            is_list = _is_list(properties.get(name))
            if name == effect.each and not is_list:
                problems.append(f"effect {effect} expands {name!r}, which is not a list field")
            elif name != effect.each and is_list and effect.amount != f"{{{name}}}":
                problems.append(
                    f"effect {effect} names the list field {name!r} as one value; write "
                    f"{{{name}[]}} for one effect per element"
                )
    return problems


def _is_list(schema: object) -> bool:
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "array":
        return True
    options = schema.get("anyOf")
    return isinstance(options, list) and any(_is_list(o) for o in options)


def validated_args_hash(instance: BaseModel, *, secret_fields: frozenset[str]) -> str:
    """BLAKE2b (128 bit) of the validated arguments as JSON in field order, secrets left out.

    Field order is the model's, so equal arguments hash equally however they were sent.
    """
    return hash_input(instance.__pydantic_serializer__, instance, set(secret_fields) or None)


def hash_input(
    serializer: SchemaSerializer, instance: BaseModel, leave_out: set[str] | None
) -> str:
    """:func:`validated_args_hash` with the input model's serializer and the secret fields to
    leave out (``None``: none), which a registry reads once per tool."""
    digest = _BLAKE2B_128.copy()  # (a copy costs less than making one with its parameters)
    digest.update(serializer.to_json(instance, exclude=leave_out))
    return digest.hexdigest()


_BLAKE2B_128: Final = hashlib.blake2b(digest_size=16)
"""BLAKE2b with a 128-bit digest, nothing hashed yet: :func:`hash_input` hashes a copy."""


def raw_args_hash(args: object, *, secret_fields: frozenset[str]) -> str:
    """Hash of arguments that failed validation, as received (keys sorted), secrets left out.

    Empty when they cannot be encoded at all.
    """
    if not isinstance(args, Mapping):
        return ""
    kept = {k: v for k, v in args.items() if k not in secret_fields}
    try:
        data = json.dumps(kept, sort_keys=True, default=repr).encode()
    except (TypeError, ValueError):
        return ""
    return hashlib.blake2b(data, digest_size=16).hexdigest()
