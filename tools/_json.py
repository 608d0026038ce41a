"""JSON values as types: what crosses to a model or over the bridge."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSONObject", "JSONValue"]

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
