"""An effect placeholder names a field that can fill a resource: registration refuses one
whose field cannot hold one id segment (a str or an int), or can be ``None``, with an error
that names the tool, the field and the placeholder; an enum member fills it with its value."""

from __future__ import annotations

import enum
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal
from uuid import UUID

import pytest
from pydantic import AnyUrl, BaseModel, ConfigDict, Field, SecretStr, create_model

from airlock.policies import Grant, Principal, UsageError, disclose, read, spend, write
from airlock.tools import CallContext, Registry, SQLiteLedgerStore, ToolError, WritePath, write_tool

pytestmark = pytest.mark.anyio

Text = Annotated[str, Field(max_length=40)]
REQUIRED: Any = ...
DOC = "Read one thing. Use it to look one up. It returns its id only."


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 9


class Shade(enum.Enum):  # (a member that is no str: its value is)
    DARK = "dark"


class Weight(enum.Enum):
    LIGHT = 0.5


class Flag(enum.Enum):
    ON = True


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    thing_id: Text


class Thing(BaseModel):
    thing_id: str


# (label, the field's type, its default, refused: a fragment of the error, or None)
FIELDS: list[tuple[str, Any, Any, str | None]] = [
    ("str", Text, REQUIRED, None),
    ("int", int, REQUIRED, None),
    ("str enum", Colour, REQUIRED, None),
    ("int enum", Size, REQUIRED, None),
    ("enum of str values", Shade, REQUIRED, None),
    ("literal", Literal["a", "b"], REQUIRED, None),
    ("str or int", Text | int, REQUIRED, None),
    ("str with a default", Text, "a", None),
    ("optional str", Text | None, None, "can be None"),
    ("optional str without default", Text | None, REQUIRED, "can be None"),
    ("str defaulting to None", Text, None, "can be None"),
    ("optional int", int | None, None, "can be None"),
    ("optional enum", Colour | None, None, "can be None"),
    ("literal with None", Literal["a", None], REQUIRED, "can be None"),
    ("float", float, REQUIRED, "float"),
    ("bool", bool, REQUIRED, "bool"),
    ("nested model", Inner, REQUIRED, "Inner"),
    ("enum of floats", Weight, REQUIRED, "Weight"),
    ("enum of bools", Flag, REQUIRED, "Flag"),
    ("literal bool", Literal[True], REQUIRED, "Literal"),
    ("str or float", Text | float, REQUIRED, "float"),
]
IDS = [f[0] for f in FIELDS]
# A read's input fills its effects as validated: a date or a UUID is no str (the rows of the
# write table below that differ: an effect is filled from its JSON form).
READ_FIELDS = [
    *FIELDS,
    ("date", date, REQUIRED, "date"),
    ("UUID", UUID, REQUIRED, "UUID"),
    ("datetime", datetime, REQUIRED, "datetime"),
]
# A write's effect is filled from prepare's effect in JSON form (model_dump(mode="json")),
# where a date, a UUID or a Decimal is one string. Types an input model refuses on its own
# (a string without a length cap, a free mapping) an effect model may hold.
EFFECT_FIELDS = [
    *FIELDS,
    ("decimal", Decimal, REQUIRED, None),
    ("date", date, REQUIRED, None),
    ("UUID", UUID, REQUIRED, None),
    ("duration", timedelta, REQUIRED, None),
    ("str without a cap", str, REQUIRED, None),
    ("date or UUID", date | UUID, REQUIRED, None),
    ("optional date", date | None, REQUIRED, "can be None"),
    ("optional decimal", Decimal | None, None, "can be None"),
    ("UUID defaulting to None", UUID, None, "can be None"),
    # Strings that always hold a ':' or a '*', which no segment holds.
    ("datetime", datetime, REQUIRED, "date-time"),
    ("time", time, REQUIRED, "time"),
    ("URL", AnyUrl, REQUIRED, "uri"),
    ("pydantic secret", SecretStr, REQUIRED, "password"),
    ("mapping", dict[str, int], REQUIRED, "dict"),
    ("date or float", date | float, REQUIRED, "float"),
]


def _read_tool(annotation: Any, default: Any) -> Any:
    if default is REQUIRED:

        def crm_thing_get(thing: Any) -> Thing:
            return Thing(thing_id=str(thing))

    else:

        def crm_thing_get(thing: Any = default) -> Thing:
            return Thing(thing_id=str(thing))

    crm_thing_get.__annotations__ = {"thing": annotation, "return": Thing}
    return crm_thing_get


@pytest.mark.parametrize(
    ("label", "annotation", "default", "refused"), READ_FIELDS, ids=[f[0] for f in READ_FIELDS]
)
def test_a_read_tool_s_placeholder_must_name_a_field_that_fills_a_segment(
    label: str, annotation: Any, default: Any, refused: str | None
) -> None:
    registry = Registry()
    register = registry.tool(effects=[read("crm:thing/{thing}")], scope="crm.read", description=DOC)
    if refused is None:
        register(_read_tool(annotation, default))
        assert registry.get("crm_thing_get") is not None
        return
    with pytest.raises(UsageError) as caught:
        register(_read_tool(annotation, default))
    message = str(caught.value)
    for fragment in ("'crm_thing_get'", "'thing'", "read(crm:thing/{thing})", refused):
        assert fragment in message
    assert registry.specs() == ()


class ArchiveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    thing_id: Text


def _write_tool(annotation: Any, default: Any, effect: Any) -> Any:
    effect_model = create_model("ThingEffect", thing=(annotation, default))
    return write_tool(
        name="crm_thing_archive",
        description="Archive one thing. Use it to clean up. It returns its id only.",
        input_model=ArchiveArgs,
        effect_model=effect_model,
        receipt_model=Thing,
        prepare=lambda args, principal: effect_model(thing=args.thing_id),
        commit=lambda effect, key: {"thing_id": str(effect.thing)},
        effects=[effect],
        scope="crm.write",
    )


@pytest.mark.parametrize(
    ("label", "annotation", "default", "refused"), EFFECT_FIELDS, ids=[f[0] for f in EFFECT_FIELDS]
)
def test_a_write_tool_s_placeholder_must_name_an_effect_field_that_fills_a_segment(
    label: str, annotation: Any, default: Any, refused: str | None
) -> None:
    registry = Registry()
    spec = _write_tool(annotation, default, write("crm:thing/{thing}"))
    if refused is None:
        registry.register(spec)
        return
    with pytest.raises(UsageError) as caught:
        registry.register(spec)
    for fragment in ("'crm_thing_archive'", "'thing'", "write(crm:thing/{thing})", refused):
        assert fragment in str(caught.value)


# (the list field's type, refused: a fragment of the error, or None)
LISTS: list[tuple[Any, str | None]] = [
    (list[Text], None),
    (list[Colour], None),
    (list[int], None),
    (list[UUID], None),
    (list[date] | None, "can be None"),
    (list[datetime], "date-time"),
    (list[Text] | None, "can be None"),
    (list[Text | None], "can be None"),
    (list[float], "float"),
    (list[Inner], "Inner"),
]


@pytest.mark.parametrize(("annotation", "refused"), LISTS, ids=range(len(LISTS)))
def test_a_list_placeholder_must_name_a_list_of_fillable_elements(
    annotation: Any, refused: str | None
) -> None:
    registry = Registry()
    spec = _write_tool(annotation, REQUIRED, disclose("email:{thing[]}@acme.com"))
    if refused is None:
        registry.register(spec)
        return
    with pytest.raises(UsageError, match=refused):
        registry.register(spec)


def test_a_spend_amount_that_can_be_none_is_refused() -> None:
    registry = Registry()

    def crm_thing_get(amount_minor: int | None = None) -> Thing:
        return Thing(thing_id="x")

    with pytest.raises(UsageError, match="can be None"):
        registry.tool(
            effects=[read("crm:thing/*"), spend("{amount_minor}")],
            scope="crm.read",
            description=DOC,
        )(crm_thing_get)


PRINCIPAL = Principal(user_id="u", tenant_id="t", scopes=frozenset({"crm.read", "crm.write"}))
GRANT = Grant(
    scopes=frozenset({"crm.read", "crm.write"}),
    effects=(read("crm:thing/*"), write("crm:thing/*")),
)

# (the field's type, the argument sent, the resource its call reads)
MEMBERS: list[tuple[Any, object, str]] = [
    (Colour, "red", "crm:thing/red"),
    (Size, 9, "crm:thing/9"),
    (Shade, "dark", "crm:thing/dark"),
]


@pytest.mark.parametrize(("annotation", "sent", "resource"), MEMBERS, ids=["str", "int", "plain"])
async def test_an_enum_member_fills_the_resource_with_its_value(
    annotation: Any, sent: object, resource: str
) -> None:
    registry = Registry()
    registry.tool(effects=[read("crm:thing/{thing}")], scope="crm.read", description=DOC)(
        _read_tool(annotation, REQUIRED)
    )
    ctx = CallContext(principal=PRINCIPAL, grant=GRANT, run_id="r", caller="direct")

    await registry.call("crm_thing_get", {"thing": sent}, ctx)

    (event,) = registry.audit.events()
    assert (event.outcome, event.effects) == ("ok", (f"read({resource})",))


@pytest.mark.parametrize(("annotation", "sent", "resource"), MEMBERS, ids=["str", "int", "plain"])
async def test_an_enum_member_prepare_computes_fills_the_write(
    tmp_path: Path, annotation: Any, sent: object, resource: str
) -> None:
    registry = Registry()
    effect_model = create_model("ThingEffect", thing=(annotation, REQUIRED))
    registry.register(
        write_tool(
            name="crm_thing_archive",
            description="Archive one thing. Use it to clean up. It returns its id only.",
            input_model=ArchiveArgs,
            effect_model=effect_model,
            receipt_model=Thing,
            prepare=lambda args, principal: effect_model(thing=annotation(sent)),
            commit=lambda effect, key: {"thing_id": str(effect.thing)},
            effects=[write("crm:thing/{thing}")],
            scope="crm.write",
        )
    )
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    ctx = CallContext(principal=PRINCIPAL, grant=GRANT, run_id="r", caller="direct")
    try:
        preview = await WritePath(registry, ledger).call(
            "crm_thing_archive", {"thing_id": "t"}, ctx
        )
    except ToolError as exc:
        pytest.fail(f"the call failed: {exc.code} {exc.message}")
    finally:
        ledger.close()

    assert not isinstance(preview, dict)
    assert preview.effects == (f"write({resource})",)


# (the effect field's type, what prepare computes, the resource its preview writes)
JSON_FILLED: list[tuple[Any, object, str]] = [
    (date, date(2026, 12, 5), "crm:thing/2026-12-05"),
    (UUID, UUID(int=5), "crm:thing/00000000-0000-0000-0000-000000000005"),
    (Decimal, Decimal("12.50"), "crm:thing/12.50"),
]


@pytest.mark.parametrize(
    ("annotation", "computed", "resource"), JSON_FILLED, ids=["date", "UUID", "Decimal"]
)
async def test_a_value_prepare_computes_fills_the_write_with_its_json_form(
    tmp_path: Path, annotation: Any, computed: object, resource: str
) -> None:
    registry = Registry()
    effect_model = create_model("ThingEffect", thing=(annotation, REQUIRED))
    registry.register(
        write_tool(
            name="crm_thing_archive",
            description="Archive one thing. Use it to clean up. It returns its id only.",
            input_model=ArchiveArgs,
            effect_model=effect_model,
            receipt_model=Thing,
            prepare=lambda args, principal: effect_model(thing=computed),
            commit=lambda effect, key: {"thing_id": str(effect.thing)},
            effects=[write("crm:thing/{thing}")],
            scope="crm.write",
        )
    )
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    ctx = CallContext(principal=PRINCIPAL, grant=GRANT, run_id="r", caller="direct")
    try:
        preview = await WritePath(registry, ledger).call(
            "crm_thing_archive", {"thing_id": "t"}, ctx
        )
    except ToolError as exc:
        pytest.fail(f"the call failed: {exc.code} {exc.message}")
    finally:
        ledger.close()

    assert not isinstance(preview, dict)
    assert preview.effects == (f"write({resource})",)
