"""Arguments on their way in: JSON encoding, strict validation, effects, hashing."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import pydantic_core
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaSerializer, SchemaValidator

from airlock.policies import Effect, EffectArgumentError
from airlock.tools._errors import FieldIssue, InvalidInputError
from airlock.tools._placeholder_fields import placeholder_problems
from airlock.tools._secret import Secret

if TYPE_CHECKING:
    from pydantic.plugin._schema_validator import PluggableSchemaValidator

ModelValidator: TypeAlias = "SchemaValidator | PluggableSchemaValidator"
"""What ``Model.__pydantic_validator__`` is."""

__all__ = [
    "EffectsResolver",
    "ModelValidator",
    "admit_arguments",
    "effect_field_problems",
    "effect_input_error",
    "effects_resolver",
    "encode_arguments",
    "hash_input",
    "parameter_names",
    "plain_fields",
    "raw_args_hash",
    "resolve_effects",
    "secret_fields_of",
    "sent_form_fields",
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
        # Rare: only then pay for the exact check. (find(), not `in`: `bytes in bytes` first
        # tries the operand as an integer and clears the TypeError, on every call.)
        if raw.find(b"NaN") >= 0 or raw.find(b"Infinity") >= 0:
            json.dumps(args, allow_nan=False)
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        where = _lone_surrogate_at(args)
        issue = FieldIssue("", "arguments must be plain JSON values (no NaN)")
        if where is not None:  # (the NaN check never sees it: json.dumps escapes it)
            issue = FieldIssue(where, "the text holds a lone surrogate (not valid Unicode)")
        raise InvalidInputError(issues=(issue,), detail=str(exc)[:200]) from None
    if len(raw) > max_bytes:
        raise InvalidInputError(
            issues=(FieldIssue("", f"arguments are {len(raw)} bytes; the limit is {max_bytes}"),)
        )
    return raw


def _lone_surrogate_at(args: Mapping[Any, Any]) -> str | None:
    """The dotted path of the first text (value or name) in ``args`` holding a lone surrogate
    (UTF-8 cannot encode it), written ``\\ud800`` so that the error itself is JSON; or None."""
    stack: list[tuple[object, str]] = [(args, "")]
    seen: set[int] = set()  # (a dict may hold itself: to_json refuses it for that)
    while stack:  # (a stack of its own: arguments may nest deeper than Python recurses)
        item, path = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and re.search("[\ud800-\udfff]", item):
                return path[:100]
        elif isinstance(item, (Mapping, list, tuple)) and id(item) not in seen:
            seen.add(id(item))
            for key, value in item.items() if isinstance(item, Mapping) else enumerate(item):
                name = str(key).encode(errors="backslashreplace").decode()
                where = f"{path}.{name}" if path else name
                stack += [(value, where), (key, where)]
    return None


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
        raise _invalid(exc) from None


def parameter_names(model: type[BaseModel]) -> frozenset[str]:
    """The argument names ``model`` takes: each field's alias, or its name (both, when it
    takes either)."""
    by_name = bool(model.model_config.get("populate_by_name"))
    names: set[str] = set()
    for name, field in model.model_fields.items():
        alias = field.validation_alias if isinstance(field.validation_alias, str) else None
        alias = alias or field.alias
        names.add(alias or name)
        if by_name:
            names.add(name)
    return frozenset(names)


def _too_many(args: Mapping[Any, Any], parameters: frozenset[str]) -> InvalidInputError:
    # Validation would name every one of them: a frame can hold a hundred thousand.
    unknown = itertools.islice((k for k in args if k not in parameters), 20)
    return InvalidInputError(
        f"invalid arguments: {len(args)} given; this tool takes at most {len(parameters)}",
        issues=tuple(FieldIssue(str(k)[:100], _REASONS["extra_forbidden"]) for k in unknown),
    )


_ISSUES_READ: Final = 100
"""Problems read one by one at most (a 1 MB frame can hold 100,000, and reading each costs
more than validating the frame did); past this, the error counts them."""


def _invalid(exc: ValidationError) -> InvalidInputError:
    count = exc.error_count()
    if count > _ISSUES_READ:
        reason = (
            f"{count} problems (names this tool does not take, or values of the wrong "
            "type): check the tool's parameters"
        )
        return InvalidInputError(issues=(FieldIssue("", reason),))
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    issues = tuple(
        FieldIssue(
            ".".join(str(part) for part in error["loc"]),
            _REASONS.get(error["type"], error["msg"])[:200],
        )
        for error in errors
    )
    return InvalidInputError(issues=issues)


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
        raise effect_input_error(exc) from None


EffectsResolver: TypeAlias = Callable[[Mapping[str, Any]], tuple[Effect, ...]]
"""The concrete effects of one call from its validated arguments (:func:`effects_resolver`)."""


def effects_resolver(effects: tuple[Effect, ...]) -> EffectsResolver:
    """:func:`resolve_effects` of ``effects``, made once per tool (:meth:`Effect.resolver`
    of each): the same effects, in the same order. It raises
    :class:`~airlock.policies.EffectArgumentError` where :func:`resolve_effects` raises the
    :class:`InvalidInputError` of :func:`effect_input_error`.
    """
    resolvers = tuple(effect.resolver() for effect in effects)
    if len(resolvers) == 1:
        return resolvers[0]

    def resolve(values: Mapping[str, Any]) -> tuple[Effect, ...]:
        out: list[Effect] = []
        for one in resolvers:
            out.extend(one(values))
        return tuple(out)

    return resolve


def effect_input_error(exc: EffectArgumentError) -> InvalidInputError:
    """What a call answers when an argument cannot fill a placeholder of an effect."""
    return InvalidInputError(issues=(FieldIssue(exc.field, exc.reason),))


def secret_fields_of(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` marked :class:`~airlock.tools.Secret`."""
    return frozenset(
        name
        for name, info in model.model_fields.items()
        if any(isinstance(m, Secret) for m in info.metadata)
    )


def effect_field_problems(
    effects: Iterable[Effect], model: type[BaseModel], *, computed: bool = False
) -> list[str]:
    """What is wrong with the placeholders of ``effects`` against the fields of ``model``
    (:func:`~airlock.tools._placeholder_fields.placeholder_problems`): a ``{field[]}`` must
    name a list, a ``{field}`` one value, each a str or an int that cannot be ``None``, and
    no placeholder may name a field marked :class:`~airlock.tools.Secret`. ``computed``:
    ``model`` is a write's effect model, whose values fill its effects in JSON form."""
    secret = secret_fields_of(model)
    return placeholder_problems(effects, model, secret=secret, computed=computed)


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


def admit_arguments(
    validator: ModelValidator,
    serializer: SchemaSerializer,
    leave_out: set[str] | None,
    sent_fields: tuple[str, ...] | None,
    args: object,
    max_bytes: int,
    *,
    parameters: frozenset[str] | None = None,
) -> tuple[BaseModel, str]:
    """Step 2 for a registry: the validated arguments and their hash, as
    :func:`encode_arguments`, :func:`validate_input` and :func:`hash_input` make them in one
    call (admission makes it on every call).

    ``sent_fields`` are the input fields in order when the model's serializer writes back
    exactly the JSON it validated (:func:`sent_form_fields`): when the arguments were sent as
    a dict of those fields in that order, their JSON *is* what the serializer would write,
    and it is hashed as it is, without serializing the instance again. ``parameters`` are
    the names the input model takes (:func:`parameter_names`): more arguments than that are
    refused before validation.

    Raises:
        InvalidInputError: as :func:`encode_arguments` and :func:`validate_input`.
    """
    if type(args) is dict:  # (encode_arguments() and validate_input(), spelled out)
        if parameters is not None and len(args) > len(parameters):
            raise _too_many(args, parameters)
        try:
            raw = pydantic_core.to_json(args, inf_nan_mode="constants")
        except (pydantic_core.PydanticSerializationError, TypeError, ValueError):
            raw = b""  # encode_arguments() answers it, below
        if not raw or len(raw) > max_bytes:
            raw = encode_arguments(args, max_bytes=max_bytes)  # raises its InvalidInputError
        else:
            for key, value in args.items():
                # Only a float writes NaN or Infinity: with strings, integers and bools alone
                # there is nothing to look for (a string that says "NaN" passes the check).
                if type(value) not in _NO_FLOAT or type(key) is not str:
                    if raw.find(b"NaN") >= 0 or raw.find(b"Infinity") >= 0:
                        raw = encode_arguments(args, max_bytes=max_bytes)
                    break
        try:
            instance: BaseModel = validator.validate_json(raw, strict=True)
        except ValidationError as exc:
            raise _invalid(exc) from None
    else:
        if parameters is not None and isinstance(args, Mapping) and len(args) > len(parameters):
            raise _too_many(args, parameters)
        raw = encode_arguments(args, max_bytes=max_bytes)
        instance = validate_input(validator, raw)
    digest = _BLAKE2B_128.copy()  # (a copy costs less than making one with its parameters)
    if sent_fields is not None and type(args) is dict and tuple(args) == sent_fields:
        digest.update(raw)
    else:
        digest.update(serializer.to_json(instance, exclude=leave_out))
    return instance, digest.hexdigest()


_NO_FLOAT: Final = (str, int, bool)
"""Types of argument values whose JSON holds no float (containers may hold one)."""

_SENT_FORM_MODEL: Final = frozenset(
    {"type", "cls", "schema", "custom_init", "root_model", "config", "ref", "metadata"}
)
_SENT_FORM_CONFIG: Final = frozenset({"extra_fields_behavior", "strict", "title"})
_SENT_FORM_FIELD: Final = frozenset({"type", "schema", "metadata"})
_SENT_FORM_VALUES: Final = {
    "str": frozenset({"type", "max_length", "min_length", "pattern", "strict"}),
    "int": frozenset({"type", "ge", "gt", "le", "lt", "multiple_of", "strict"}),
    "bool": frozenset({"type", "strict"}),
}
"""What a field's value may be for :func:`sent_form_fields`: a string, an integer or a bool
that validation only checks (patterns, lengths, bounds) and never changes, so its JSON is
written back as it was read."""


def sent_form_fields(model: type[BaseModel]) -> tuple[str, ...] | None:
    """The fields of ``model`` in order when its serializer writes back, byte for byte, any
    JSON object of exactly these fields in this order that it validated; ``None`` when that
    is not certain: the model is not :func:`plain_fields`, or it has secret fields (the hash
    leaves them out). Such a model's arguments are hashed by serializing its instance
    (:func:`hash_input`)."""
    return None if secret_fields_of(model) else plain_fields(model)


def plain_fields(model: type[BaseModel]) -> tuple[str, ...] | None:
    """The fields of ``model`` in order if it is plain, else ``None``. Judged from the
    model's core schema by an allow-list: no validator, serializer, alias, default or
    computed field, no configuration beyond ``extra``, ``strict`` and ``title``, and fields
    that are strings, integers and bools which validation only checks (patterns, lengths,
    bounds), never changes. An instance's field values are then its JSON values."""
    schema = getattr(model, "__pydantic_core_schema__", None)
    if not isinstance(schema, dict):
        return None
    if (
        schema.get("type") != "model"
        or set(schema) - _SENT_FORM_MODEL
        or schema.get("custom_init")
        or schema.get("root_model")
        or set(schema.get("config", {})) - _SENT_FORM_CONFIG
    ):
        return None
    inner = schema["schema"]
    if (
        not isinstance(inner, dict)
        or inner.get("type") != "model-fields"
        or set(inner) - {"type", "fields", "model_name", "computed_fields"}
        or inner.get("computed_fields")
    ):
        return None
    names = []
    for name, field in inner["fields"].items():
        if field.get("type") != "model-field" or set(field) - _SENT_FORM_FIELD:
            return None
        value = field["schema"]
        allowed = _SENT_FORM_VALUES.get(value.get("type"))
        if allowed is None or set(value) - allowed:
            return None
        names.append(name)
    return tuple(names) if names == list(model.model_fields) else None


_BLAKE2B_128: Final = hashlib.blake2b(digest_size=16)
"""BLAKE2b with a 128-bit digest, nothing hashed yet: :func:`hash_input` hashes a copy."""


def raw_args_hash(args: object, *, secret_fields: frozenset[str]) -> str:
    """Hash of arguments that failed validation, as received (in the order received),
    secrets left out.

    Empty when they cannot be encoded at all (nested too deep). Neither sorted nor encoded
    by ``json``: arguments of a hundred thousand names cost the host a few milliseconds.
    """
    if not isinstance(args, Mapping):
        return ""
    kept = {k: v for k, v in args.items() if k not in secret_fields} if secret_fields else args
    try:
        data = pydantic_core.to_json(kept, fallback=repr, inf_nan_mode="constants")
    except ValueError:  # PydanticSerializationError is one
        return ""
    return hashlib.blake2b(data, digest_size=16).hexdigest()
