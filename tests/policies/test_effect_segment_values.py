"""What fills a ``{field}`` placeholder: a str or an int, or an enum member holding one (its
value), written in at most 200 characters; an int too long for that is refused without
being converted to text (over 4,300 digits Python refuses to, with a ValueError)."""

from __future__ import annotations

import enum

import pytest

from airlock.policies import EffectArgumentError, network, read, write


class Colour(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    LARGE = 9


class Shade(enum.Enum):
    DARK = "dark"


class Path(enum.Enum):
    UP = "../admin"


class Weight(enum.Enum):
    LIGHT = 0.5


class Flag(enum.Enum):
    ON = True


def _int(digits: int) -> int:
    return 7 * (10**digits - 1) // 9


# (value, the segment it fills, or None: refused)
VALUES: list[tuple[str, object, str | None]] = [
    ("str enum", Colour.RED, "red"),
    ("int enum", Size.LARGE, "9"),
    ("enum of str", Shade.DARK, "dark"),
    ("enum of a path", Path.UP, None),
    ("enum of a float", Weight.LIGHT, None),
    ("enum of a bool", Flag.ON, None),
    ("int", 42, "42"),
    ("negative int", -42, "-42"),
    ("int of 200 digits", _int(200), "7" * 200),
    ("negative int of 199 digits", -_int(199), "-" + "7" * 199),
    ("int of 201 digits", _int(201), None),
    ("negative int of 200 digits", -_int(200), None),
    ("int of 5,000 digits", _int(5000), None),
    ("int of 100,000 digits", -_int(100_000), None),
    ("bool", True, None),
]


@pytest.mark.parametrize(("label", "value", "segment"), VALUES, ids=[v[0] for v in VALUES])
@pytest.mark.parametrize("template", [read("crm:thing/{v}"), write("crm:thing/x-{v}/y")])
def test_a_value_fills_one_segment_or_is_refused(
    template: object, label: str, value: object, segment: str | None
) -> None:
    effect = template  # (an Effect: parametrized ids stay short)
    assert isinstance(effect, type(read("a:b")))
    args = {"v": value}
    for resolve in (effect.resolve_all, effect.resolver()):
        if segment is None:
            with pytest.raises(EffectArgumentError) as caught:
                resolve(args)
            assert caught.value.field == "v"
        else:
            (resolved,) = resolve(args)
            assert resolved.target == effect.target.replace("{v}", segment)


@pytest.mark.parametrize(("value", "text"), [(Colour.RED, "red"), (Size.LARGE, "9")])
def test_an_enum_member_fills_a_list_element_and_a_host(value: object, text: str) -> None:
    (each,) = read("crm:thing/{v[]}").resolve_all({"v": [value]})
    assert each.target == f"crm:thing/{text}"
    host = network("https://{v}.example.com/x")
    assert host.resolve({"v": value}).target == f"https://{text}.example.com/x"
