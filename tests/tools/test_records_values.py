"""A listing's records name one effect each when their ids fill the record's effect; an id
that cannot (an integer too long to write as a segment, a path, a float) leaves the declared
pattern standing. Either way the call ends with exactly one audit event, and anything that
fails there is a typed error on the call's failed trail."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from pydantic import BaseModel

import airlock.tools._records as records_module
from airlock.policies import Grant, Principal, read
from airlock.tools import CallContext, RecordsRead, Registry, ToolError

pytestmark = pytest.mark.anyio


def _int(digits: int) -> int:
    """An integer of ``digits`` digits, made without its text (over 4,300 digits Python
    refuses to convert it either way)."""
    return 7 * (10**digits - 1) // 9


class Item(BaseModel):
    n: Any


class Listing(BaseModel):
    items: list[Item]


PRINCIPAL = Principal(user_id="u", tenant_id="t", scopes=frozenset({"crm.read"}))
GRANT = Grant(scopes=frozenset({"crm.read"}), effects=(read("crm:num/*"),))
PATTERN = ("read(crm:num/*)",)

# (upstream ids, the call's recorded effects)
IDS: list[tuple[str, list[object], tuple[str, ...]]] = [
    ("small ints", [1, 22], ("read(crm:num/1)", "read(crm:num/22)")),
    ("negative", [-5], ("read(crm:num/-5)",)),
    ("text", ["a_1"], ("read(crm:num/a_1)",)),
    ("200 digits", [_int(200)], (f"read(crm:num/{'7' * 200})",)),
    ("-199 digits", [-_int(199)], (f"read(crm:num/-{'7' * 199})",)),
    ("201 digits", [_int(201)], PATTERN),
    ("-200 digits", [-_int(200)], PATTERN),
    ("5,000 digits", [1, _int(5000)], PATTERN),
    ("100,000 digits", [_int(100_000)], PATTERN),
    ("a path", ["a/b"], PATTERN),
    ("a float", [1.5], PATTERN),
    ("null", [None], PATTERN),
]


def _registry(items: list[object]) -> Registry:
    registry = Registry()

    @registry.tool(
        effects=[read("crm:num/*")],
        scope="crm.read",
        callers={"direct", "code"},
        records=RecordsRead("items", read("crm:num/{n}")),
        description="Lists numbers. Use it to list. It returns numbers only.",
        max_result_bytes=1_000_000,
    )
    def crm_num_list() -> Listing:
        return Listing(items=[Item(n=n) for n in items])

    return registry


@pytest.mark.parametrize(("label", "items", "effects"), IDS, ids=[i[0] for i in IDS])
async def test_each_record_id_is_one_effect_or_the_pattern_stands(
    label: str, items: list[object], effects: tuple[str, ...]
) -> None:
    registry = _registry(items)
    ctx = CallContext(principal=PRINCIPAL, grant=GRANT, run_id="r", caller="code")

    await registry.call("crm_num_list", {}, ctx)

    (event,) = registry.audit.events()
    assert (event.outcome, event.effects) == ("ok", effects)
    assert sys.get_int_max_str_digits() in (0, 4300)  # (the test changed no limit)


async def test_a_failure_naming_the_records_is_a_typed_error_with_one_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("a bug while naming the records")

    monkeypatch.setattr(records_module, "_covers", broken)
    registry = _registry([1])
    ctx = CallContext(principal=PRINCIPAL, grant=GRANT, run_id="r", caller="code")

    with pytest.raises(ToolError) as caught:
        await registry.call("crm_num_list", {}, ctx)

    (event,) = registry.audit.events()
    assert caught.value.code == event.code == "upstream"
    assert (event.stage, event.outcome) == ("shape", "unknown")
    assert not caught.value.retryable
