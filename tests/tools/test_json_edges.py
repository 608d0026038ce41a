"""Values JSON cannot carry, on the way in and on the way out: a tool's result holding NaN or
an infinity fails the call (never written as null), and arguments whose text holds a lone
surrogate are refused naming the field, apart from NaN's own refusal."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, RootModel

from airlock.policies import Grant, Principal, read
from airlock.tools import (
    AuditLog,
    InvalidInputError,
    MemoryAuditStore,
    Registry,
    RunAuthority,
    ToolError,
)
from airlock.tools._arguments import admit_arguments, encode_arguments
from airlock.tools._shaping import shape_plain, shape_result, shape_with

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"probe.read"}))
GRANT = Grant(scopes=frozenset({"probe.read"}), effects=(read("probe:**"),))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Reading(BaseModel):
    value: Any
    unit: str | None = None


# -- results ----------------------------------------------------------------------------------

# name: (the result's value, the path the error names)
NON_FINITE: dict[str, tuple[object, str]] = {
    "nan": (math.nan, "value"),
    "inf": (math.inf, "value"),
    "-inf": (-math.inf, "value"),
    "nan in a list": ([1.0, math.nan], "value.1"),
    "inf in a list": ([[0.5], [1.0, 2.0, math.inf]], "value.1.2"),
    "-inf in a list": ([-math.inf], "value.0"),
    "nan in a dict": ({"a": 1.0, "b": math.nan}, "value.b"),
    "inf in a dict": ({"a": {"b": [math.inf]}}, "value.a.b.0"),
    "-inf in a dict": ({"low": -math.inf}, "value.low"),
}

FINITE: dict[str, object] = {
    "float": 1.5,
    "largest": 1.7976931348623157e308,
    "negative zero": -0.0,
    "tiny": 5e-324,
    "in a list": [1.0, -2.5, None],
    "in a dict": {"a": {"b": [0.1, 1e300]}, "c": None},
    "text that says so": ["NaN", "Infinity", "-Infinity", "null"],
}


def _shapes() -> list[Any]:
    validator, serializer = Reading.__pydantic_validator__, Reading.__pydantic_serializer__
    return [
        lambda result: shape_result(Reading, result, max_bytes=1000),
        lambda result: shape_with(Reading, validator, serializer, result, 1000),
        lambda result: shape_plain(Reading, validator, serializer, result, 1000),
    ]


@pytest.mark.parametrize("case", list(NON_FINITE), ids=list(NON_FINITE))
def test_a_result_holding_nan_or_an_infinity_fails_the_call(case: str) -> None:
    value, path = NON_FINITE[case]
    for shape in _shapes():
        with pytest.raises(ToolError) as info:
            shape({"value": value, "unit": "kg"})
        error = info.value
        assert (error.code, error.retryable, error.outcome) == ("upstream", False, "unknown")
        assert error.message == (
            f"the tool's result holds NaN or infinity at {path}, which JSON cannot carry; "
            "do not retry this call"
        )
        assert error.detail == f"result of Reading holds NaN or infinity at {path}"


@pytest.mark.parametrize("case", list(FINITE), ids=list(FINITE))
def test_a_result_of_finite_floats_passes_unchanged(case: str) -> None:
    value = FINITE[case]
    for shape in _shapes():
        data = shape({"value": value})
        assert data == {"value": value, "unit": None}
        if isinstance(value, float):  # the same float, its sign included
            assert math.copysign(1, data["value"]) == math.copysign(1, value)


def test_a_root_models_nan_and_a_nan_key_fail_too() -> None:
    with pytest.raises(ToolError) as info:
        shape_result(RootModel[float], math.nan, max_bytes=100)
    assert info.value.message == (
        "the tool's result holds NaN or infinity, which JSON cannot carry; do not retry this call"
    )
    with pytest.raises(ToolError) as info:
        shape_result(Reading, {"value": {"a": {math.inf: 1}}}, max_bytes=100)
    assert "holds NaN or infinity at value.a.inf," in info.value.message
    assert shape_result(RootModel[float], 2.5, max_bytes=100) == 2.5  # type: ignore[comparison-overlap]


def _registry(returned: list[object]) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("probe:reading/{name}")], scope="probe.read")
    def probe_reading_get(name: Annotated[str, Field(max_length=32)]) -> Reading:
        """Read one probe's value by name. Use it to test values. It does not change
        anything."""
        return Reading(value=returned[0])

    return registry


@pytest.mark.parametrize("value", [math.nan, [math.inf], {"k": -math.inf}], ids=str)
async def test_a_direct_call_whose_result_holds_nan_fails_and_is_audited(value: object) -> None:
    registry = _registry([value])
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1").context("direct", "r1:c1")
    with pytest.raises(ToolError) as info:
        await registry.call("probe_reading_get", {"name": "p1"}, ctx)
    assert (info.value.code, info.value.retryable) == ("upstream", False)
    assert "holds NaN or infinity at value" in info.value.message
    registry.audit.flush()
    (event,) = registry.audit.events(run_id="r1")
    assert (event.outcome, event.code) == ("unknown", "upstream")


async def test_a_direct_call_whose_result_is_finite_answers_it() -> None:
    registry = _registry([[1.5, -0.0]])
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1").context("direct", "r1:c1")
    assert await registry.call("probe_reading_get", {"name": "p1"}, ctx) == {
        "value": [1.5, -0.0],
        "unit": None,
    }


# -- arguments --------------------------------------------------------------------------------

SURROGATE = "the text holds a lone surrogate (not valid Unicode)"
NOT_PLAIN = "arguments must be plain JSON values (no NaN)"

# name: (arguments, the field and reason of the one issue)
REFUSED_ARGUMENTS: dict[str, tuple[dict[Any, Any], tuple[str, str]]] = {
    "a surrogate": ({"name": "a\ud800"}, ("name", SURROGATE)),
    "a low surrogate": ({"name": "p1", "note": "\udfffb"}, ("note", SURROGATE)),
    "in a list": ({"name": "p1", "tags": ["ok", "é\udc00"]}, ("tags.1", SURROGATE)),
    "in a dict": ({"name": "p1", "meta": {"k": {"j": "\ud83d"}}}, ("meta.k.j", SURROGATE)),
    "in a name": ({"name": "p1", "b\ud800": 1}, ("b\\ud800", SURROGATE)),
    "nan": ({"name": math.nan}, ("", NOT_PLAIN)),
    "infinity in a list": ({"name": "p1", "x": [math.inf]}, ("", NOT_PLAIN)),
    "not json": ({"name": object()}, ("", NOT_PLAIN)),
}


@pytest.mark.parametrize("case", list(REFUSED_ARGUMENTS), ids=list(REFUSED_ARGUMENTS))
def test_arguments_json_cannot_carry_are_refused_saying_where_and_why(case: str) -> None:
    args, (field, reason) = REFUSED_ARGUMENTS[case]
    validator, serializer = Reading.__pydantic_validator__, Reading.__pydantic_serializer__
    for admit in (
        lambda: encode_arguments(args, max_bytes=1000),
        lambda: admit_arguments(validator, serializer, None, None, args, 1000),
    ):
        with pytest.raises(InvalidInputError) as info:
            admit()
        assert [(i.field, i.reason) for i in info.value.issues] == [(field, reason)]
        json.dumps(info.value.to_wire(), ensure_ascii=False).encode()  # it is JSON itself


def test_a_surrogate_in_arguments_that_hold_themselves_is_still_found() -> None:
    args: dict[str, Any] = {"name": "p1"}
    args["self"] = args
    with pytest.raises(InvalidInputError) as info:
        encode_arguments(args, max_bytes=1000)
    assert [i.reason for i in info.value.issues] == [NOT_PLAIN]
    args["note"] = "\ud800"
    with pytest.raises(InvalidInputError) as info:
        encode_arguments(args, max_bytes=1000)
    assert [i.field for i in info.value.issues] == ["note"]


async def test_a_direct_call_with_a_surrogate_names_the_field() -> None:
    registry = _registry([1.0])
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1").context("direct", "r1:c1")
    with pytest.raises(ToolError) as info:
        await registry.call("probe_reading_get", {"name": "a\ud800"}, ctx)
    assert info.value.code == "invalid_input"
    assert info.value.message == f"invalid arguments: name: {SURROGATE}"
