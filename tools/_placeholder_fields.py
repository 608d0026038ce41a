"""Which fields may fill an effect's placeholders, checked once when a tool is registered.

A ``{field}`` is filled by one id segment: a str or an int, or an enum member holding one
(its value); a ``{field[]}`` by each element of a list of them. A field that can hold
anything else (``None``, a float, a bool, a nested model, a mapping, a ``Decimal``...) would
make every call that holds such a value fail with ``invalid_input`` ("must be one id
segment"), however well the model wrote it; so registration refuses the field instead,
naming the tool, the field and the placeholder. A type this cannot read (a custom pydantic
type, ``Any``) is left to the call, as before.

A write's effect is filled from prepare's effect in JSON form (``model_dump(mode="json")``),
so its effect model is judged by that form (``computed``): a ``date``, ``UUID`` or
``Decimal`` is one JSON string there and fills a segment; a float, a bool, a mapping, a
nested model or ``None`` still does not, nor a string that always holds a ``:`` or a ``*``
(a ``datetime``, a ``time``, a URL, a pydantic ``SecretStr``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import is_dataclass
from datetime import date, time, timedelta
from decimal import Decimal
from enum import Enum
from types import NoneType, UnionType
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin
from uuid import UUID

from pydantic import BaseModel

from airlock.policies import Effect

__all__ = ["placeholder_problems"]

_NEVER: Final = (bool, float, complex, Decimal, bytes, bytearray, date, time, timedelta, UUID)
"""Types none of whose values is a str or an int (``bool`` is an int, and never an id)."""
_NEVER_IN_JSON: Final = (bool, float, complex)
"""Of those, the types whose JSON form is no string either."""
_NO_SEGMENT_FORMATS: Final = {"date-time": ":", "time": ":", "uri": ":", "password": "*"}
"""JSON string formats every value of which holds a character no segment holds."""
_NONE: Final = "None"


def placeholder_problems(
    effects: Iterable[Effect],
    model: type[BaseModel],
    *,
    secret: Collection[str],
    computed: bool = False,
) -> list[str]:
    """What is wrong with the placeholders of ``effects`` against the fields of ``model``:
    a ``{field[]}`` must name a list, a ``{field}`` one value, each value a str or an int
    (not ``None``), and no placeholder may name a field in ``secret`` (effects are recorded
    in clear). ``computed``: ``model`` is a write's effect model, judged in its JSON form
    (see the module docstring)."""
    problems: list[str] = []
    schema = model.model_json_schema(mode="serialization" if computed else "validation")
    properties, defs = schema.get("properties", {}), schema.get("$defs", {})
    never = _NEVER_IN_JSON if computed else _NEVER
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
            info, field = model.model_fields[name], properties.get(name)
            if name == effect.each:
                unfit = _unfit_elements(info.annotation, never) if is_list else None
                if computed and is_list and unfit is None:
                    unfit = _json_elements(field, defs)
            elif is_list:
                unfit = None  # (said above)
            else:
                unfit = _NONE if info.default is None else _unfit(info.annotation, never)
                if computed and unfit is None:
                    unfit = _json_unfit(field, defs)
            if unfit is not None:
                each = name == effect.each
                problems.append(_problem(effect, name, unfit, each=each, computed=computed))
    return problems


def _problem(effect: Effect, name: str, unfit: str, *, each: bool, computed: bool) -> str:
    if each:
        where = f"effect {effect} fills {{{name}[]}} from the list field {name!r}, which"
        where += " or whose elements" if unfit == _NONE else "'s elements"
    else:
        where = f"effect {effect} fills {{{name}}} from the field {name!r}, which"
    if unfit == _NONE:
        return (
            f"{where} can be None (an optional field, or one defaulting to None): a call "
            "that leaves it out or sends null could fill no resource; make the field "
            "required and not None, or take the placeholder out"
        )
    also = ", a date, a UUID or a Decimal" if computed else ""
    return (
        f"{where} can hold {unfit}, which is not one id segment: type the field as a str "
        f"or an int (or an enum of them{also})"
    )


def _unfit(annotation: Any, never: tuple[type, ...] = _NEVER) -> str | None:
    """What ``annotation`` may hold that is no str or int (``"None"``, ``"float"``, a
    model's name...), or ``None`` when each of its values is one, or it cannot tell.
    ``never``: the types none of whose values fills a segment."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unfit(get_args(annotation)[0], never)
    if annotation is None or annotation is NoneType:
        return _NONE
    if origin is Union or origin is UnionType:
        return _worst(_unfit(arg, never) for arg in get_args(annotation))
    if origin is Literal:
        for value in get_args(annotation):
            if value is None:
                return _NONE
            if isinstance(value, Enum):
                value = value.value
            if type(value) not in (str, int):
                return f"Literal[{value!r}]"
        return None
    supertype = getattr(annotation, "__supertype__", None)  # a NewType
    if supertype is not None:
        return _unfit(supertype, never)
    kind = origin if isinstance(origin, type) else annotation
    if not isinstance(kind, type):
        return None  # (Any, a type variable...: the call judges its value)
    if issubclass(kind, Enum):
        for member in kind:
            if type(member.value) not in (str, int):
                return f"{kind.__name__} (its member {member.name} is no str or int)"
        return None
    if issubclass(kind, BaseModel) or is_dataclass(kind):
        return f"{kind.__name__} (a nested model)"
    if issubclass(kind, (*never, Mapping)):
        return kind.__name__
    return None


def _unfit_elements(annotation: Any, never: tuple[type, ...]) -> str | None:
    """:func:`_unfit` of the elements of the list (or tuple, set) ``annotation`` names, or
    ``"None"`` when the field itself may be ``None``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unfit_elements(get_args(annotation)[0], never)
    if annotation is None or annotation is NoneType:
        return _NONE
    if origin is Union or origin is UnionType:
        return _worst(_unfit_elements(arg, never) for arg in get_args(annotation))
    if isinstance(origin, type) and issubclass(origin, Collection):
        args = get_args(annotation)
        return _worst(_unfit(arg, never) for arg in args if arg is not Ellipsis)
    return None


def _json_unfit(schema: object, defs: Mapping[str, Any]) -> str | None:
    """What a value of the JSON ``schema`` may be that is no string or integer, or a string
    format no segment holds (``"None"``, ``"a JSON number"``, ``"a date-time..."``); ``None``
    when each is one, or it cannot tell (a schema without a type: ``Any``)."""
    if not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _json_unfit(defs.get(ref.rpartition("/")[2]), defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            return _worst(_json_unfit(option, defs) for option in schema[key])
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        for value in values if isinstance(values, list) else ():
            if value is None:
                return _NONE
            if type(value) not in (str, int):
                return f"the JSON value {value!r}"
        return None
    kinds = schema.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        if kind == "null":
            return _NONE
        if kind is not None and kind not in ("string", "integer"):
            return f"a JSON {kind}"
    held = _NO_SEGMENT_FORMATS.get(schema.get("format", ""))
    if held is not None and "string" in (kinds if isinstance(kinds, list) else [kinds]):
        return f"a {schema['format']} string (its JSON form always holds {held!r})"
    return None


def _json_elements(schema: object, defs: Mapping[str, Any]) -> str | None:
    """:func:`_json_unfit` of the elements of the JSON array ``schema``, or ``"None"`` when
    the field itself may be ``null``."""
    if not isinstance(schema, dict):
        return None
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _worst(_json_elements(option, defs) for option in schema[key])
    if schema.get("type") == "null":
        return _NONE
    items = schema.get("prefixItems", [schema.get("items")])
    return _worst(_json_unfit(item, defs) for item in (items if isinstance(items, list) else []))


def _worst(found: Iterable[str | None]) -> str | None:
    """What the members of a union (or the elements of a tuple) may hold that is no str or
    int: ``"None"`` first (its message says how to fix it), else the first one found."""
    unfit = [f for f in found if f is not None]
    return _NONE if _NONE in unfit else next(iter(unfit), None)


def _is_list(schema: object) -> bool:
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "array":
        return True
    options = schema.get("anyOf")
    return isinstance(options, list) and any(_is_list(o) for o in options)
