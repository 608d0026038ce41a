"""The typed Python API of the tools a program may call, generated from the registry.

One description, two renderings: :func:`tool_stubs` is what the guest receives in the ``run``
frame (it builds functions with these signatures and docstrings),
:func:`~airlock.bridge._api_source.render_api` the same API as Python source for the model's
``execute_code`` description. Only tools the principal can see from ``code`` appear: write
tools never do, except as *proposals* (:func:`proposal_stubs`, ``tools.propose.NAME(...)``)
when their contract and the run's grant allow it: a proposal stores a preview for a person to
approve, and commits nothing. The stubs are made once for each principal's scopes and the names
asked for, while the registry has the same tools (:mod:`._stub_cache`).
"""

from __future__ import annotations

import functools
import json
import keyword
from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import Any, Final

from pydantic import AliasChoices, AliasPath, BaseModel
from pydantic.fields import FieldInfo

from airlock.bridge._stub_cache import remembered
from airlock.policies import Principal
from airlock.tools import JSONObject, JSONValue, Registry, ToolDefinition

__all__ = [
    "BY_KEYWORD",
    "ParamStub",
    "ToolStub",
    "proposal_stubs",
    "python_name",
    "tool_stubs",
]

_SCALARS = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamStub:
    """One parameter of a tool function."""

    name: str
    annotation: str
    """The Python type, as source text (``str``, ``int | None``, ``Literal['a', 'b']``)."""
    description: str = ""
    required: bool = True
    """Whether a call must pass it; one that need not is left out of the call when not
    given, and the host's input model fills in its default, as for a direct call."""
    default: JSONValue = None
    """The default the input model applies (JSON), shown in the signature; ``None`` also
    when the default is not JSON (a factory): :attr:`shown_default` says which."""
    shown_default: bool = False
    """Whether :attr:`default` is the model's default (else the signature shows ``...``)."""

    @property
    def default_text(self) -> str:
        """The default as the signature shows it: its Python literal, or ``...``."""
        return repr(self.default) if self.shown_default else "..."


_PARAM_FIELDS: Final = tuple(f.name for f in fields(ParamStub))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStub:
    """One tool function as programs see it."""

    name: str
    doc: str
    params: tuple[ParamStub, ...]
    returns: str = "dict"
    proposal: bool = False
    """A write the program may propose (``tools.propose.NAME``), not a tool it calls."""

    def to_wire(self) -> JSONObject:
        """The stub as sent to the guest in the ``run`` frame: its fields, as JSON."""
        return {
            "name": self.name,
            "doc": self.doc,
            "params": [{name: getattr(p, name) for name in _PARAM_FIELDS} for p in self.params],
            "returns": self.returns,
            "proposal": self.proposal,
        }


def _annotation(schema: Any, defs: dict[str, Any]) -> str:
    if not isinstance(schema, dict):
        return "object"
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _annotation(defs.get(name), defs) if name in defs else "dict"
    if "enum" in schema:
        return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = dict.fromkeys(_annotation(s, defs) for s in schema[key])
            return " | ".join(parts)
    kind = schema.get("type")
    if kind == "array":
        return f"list[{_annotation(schema.get('items'), defs)}]"
    if kind == "object":
        return "dict"
    if isinstance(kind, list):
        return " | ".join(_SCALARS.get(k, "object") for k in kind)
    return _SCALARS.get(str(kind), "object")


def _describe(schema: Any) -> str:
    """A parameter's description plus the constraints a program must meet."""
    if not isinstance(schema, dict):
        return ""
    rules = []
    if "pattern" in schema:
        rules.append(f"matches {schema['pattern']}")
    if "maxLength" in schema:
        rules.append(f"at most {schema['maxLength']} characters")
    for key, word in (("minimum", ">="), ("maximum", "<=")):
        if key in schema:
            rules.append(f"{word} {schema[key]}")
    text = str(schema.get("description", "")).strip()
    if rules:
        text = f"{text} ({'; '.join(rules)})" if text else "; ".join(rules)
    return text


def _returns_section(registry: Registry, name: str) -> str:
    spec = registry.get(name)
    if spec is None:
        return ""
    fields = ", ".join(spec.output_model.model_fields)
    return f"Returns:\n    dict with keys: {fields}" if fields else ""


def tool_stubs(
    registry: Registry, principal: Principal, *, names: Collection[str] | None = None
) -> list[ToolStub]:
    """Stubs of every tool ``principal`` may call from code, sorted by name.

    ``names``, when given, narrows them further (a harness leaves out tools the run's grant
    cannot use).
    """

    def made() -> list[ToolStub]:
        definitions = [
            d for d in registry.visible(principal, "code") if names is None or d.name in names
        ]
        return _stubs(registry, definitions, proposal=False)

    return remembered(registry, (False, principal.scopes, names), made)


_PROPOSAL_NOTE = (
    "Proposes this change; nothing is changed from code. The host computes the exact effect "
    "as for a direct call, and when the program ends its proposals wait as one batch for a "
    "person to approve."
)
_PROPOSAL_RETURNS = "Returns:\n    dict with keys: preview_id, tool, summary, state"


def proposal_stubs(
    registry: Registry, principal: Principal, *, names: Collection[str]
) -> list[ToolStub]:
    """Stubs of the write tools in ``names`` that ``principal`` may propose from code (the
    tool's contract says ``proposable``, the principal has its scope), sorted by name. The
    caller decides ``names`` from the run's grant (``Grant.allows_proposal``)."""

    def made() -> list[ToolStub]:
        definitions = [
            d
            for d in registry.visible(principal, "direct")
            if d.name in names and _proposable(registry, d.name)
        ]
        return _stubs(registry, definitions, proposal=True)

    return remembered(registry, (True, principal.scopes, names), made)


def _proposable(registry: Registry, name: str) -> bool:
    spec = registry.get(name)
    return spec is not None and spec.write is not None and spec.write.proposable


def _stubs(
    registry: Registry, definitions: list[ToolDefinition], *, proposal: bool
) -> list[ToolStub]:
    stubs = []
    for definition in definitions:
        schema = definition.parameters
        defs = schema.get("$defs") if isinstance(schema.get("$defs"), dict) else {}
        properties = schema.get("properties")
        defaults = _defaults(registry, definition.name)
        params = tuple(
            ParamStub(
                name=field,
                annotation=_annotation(sub, defs),  # type: ignore[arg-type]
                description=_describe(sub),
                required=field not in defaults,
                default=defaults.get(field, (None, False))[0],
                shown_default=defaults.get(field, (None, False))[1],
            )
            for field, sub in (properties.items() if isinstance(properties, dict) else ())
        )
        sections = [definition.description.strip()]
        if proposal:
            sections.append(_PROPOSAL_NOTE)
        documented = [p for p in params if p.description or not python_name(p.name)]
        if documented:
            sections.append("Args:\n" + "\n".join(f"    {_arg_doc(p)}" for p in documented))
        returns = _PROPOSAL_RETURNS if proposal else _returns_section(registry, definition.name)
        if returns:
            sections.append(returns)
        stubs.append(
            ToolStub(
                name=definition.name,
                doc="\n\n".join(sections),
                params=params,
                proposal=proposal,
            )
        )
    return stubs


def _defaults(registry: Registry, name: str) -> dict[str, tuple[JSONValue, bool]]:
    """The input fields of ``name`` a call may leave out, with the default the input model
    applies (as JSON) and whether it can be shown (a factory's cannot)."""
    spec = registry.get(name)
    return {} if spec is None else dict(_model_defaults(spec.input_model))


@functools.lru_cache(maxsize=1024)
def _model_defaults(model: type[BaseModel]) -> tuple[tuple[str, tuple[JSONValue, bool]], ...]:
    # Per model, once: a run frame carries the stubs of every tool, on every run. Keyed as
    # the schema's properties are (and as a call passes it): by the field's alias, if any.
    shown = model.model_json_schema(mode="validation").get("properties", {})
    found: list[tuple[str, tuple[JSONValue, bool]]] = []
    for field, info in model.model_fields.items():
        if info.is_required():
            continue
        name = _schema_name(field, info)
        sub = shown.get(name) if isinstance(shown, dict) else None
        if isinstance(sub, dict) and "default" in sub:
            found.append((name, (sub["default"], True)))
        else:
            found.append((name, (None, False)))
    return tuple(found)


def _schema_name(field: str, info: FieldInfo) -> str:
    """The name the validation schema gives ``field`` (as pydantic names it): a call passes
    it so. An ``AliasChoices`` goes by its first choice that is a name, not a longer path;
    without one, or for an ``AliasPath``, the schema names the property by the field."""
    alias = info.validation_alias
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices):
        for path in alias.convert_to_aliases():
            if len(path) == 1 and isinstance(path[0], str):
                return path[0]
        return field
    if isinstance(alias, AliasPath):
        return field
    return info.alias or field


def python_name(name: str) -> bool:
    """Whether a parameter of this name can stand in a signature (an alias need not)."""
    return name.isidentifier() and not keyword.iskeyword(name) and name != BY_KEYWORD


BY_KEYWORD = "kwargs"
"""The ``**`` parameter of a signature that takes those whose names are not Python's."""


def _arg_doc(param: ParamStub) -> str:
    if python_name(param.name):
        return f"{param.name}: {param.description}"
    how = f"pass it as **{{{json.dumps(param.name)}: ...}} (not a Python name)"
    if not param.required:
        how += f"; default {param.default_text}"
    return f"{param.name}: {param.annotation}; {how}" + (
        f". {param.description}" if param.description else ""
    )
