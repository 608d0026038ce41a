"""An exception's text recorded for a failed call keeps no value it must not: not the
call's ``Secret()`` arguments (a handler's ``int(pin)``, a ``prepare`` echoing its input, a
validator's ``KeyError``), and no part of a remembered credential, even one that straddles
the point where the text is cut. Neither in the audit log, nor in the operator's log."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, read, write
from airlock.tools import (
    MemoryAuditStore,
    Registry,
    RunAuthority,
    Secret,
    ToolError,
    WritePath,
)
from airlock.tools._audit_log import AuditLog
from airlock.tools._redact import remember_secret
from airlock.tools._step_text import argument_secrets, failure_detail, failure_trace
from tests.tools.stores import open_ledger
from tests.tools.vault import Item, Unlocked, register_unlock

pytestmark = pytest.mark.anyio

PIN = "s3cr3t-PIN-9f8e7d"
TOKEN = "sk_live_" + "7Hq2Zr9XbW4mK1pL8sV3nC6dF0gJ5tY2"
"""A credential the process revealed (remembered for redaction)."""
CUT = 500
"""Where the recorded text is cut."""

Kind = Literal["read", "write-prepare", "admission-check"]
ALICE = Principal(
    user_id="alice", tenant_id="acme", scopes=frozenset({"vault.read", "vault.write"})
)
GRANT = Grant(
    scopes=frozenset({"vault.read", "vault.write"}),
    effects=(read("vault:**"), write("vault:**")),
)
ALLOW = ApprovalPolicy((ApprovalRule(id="all", action="allow", tools=("vault_*",)),))


def in_message(pin: str) -> str:
    """The Secret() value itself, as a library's message quotes it."""
    return f"invalid literal for int() with base 10: {pin!r}"


def straddling(pin: str) -> str:
    """A remembered credential whose first 20 characters fall before the cut."""
    prefix = len("RuntimeError: ") + len("url 'https://api.example.org/?offset=") + len("&bot=")
    offset = "9" * (CUT - 20 - prefix)
    return f"url 'https://api.example.org/?offset={offset}&bot={TOKEN}/'"


MESSAGES: dict[str, tuple[Callable[[str], str], str]] = {
    # name: (the exception's message from the PIN, what must appear nowhere)
    "secret in exception message": (in_message, PIN),
    "credential straddling the cut": (straddling, TOKEN[:12]),
}


_MESSAGE: list[Callable[[str], str]] = []
"""How the world being tested words its exceptions (a validator is named at module level)."""


def _known(pin: str) -> str:
    raise RuntimeError(_MESSAGE[0](pin))  # (not a ValueError: validation lets it through)


CheckedPin = Annotated[str, Secret(), AfterValidator(_known), Field(max_length=64)]


class Unlock(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Annotated[str, Field(max_length=32)]
    pin: Annotated[str, Secret(), Field(max_length=64)]


class World:
    def __init__(self, root: Path, message: Callable[[str], str]) -> None:
        _MESSAGE[:] = [message]
        self.store = MemoryAuditStore()
        self.registry = Registry(audit=AuditLog(self.store))
        self.ledger = open_ledger(str(root))
        self.writes = WritePath(self.registry, self.ledger)

        @self.registry.tool(effects=[read("vault:item/{name}")], scope="vault.read")
        def vault_item_get(
            name: Annotated[str, Field(max_length=32)],
            pin: Annotated[str, Secret(), Field(max_length=64)],
        ) -> Item:
            """Read one vault item by name, unlocked by the user's PIN. Use it to read a
            stored note. It does not change anything."""
            raise RuntimeError(message(pin))

        @self.registry.tool(effects=[read("vault:item/{name}")], scope="vault.read")
        def vault_item_check(
            name: Annotated[str, Field(max_length=32)],
            pin: CheckedPin,
        ) -> Item:
            """Check one vault item by name against the user's PIN. Use it before reading a
            note. It does not change anything."""
            return Item(name=name)

        def prepare(args: Unlock, principal: Principal) -> Unlocked:
            raise RuntimeError(message(args.pin))

        register_unlock(self.registry, Unlock, prepare)

    async def call(self, kind: Kind) -> None:
        ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1", approvals=ALLOW).context(
            "direct", "r1:c1"
        )
        args = {"name": "n1", "pin": PIN}
        if kind == "write-prepare":
            await self.writes.preview_call("vault_item_unlock", args, ctx)
        else:
            tool = "vault_item_get" if kind == "read" else "vault_item_check"
            await self.registry.call(tool, args, ctx)


@pytest.fixture(autouse=True)
def _remembered() -> None:
    remember_secret(TOKEN)


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Callable[[Callable[[str], str]], World]]:
    made: list[World] = []

    def make(message: Callable[[str], str]) -> World:
        made.append(World(tmp_path, message))
        return made[-1]

    yield make
    for world in made:
        world.ledger.close()


@pytest.mark.parametrize("kind", ["read", "write-prepare", "admission-check"])
@pytest.mark.parametrize("case", sorted(MESSAGES))
async def test_a_failed_calls_recorded_text_keeps_no_secret(
    kind: Kind,
    case: str,
    make_world: Callable[[Callable[[str], str]], World],
    caplog: pytest.LogCaptureFixture,
) -> None:
    message, hidden = MESSAGES[case]
    world = make_world(message)
    # (a validator's own exception, a bug of the tool's, reaches the caller typed)
    with caplog.at_level(logging.DEBUG, logger="airlock"), pytest.raises(ToolError) as info:
        await world.call(kind)
    assert hidden not in str(info.value)
    assert hidden not in (info.value.detail or "")
    world.registry.audit.flush()
    events = world.store.query()
    failed = [e for e in events if e.detail]
    assert failed, events  # the failure is recorded, with what it said...
    assert all(len(e.detail or "") <= CUT for e in failed)
    assert hidden not in repr(events)  # ...without the secret
    assert hidden not in caplog.text
    assert all(hidden not in str(r.args) for r in caplog.records)
    assert "RuntimeError" in caplog.text


LONG = "correct-horse-battery-staple-" * 3
"""A secret long enough for pydantic to shorten where it quotes it."""


def _validation_error() -> ValidationError:
    try:
        Unlock.model_validate({"name": LONG, "pin": LONG})
    except ValidationError as exc:
        return exc
    raise AssertionError("the name is too long")


def _chained() -> BaseException:
    try:
        try:
            int(PIN)
        except ValueError as exc:
            raise RuntimeError(f"unlock failed for {PIN}") from exc
    except RuntimeError as exc:
        exc.add_note(f"pin was {PIN!r}")
        return exc
    raise AssertionError("it raised")


@pytest.mark.parametrize(
    ("exc", "secrets", "starts", "hidden"),
    [
        (
            ValueError(f"got {PIN!r} and {PIN} and Bearer abcdefgh1234"),
            (PIN,),
            "ValueError: got '[redacted]' and [redacted] and Bearer [redacted]",
            (PIN, "abcdefgh1234"),
        ),
        (ValueError(f"as JSON: {PIN!r:>30}"), (PIN,), "ValueError: as JSON:", (PIN,)),
        (
            _validation_error(),
            (LONG,),
            "ValidationError: 2 validation error(s) for Unlock: name: String should have at",
            (LONG[:20], LONG[-20:]),
        ),
        (_chained(), (PIN,), "RuntimeError: unlock failed for [redacted]", (PIN,)),
    ],
)
def test_the_kept_text_names_the_exception_and_hides_its_secrets(
    exc: BaseException, secrets: tuple[str, ...], starts: str, hidden: tuple[str, ...]
) -> None:
    detail, trace = failure_detail(exc, secrets), failure_trace(exc, secrets)
    assert detail.startswith(starts)
    assert type(exc).__name__ in trace
    for text in hidden:
        assert text not in detail
        assert text not in trace


def test_a_chained_exception_is_logged_with_its_cause() -> None:
    trace = failure_trace(_chained(), (PIN,))
    assert trace.index("ValueError: invalid literal") < trace.index("direct cause")
    assert trace.index("direct cause") < trace.index("RuntimeError: unlock failed")
    assert trace.endswith("pin was '[redacted]'")
    assert "Traceback (most recent call last):" in trace


def test_an_exception_whose_text_cannot_be_made_is_still_recorded() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    assert failure_detail(Unprintable(), ()).startswith("Unprintable: <its text")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"name": "n1", "pin": PIN}, (PIN,)),
        (Unlock(name="n1", pin=PIN), (PIN,)),
        ({"name": "n1", "pin": [PIN, {"a": 1234}]}, ("1234", PIN)),
        ({"name": "n1", "pin": SecretStr(PIN)}, (PIN,)),
        ({"name": "n1", "pin": ""}, ()),
        ({"name": "n1"}, ()),
        (["pin", PIN], ()),
    ],
)
def test_the_secret_values_of_arguments(arguments: object, expected: tuple[str, ...]) -> None:
    assert sorted(argument_secrets(arguments, {"pin"})) == sorted(expected)
