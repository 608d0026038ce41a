"""A failed call of a tool with many ``Secret()`` values (a program chooses its arguments: a
list of 9,999 keys) costs the event loop no seconds: their forms are made once per failure
and only up to :data:`~airlock.tools._secret_forms.MOST_FORM_CHARS` characters, a text that
may quote more is withheld whole (its type kept), and a tool error's detail is cleaned only
as far as it is kept."""

from __future__ import annotations

import random
import string
import time
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, read
from airlock.tools import (
    MemoryAuditStore,
    Registry,
    RunAuthority,
    Secret,
    ToolError,
    UpstreamError,
)
from airlock.tools._audit_log import AuditLog
from airlock.tools._step_text import (
    _TRACE_CHARS,
    TOO_MANY,
    without_secrets,
)

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"vault.read"}))
GRANT = Grant(scopes=frozenset({"vault.read"}), effects=(read("vault:**"),))
SLOW = 0.5
"""Seconds no failure may take: each of these took from one to thirty before."""
_random = random.Random(0)


def _keys(count: int, length: int, alphabet: str = string.ascii_letters) -> list[str]:
    return ["".join(_random.choices(alphabet, k=length)) for _ in range(count)]


class Out(BaseModel):
    ok: bool


QUERY = "".join(_random.choices(string.ascii_letters + " ,.", k=800_000))
KEY = Annotated[str, Field(max_length=64)]


def _registry(query_echoed: bool) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("vault:search/{name}")], scope="vault.read")
    def vault_search_get(
        name: Annotated[str, Field(max_length=32)],
        keys: Annotated[list[KEY], Secret(), Field(max_length=10_000)],
        query: Annotated[str, Field(max_length=1_000_000)],
    ) -> Out:
        """Search the vault with the user's keys. Use it to find notes. It does not change
        anything."""
        if query_echoed:
            raise UpstreamError("the search service refused", detail=f"bad query {query}")
        raise RuntimeError(f"the search service is down for {keys[0]}")

    return registry


# name: (the keys, whether the tool error echoes the query; how its detail may start then)
CALLS: dict[str, tuple[list[str], bool, str | tuple[str, ...]]] = {
    "9,000 keys of 64 characters, the handler raises": (
        _keys(9_000, 64, string.ascii_letters + '/ +"'),
        False,
        f"RuntimeError: {TOO_MANY}",
    ),
    "9,999 keys of 3 characters, the tool error echoes 800 KB": (
        _keys(9_999, 3),
        True,
        ("bad query ", TOO_MANY),  # (withheld if cleaning it would read too much)
    ),
    "9,999 keys of 16 characters, the tool error echoes 800 KB": (
        _keys(9_999, 16),
        True,
        TOO_MANY,
    ),
    "3 keys, the tool error echoes 800 KB": (_keys(3, 16), True, "bad query "),
}


@pytest.mark.parametrize("case", CALLS)
async def test_a_failed_call_with_many_secret_values_is_recorded_quickly(case: str) -> None:
    keys, echoed, detail = CALLS[case]
    registry = _registry(echoed)
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1").context("direct", "r1:c1")
    started = time.thread_time()  # (the event loop's: what it is held for, not waits)
    query = QUERY if echoed else "q"
    with pytest.raises(ToolError) as raised:
        await registry.call("vault_search_get", {"name": "n", "keys": keys, "query": query}, ctx)
    took = time.thread_time() - started
    assert raised.value.code == "upstream"
    said = raised.value.detail or ""
    assert said.startswith(detail)
    assert len(said) <= _TRACE_CHARS + len(" ... [cut]")  # (the whole 800 KB before)
    if len(keys[0]) > 3:  # (three letters are found in the marker that replaced others)
        assert not [key for key in keys if key in said.replace(TOO_MANY, "")]
    assert took < SLOW, took


TEXT = "".join(_random.choices(string.ascii_letters + " /+=%\\", k=1 << 20))

# name: (the values a megabyte of text is cleaned of whole)
WHOLE = {
    "9,999 values of 3 letters": _keys(9_999, 3),
    "9,999 values of 16 letters": _keys(9_999, 16),
    "9,999 values of 16 characters, not all plain": _keys(9_999, 16, "abcdef/ +é"),
}


@pytest.mark.parametrize("case", WHOLE)
def test_a_megabyte_with_many_secret_values_is_withheld_not_cleaned_whole(case: str) -> None:
    started = time.thread_time()
    kept = without_secrets(TEXT, WHOLE[case])
    took = time.thread_time() - started
    assert kept == TOO_MANY
    assert took < SLOW, took
