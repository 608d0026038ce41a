"""Which fields may fill an effect's placeholders, checked once when a tool is registered.

A ``{field}`` is filled by one id segment: a str or an int, or an enum member holding one
(its value); a ``{field[]}`` by each element of a list of them. A field that can hold
anything else (``None``, a float, a bool, a nested model, a mapping, a ``Decimal``...) would
make every call that holds such a value fail with ``invalid_input`` ("must be one id
segment"), however well the model wrote it; so registration refuses the field instead,
naming the tool, the field and the placeholder. A type this cannot read (a custom pydantic
type, ``Any``) is left to the call, as before.
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
_NONE: Final = "None"


def placeholder_problems(
    effects: Iterable[Effect], model: type[BaseModel], *, secret: Collection[str]
) -> list[str]:
    """What is wrong with the placeholders of ``effects`` against the fields of ``model``:
    a ``{field[]}`` must name a list, a ``{field}`` one value, each value a str or an int
    (not ``None``), and no placeholder may name a field in ``secret`` (effects are recorded
    in clear)."""
    problems: list[str] = []
    properties = model.model_json_schema().get("properties", {})
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
            info = model.model_fields[name]
            if name == effect.each:
                unfit = _unfit_elements(info.annotation) if is_list else None
            elif is_list:
                unfit = None  # (said above)
            else:
                unfit = _NONE if info.default is None else _unfit(info.annotation)
            if unfit is not None:
                problems.append(_problem(effect, name, unfit, each=name == effect.each))
    return problems


def _problem(effect: Effect, name: str, unfit: str, *, each: bool) -> str:
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
    return (
        f"{where} can hold {unfit}, which is not one id segment: type the field as a str "
        "or an int (or an enum of them)"
    )


def _unfit(annotation: Any) -> str | None:
    """What ``annotation`` may hold that is no str or int (``"None"``, ``"float"``, a
    model's name...), or ``None`` when each of its values is one, or it cannot tell."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unfit(get_args(annotation)[0])
    if annotation is None or annotation is NoneType:
        return _NONE
    if origin is Union or origin is UnionType:
        return _worst(_unfit(arg) for arg in get_args(annotation))
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
        return _unfit(supertype)
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
    if issubclass(kind, (*_NEVER, Mapping)):
        return kind.__name__
    return None


def _unfit_elements(annotation: Any) -> str | None:
    """:func:`_unfit` of the elements of the list (or tuple, set) ``annotation`` names, or
    ``"None"`` when the field itself may be ``None``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unfit_elements(get_args(annotation)[0])
    if annotation is None or annotation is NoneType:
        return _NONE
    if origin is Union or origin is UnionType:
        return _worst(_unfit_elements(arg) for arg in get_args(annotation))
    if isinstance(origin, type) and issubclass(origin, Collection):
        return _worst(_unfit(arg) for arg in get_args(annotation) if arg is not Ellipsis)
    return None


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
