"""Turn a typed handler function into a strict input model."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from airlock.policies import UsageError
from airlock.tools._context import CallContext

__all__ = ["HandlerShape", "shape_of_handler"]


class HandlerShape(typing.NamedTuple):
    """What a handler's signature says: its input model, context use and return model."""

    input_model: type[BaseModel]
    takes_context: bool
    returns: type[BaseModel] | None


def shape_of_handler(fn: Callable[..., Any], *, tool: str) -> HandlerShape:
    """Read ``fn``'s signature: an optional leading ``CallContext`` parameter, then the input.

    Raises:
        UsageError: a parameter lacks a type, is ``*args``/``**kwargs`` or positional-only.
    """
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as exc:
        raise UsageError(
            f"tool {tool!r}: cannot resolve the type hints of {fn.__qualname__}: {exc}; "
            "import every annotated type at module level"
        ) from exc
    params = list(inspect.signature(fn).parameters.values())
    takes_context = bool(params) and hints.get(params[0].name) is CallContext
    if takes_context:
        params = params[1:]
    fields: dict[str, Any] = {}
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise UsageError(
                f"tool {tool!r}: parameter {param.name!r} must be a plain keyword parameter "
                "(no *args, **kwargs or positional-only), so the input model is exact"
            )
        if param.name not in hints:
            raise UsageError(
                f"tool {tool!r}: parameter {param.name!r} needs a type annotation; it defines "
                "the input schema the model sees"
            )
        if hints[param.name] is CallContext:
            raise UsageError(
                f"tool {tool!r}: the CallContext parameter {param.name!r} must come first"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    model_name = "".join(part.title() for part in tool.split("_")) + "Input"
    try:
        model = create_model(
            model_name,
            __config__=ConfigDict(extra="forbid", strict=True, frozen=True),
            **fields,
        )
    except Exception as exc:  # pydantic reports unsupported types in several ways
        raise UsageError(f"tool {tool!r}: cannot build the input model: {exc}") from exc
    returns = hints.get("return")
    is_model = isinstance(returns, type) and issubclass(returns, BaseModel)
    return HandlerShape(model, takes_context, returns if is_model else None)
