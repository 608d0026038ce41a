"""A tool input field with an alias: a call passes it by the alias (as the schema names it),
so its stub, its rendered signature and the guest's binding all go by the alias. An alias
that is not a Python name (``from``) is taken by ``**kwargs`` in both signatures, so the
rendered API stays Python and the guest's signature builds; its default is kept. A
``validation_alias`` of ``AliasChoices`` goes by its first choice that is a name, as the
schema does; one of paths only, by the property name the schema gives it."""

from __future__ import annotations

import ast
import inspect
from typing import Annotated, Any

import anyio
import pytest
from pydantic import AliasChoices, AliasPath, BaseModel, ConfigDict, Field

from airlock.bridge import render_api, tool_stubs
from airlock.policies import read
from airlock.tools import Registry, ToolSpec
from tests.bridge.test_stub_defaults import ALICE, Bridge, context, errors, guest


class Thing(BaseModel):
    n: int


def build(alias: str, *, default: bool, given: Any = None) -> Registry:
    """A tool whose ``start`` is passed as ``alias`` (``given``: its validation alias)."""
    named = Field(alias=alias, ge=0, le=5) if given is None else Field(validation_alias=given)
    if default:
        field: Any = Annotated[int, named, Field(ge=0, le=5)]

        class Args(BaseModel):
            model_config = ConfigDict(extra="forbid")
            thing_id: Annotated[str, Field(max_length=10)]
            start: field = 1  # type: ignore[valid-type]
    else:

        class Args(BaseModel):  # type: ignore[no-redef]
            model_config = ConfigDict(extra="forbid")
            thing_id: Annotated[str, Field(max_length=10)]
            start: Annotated[int, named, Field(ge=0, le=5)]

    registry = Registry()
    registry.register(
        ToolSpec(
            name="notes_thing_get",
            description="Fetch a thing. Use it to read things. It does not return owners.",
            handler=lambda **values: Thing(n=values["start"]),
            input_model=Args,
            output_model=Thing,
            effects=(read("notes:note/*"),),
            callers=frozenset({"direct", "code"}),
            scope="notes.read",
        )
    )
    return registry


CHOICES = AliasChoices("begin", "start_at")
# (case, alias a call passes, the field's validation alias (None: alias=), has a default,
#  the rendered signature)
ALIASES = [
    ("keyword_with_default", "from", None, True, "def notes_thing_get(thing_id: str, **kwargs: int)"),
    ("keyword_required", "from", None, False, "def notes_thing_get(thing_id: str, **kwargs: int)"),
    ("name_with_default", "begin", None, True, "def notes_thing_get(thing_id: str, begin: int = 1)"),
    ("name_required", "begin", None, False, "def notes_thing_get(thing_id: str, begin: int)"),
    ("not_a_name", "start-at", None, True, "def notes_thing_get(thing_id: str, **kwargs: int)"),
    ("choices_with_default", "begin", CHOICES, True,
     "def notes_thing_get(thing_id: str, begin: int = 1)"),
    ("choices_required", "begin", CHOICES, False, "def notes_thing_get(thing_id: str, begin: int)"),
    ("choices_after_a_path", "begin", AliasChoices(AliasPath("at", 0), "begin"), True,
     "def notes_thing_get(thing_id: str, begin: int = 1)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "alias", "given", "default", "rendered"), ALIASES, ids=[a[0] for a in ALIASES]
)
def test_an_aliased_parameter_is_rendered_and_bound_by_its_alias(
    case: str, alias: str, given: Any, default: bool, rendered: str
) -> None:
    registry = build(alias, default=default, given=given)
    (stub,) = tool_stubs(registry, ALICE)
    assert [(p.name, p.required) for p in stub.params] == [("thing_id", True), (alias, not default)]
    text = render_api(registry, ALICE)
    assert rendered in text
    ast.parse(text)  # Python, whatever the alias
    tool = guest.ToolFunction(Bridge(registry), stub.to_wire())
    assert repr(tool).startswith("<tool notes_thing_get(")
    inspect.signature(tool)
    assert tool(thing_id="a", **{alias: 3}) == {"n": 3}
    assert tool("a", **{alias: 4}) == {"n": 4}  # positional binding, through the signature
    if default:
        assert tool(thing_id="a") == {"n": 1}  # left out: the host applies the default
        assert tool("a") == {"n": 1}
    else:
        with pytest.raises(errors.InvalidInput, match=repr(alias)):
            tool("a")
    with pytest.raises(errors.InvalidInput):
        tool("a", **{alias: 2, "start": 2})  # the field's own name is not what a call passes
    direct = anyio.run(
        registry.call, "notes_thing_get", {"thing_id": "a", alias: 2}, context("direct")
    )
    assert tool(thing_id="a", **{alias: 2}) == direct


PATHS = [
    ("path", AliasPath("begin", 0)),
    ("path_of_one_name", AliasPath("begin")),
    ("choices_of_paths", AliasChoices(AliasPath("begin", 0), AliasPath("at", 1))),
]


@pytest.mark.parametrize(("case", "given"), PATHS, ids=[p[0] for p in PATHS])
def test_a_default_behind_an_alias_path_is_kept(case: str, given: Any) -> None:
    # The schema names the property by the field: its default is found there, so the stub
    # leaves it optional and the host applies the default.
    registry = build("begin", default=True, given=given)
    (stub,) = tool_stubs(registry, ALICE)
    assert [(p.name, p.required) for p in stub.params] == [("thing_id", True), ("start", False)]
    assert "def notes_thing_get(thing_id: str, start: int = 1)" in render_api(registry, ALICE)
    tool = guest.ToolFunction(Bridge(registry), stub.to_wire())
    assert tool("a") == {"n": 1}
