"""Code and direct calls validate the same way: a parameter with a default may be left out of
a program's call, as of a direct one, and the host's input model fills it in.

The guest's ``ToolFunction`` is the image's own file (``load_guest``), driven over a
connection that hands each call to the registry as the bridge does, with caller ``code``."""

from __future__ import annotations

import inspect
import textwrap
from concurrent.futures import Future
from typing import Annotated, Any, Literal

import anyio
import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.bridge import ToolSession, render_api, tool_stubs
from airlock.policies import Grant, Principal, read
from airlock.tools import CallContext, Registry, RunAuthority, ToolError, ToolSpec
from tests.conftest import Sandbox
from tests.sandbox.guest_image import load_guest

guest = load_guest("airlock_bridge")
errors = load_guest("airlock_errors")

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"notes.read"}))
GRANT = Grant(scopes=frozenset({"notes.read"}), effects=(read("notes:note/*"),))


class Listing(BaseModel):
    tag: str
    limit: int
    order: str
    fields: list[str]
    since: str | None


class ListArgs(BaseModel):
    """The input: parameters with defaults, one from a factory, one required after them."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    tag: Annotated[Literal["any", "plan"], Field(description="Which notes.")] = "any"
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    fields: Annotated[
        list[Annotated[str, Field(max_length=20)]], Field(max_length=5, default_factory=list)
    ]
    order: Annotated[str, Field(max_length=10)]
    since: Annotated[str | None, Field(max_length=10)] = None


def notes_note_list(**values: Any) -> Listing:
    return Listing(**values)


def build() -> Registry:
    registry = Registry()
    registry.register(
        ToolSpec(
            name="notes_note_list",
            description="List notes. Use it to find notes by tag. It does not return bodies.",
            handler=notes_note_list,
            input_model=ListArgs,
            output_model=Listing,
            effects=(read("notes:note/*"),),
            callers=frozenset({"direct", "code"}),
            scope="notes.read",
        )
    )
    return registry


def context(caller: str) -> CallContext:
    authority = RunAuthority(principal=ALICE, grant=GRANT, run_id="run_1")
    return authority.context(caller, "run_1:c1")  # type: ignore[arg-type]


class Bridge:
    """The guest's connection, answered by the registry as the host's bridge answers it."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.sent: list[dict[str, Any]] = []

    def submit(self, message: dict[str, Any], *, awaited: bool = False) -> Future[Any]:
        self.sent.append(message["args"])
        future: Future[Any] = Future()
        try:
            future.set_result(
                anyio.run(self.registry.call, message["tool"], message["args"], context("code"))
            )
        except ToolError as exc:
            future.set_exception(errors.error_from_wire(exc.to_wire()))
        return future

    def wait(self, future: Future[Any]) -> Any:
        return future.result()

    def call(self, message: dict[str, Any]) -> Any:
        return self.wait(self.submit(message))


def function(registry: Registry) -> tuple[Any, Bridge]:
    (stub,) = tool_stubs(registry, ALICE)
    bridge = Bridge(registry)
    return guest.ToolFunction(bridge, stub.to_wire()), bridge


def test_stubs_carry_which_parameters_have_defaults() -> None:
    (stub,) = tool_stubs(build(), ALICE)
    params = {p.name: (p.required, p.default, p.shown_default) for p in stub.params}
    assert params == {
        "tag": (False, "any", True),
        "limit": (False, 20, True),
        "fields": (False, None, False),  # a factory: left to the host, shown as ...
        "order": (True, None, False),
        "since": (False, None, True),
    }


def test_the_rendered_api_shows_the_defaults() -> None:
    text = render_api(build(), ALICE)
    assert (
        "def notes_note_list(tag: Literal['any', 'plan'] = 'any', limit: int = 20, "
        "fields: list[str] = ..., *, order: str, since: str | None = None) -> dict:"
    ) in text
    compile(text, "api", "exec")


def test_the_guest_signature_has_the_defaults() -> None:
    tool, _ = function(build())
    signature = inspect.signature(tool)
    assert str(signature).startswith("(tag: \"Literal['any', 'plan']\" = 'any', limit: 'int' = 20")
    assert signature.parameters["order"].kind is inspect.Parameter.KEYWORD_ONLY
    assert repr(signature.parameters["fields"].default) == "..."


@pytest.mark.parametrize(
    "args",
    [
        {"order": "new"},
        {"order": "new", "tag": "plan"},
        {"order": "new", "limit": 5, "fields": ["title"], "since": "2026-01-01"},
    ],
)
def test_a_program_may_leave_out_what_a_direct_call_may(args: dict[str, Any]) -> None:
    registry = build()
    tool, bridge = function(registry)
    from_code = tool(**args)
    assert bridge.sent == [args]  # what was left out is not sent: the host fills it in
    direct = anyio.run(registry.call, "notes_note_list", args, context("direct"))
    assert from_code == direct


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda f: f(), "invalid_input"),  # order is required, here as directly
        (lambda f: f("any", 5, [], "new"), "invalid_input"),  # order is keyword-only
        (lambda f: f(order="new", limit=0), "invalid_input"),  # the host's bounds
        (lambda f: f(order="new", color="red"), "invalid_input"),
    ],
)
def test_what_a_direct_call_refuses_a_program_cannot_send(call: Any, code: str) -> None:
    tool, _ = function(build())
    with pytest.raises(errors.ToolError) as info:
        call(tool)
    assert info.value.code == code


@pytest.mark.docker
def test_a_sandboxed_program_leaves_out_what_a_direct_call_may(sandbox: Sandbox) -> None:
    registry = build()
    tools = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
    program = textwrap.dedent("""
        one = tools.notes_note_list(order="new")
        two = tools.notes_note_list.batch([{"order": "old", "tag": "plan"}])[0]
        try:
            tools.notes_note_list("any", 5, [], "new")
            positional = "accepted"
        except tools.InvalidInput as error:
            positional = error.code
        {"one": one, "two": two, "positional": positional}
    """)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error
    direct = anyio.run(registry.call, "notes_note_list", {"order": "new"}, context("direct"))
    assert result.value["one"] == direct
    assert result.value["two"]["tag"] == "plan"
    assert result.value["two"]["limit"] == 20
    assert result.value["positional"] == "invalid_input"
