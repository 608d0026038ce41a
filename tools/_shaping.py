"""Results on their way out: projection onto the output allow-list, then the byte cap."""

from __future__ import annotations

from typing import Any

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
            a lone surrogate); the handler ran, so the outcome is ``unknown``.
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
        size = len(serializer.to_json(shaped))
    except (PydanticSerializationError, ValueError, RecursionError) as exc:
        # The same answer fails the same way every time: retrying it is no use.
        raise PermanentUpstreamError(
            "the service's answer could not be read; do not retry this call",
            outcome="unknown",
            detail=f"result of {model.__name__} cannot be written as JSON: {exc}"[:500],
        ) from None
    if size > max_bytes:
        raise ResultTooLargeError(size_bytes=size, limit_bytes=max_bytes)
    return shaped


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
