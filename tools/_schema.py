"""What the model sees of a tool: its definition and strict JSON Schema.

The schema is pydantic's, made strict the way providers' strict modes expect: every object
closes (``additionalProperties: false``), lists every property as required (optional ones
are typed ``T | null``), and carries no titles or defaults. :func:`schema_problems` says what
in an input model would let a model send unbounded or open-ended data.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from pydantic import BaseModel

from airlock.tools._json import JSONObject, JSONValue

__all__ = ["ToolDefinition", "schema_problems", "strict_schema"]

_DROP = frozenset({"title", "default"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDefinition:
    """A tool as offered to a model; provider formats are built from this."""

    name: str
    """The tool's name, ``service_object_verb``."""
    description: str
    """What it does, when to use it, what it does not return."""
    parameters: JSONObject
    """Strict JSON Schema of the input (a copy: changing it changes nothing else)."""
    strict: bool = True
    """The schema meets providers' strict-mode rules."""


def strict_schema(model: type[BaseModel]) -> JSONObject:
    """The strict, model-facing JSON Schema of ``model``."""
    schema: JSONObject = model.model_json_schema()
    result = _strict(schema)
    assert isinstance(result, dict)
    return result


def _strict(node: JSONValue) -> JSONValue:
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return copy.copy(node)
    out: JSONObject = {}
    for key, value in node.items():
        if key in _DROP and not isinstance(value, dict):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: _strict(sub) for name, sub in value.items()}
        else:
            out[key] = _strict(value)
    if out.get("type") == "object" and isinstance(out.get("properties"), dict):
        properties = out["properties"]
        assert isinstance(properties, dict)
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def schema_problems(schema: JSONObject, *, where: str = "") -> list[str]:
    """Places in a (pydantic, not yet strict) schema that accept open or unbounded data."""
    problems: list[str] = []
    defs = schema.get("$defs")
    if isinstance(defs, dict):
        for name, sub in defs.items():
            if isinstance(sub, dict):
                problems += schema_problems(sub, where=name)
    _walk(schema, where, problems)
    return problems


def _walk(node: JSONObject, where: str, problems: list[str]) -> None:
    label = where or "(input)"
    kind = node.get("type")
    if "$ref" in node or "enum" in node or "const" in node:
        return
    for key in ("anyOf", "oneOf", "allOf"):
        options = node.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, dict):
                    _walk(option, where, problems)
    if kind == "object":
        properties = node.get("properties")
        if not isinstance(properties, dict):
            problems.append(f"{label} is an open mapping; use a pydantic model with named fields")
            return
        if node.get("additionalProperties") is not False:
            problems.append(f"{label} allows extra fields; set model_config extra='forbid'")
        for name, sub in properties.items():
            if isinstance(sub, dict):
                _walk(sub, f"{where}.{name}" if where else name, problems)
    elif kind == "string":
        if "maxLength" not in node and "format" not in node:
            problems.append(
                f"{label} is a string without a length cap; "
                "annotate it Annotated[str, Field(max_length=...)]"
            )
    elif kind == "array":
        if "maxItems" not in node:
            problems.append(
                f"{label} is a list without a length cap; "
                "annotate it Annotated[list[...], Field(max_length=...)]"
            )
        items = node.get("items")
        if isinstance(items, dict):
            _walk(items, f"{label}[]", problems)
    elif kind is None and not any(k in node for k in ("anyOf", "oneOf", "allOf")):
        problems.append(f"{label} accepts any value; give it a concrete type")
