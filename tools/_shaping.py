"""Results on their way out: projection onto the output allow-list, then the byte cap."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, SchemaSerializer

from airlock.tools._arguments import ModelValidator
from airlock.tools._errors import PermanentUpstreamError, ResultTooLargeError, UpstreamError
from airlock.tools._json import JSONObject

__all__ = ["shape_plain", "shape_result", "shape_with"]


def shape_result(model: type[BaseModel], result: Any, *, max_bytes: int) -> JSONObject:
    """Keep only the fields ``model`` allows, as JSON values, if they fit in ``max_bytes``.

    Raises:
        UpstreamError: the handler returned something that does not fit ``model``, or that
            cannot be written as JSON (nested deeper than the serializer goes, text holding
            a lone surrogate, a float that is NaN or an infinity); the handler ran, so the
            outcome is ``unknown``.
        ResultTooLargeError: the projected result is over ``max_bytes``; never truncated.
    """
    return shape_with(
        model, model.__pydantic_validator__, model.__pydantic_serializer__, result, max_bytes
    )


def shape_with(
    model: type[BaseModel],
    validator: ModelValidator,
    serializer: SchemaSerializer,
    result: Any,
    max_bytes: int,
) -> JSONObject:
    """:func:`shape_result` with ``model``'s validator and serializer (which a registry reads
    once per tool: a model class's attributes cost more than the rest of a small result).

    Raises:
        UpstreamError: as :func:`shape_result`.
        ResultTooLargeError: as :func:`shape_result`.
    """
    shaped = _projected(model, validator, serializer, result, max_bytes)
    data: JSONObject = serializer.to_python(shaped, mode="json")
    return data


def _projected(
    model: type[BaseModel],
    validator: ModelValidator,
    serializer: SchemaSerializer,
    result: Any,
    max_bytes: int,
) -> BaseModel:
    """``result`` as an instance of ``model`` whose JSON fits in ``max_bytes``.

    Raises:
        UpstreamError: as :func:`shape_result`.
        ResultTooLargeError: as :func:`shape_result`.
    """
    try:  # (the model's own validator and serializer: the model_* wrappers cost more here)
        shaped: BaseModel = validator.validate_python(result, from_attributes=True)
    except ValidationError as exc:
        raise UpstreamError(
            outcome="unknown",
            detail=f"result does not fit {model.__name__}: {exc}",
        ) from None
    try:
        written = serializer.to_json(shaped)
    except (PydanticSerializationError, ValueError, RecursionError) as exc:
        # The same answer fails the same way every time: retrying it is no use.
        raise PermanentUpstreamError(
            "the service's answer could not be read; do not retry this call",
            outcome="unknown",
            detail=f"result of {model.__name__} cannot be written as JSON: {exc}"[:500],
        ) from None
    size = len(written)
    # The serializer writes NaN and infinities as null (or, as a model's config asks, NaN or
    # "NaN"): only then is there a float to look for. (find(), not `in`: see _arguments.)
    if written.find(b"null") >= 0 or written.find(b"NaN") >= 0 or written.find(b"Infinity") >= 0:
        _refuse_non_finite(model, serializer, shaped)
    if size > max_bytes:
        raise ResultTooLargeError(size_bytes=size, limit_bytes=max_bytes)
    return shaped


def _refuse_non_finite(model: type[BaseModel], serializer: SchemaSerializer, shaped: Any) -> None:
    """Raise if ``shaped`` holds a float that is NaN or an infinity: JSON cannot carry one,
    and writing it as null (or as text) would change the tool's answer without a word.

    Raises:
        PermanentUpstreamError: saying where such a float is; the same answer fails the
            same way every time.
    """
    path = _non_finite_at(serializer.to_python(shaped))
    if path is None:
        return
    where = f" at {path}" if path else ""
    raise PermanentUpstreamError(
        f"the tool's result holds NaN or infinity{where}, which JSON cannot carry; "
        "do not retry this call",
        outcome="unknown",
        detail=f"result of {model.__name__} holds NaN or infinity{where}"[:500],
    )


_PATH_CHARS: Final = 200
"""The longest field path an error names (a key may be long)."""


def _non_finite_at(value: object) -> str | None:
    """The dotted path (``items.3.price``) of a float in ``value`` (a value or a dict's key)
    that is NaN or an infinity; ``None`` if there is none. Walked with a stack of its own (a
    result may be nested deeper than Python recurses), which holds only containers: the
    scalars most results are made of cost a type look-up each, and no path."""
    if isinstance(value, float):  # (a root model's value)
        return None if math.isfinite(value) else ""
    stack: list[tuple[Any, tuple[object, ...]]] = []
    if isinstance(value, _CONTAINERS):
        stack.append((value, ()))
    while stack:
        item, path = stack.pop()
        pairs: Iterable[tuple[Any, Any]]
        if isinstance(item, dict):
            for key in item:  # (JSON would write such a key as the text "NaN")
                if isinstance(key, float) and not math.isfinite(key):
                    return _dotted((*path, key))
            pairs = item.items()
        else:
            pairs = enumerate(item)
        for key, inner in pairs:
            if type(inner) in _NO_FLOAT:
                continue
            if isinstance(inner, float):
                if not math.isfinite(inner):
                    return _dotted((*path, key))
            elif isinstance(inner, _CONTAINERS):
                stack.append((inner, (*path, key)))
    return None


def _dotted(path: tuple[object, ...]) -> str:
    return ".".join(str(part) for part in path)[:_PATH_CHARS]


_NO_FLOAT: Final = frozenset({str, int, bool, type(None)})
_CONTAINERS: Final = (dict, list, tuple, set, frozenset)


_JSON_SCALARS = (str, int, bool)


def shape_plain(
    model: type[BaseModel],
    validator: ModelValidator,
    serializer: SchemaSerializer,
    result: Any,
    max_bytes: int,
) -> JSONObject:
    """:func:`shape_with` for an output model whose fields are plain
    (:func:`~airlock.tools._arguments.plain_fields`): when the projection is an instance of
    ``model`` itself holding only strings, integers and bools, those values are its JSON
    values, taken without serializing it a second time; the same result.

    Raises:
        UpstreamError: as :func:`shape_result`.
        ResultTooLargeError: as :func:`shape_result`.
    """
    shaped = _projected(model, validator, serializer, result, max_bytes)
    if type(shaped) is model:  # (a subclass's instance may hold more than the fields)
        data: JSONObject = dict(shaped.__dict__)
        for value in data.values():
            if type(value) not in _JSON_SCALARS:  # (a str or int subclass: an enum...)
                break
        else:
            return data
    plain: JSONObject = serializer.to_python(shaped, mode="json")
    return plain
