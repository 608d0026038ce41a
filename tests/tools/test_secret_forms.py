"""A call's ``Secret()`` values are kept out of what a failure leaves behind (the audit
record, the error's detail and wire form, the operator log) in every form an exception's
text may hold them: as an encoder wrote them (URL-quoted, bytes, JSON twice, base64), as a
type that is not a string spells itself (a UUID, a date, a nested model), and as validation
changed them (stripped, lower-cased) before a validator echoed them."""

from __future__ import annotations

import base64
import datetime
import decimal
import ipaddress
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, quote_plus

import pytest
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
)

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, read, write
from airlock.tools import (
    MemoryAuditStore,
    Registry,
    RunAuthority,
    Secret,
    ToolError,
    UpstreamError,
    WritePath,
    write_tool,
)
from airlock.tools._audit_log import AuditLog
from airlock.tools._step_text import (
    TOO_MANY,
    WITHHELD,
    argument_secrets,
    failure_detail,
    failure_trace,
)
from tests.tools.stores import open_ledger
from tests.tools.vault import Item, Unlocked, register_unlock

pytestmark = pytest.mark.anyio

ALICE = Principal(
    user_id="alice", tenant_id="acme", scopes=frozenset({"vault.read", "vault.write"})
)
GRANT = Grant(
    scopes=frozenset({"vault.read", "vault.write"}),
    effects=(read("vault:**"), write("vault:**")),
)
ALLOW = ApprovalPolicy((ApprovalRule(id="all", action="allow", tools=("vault_*",)),))
NAME = Annotated[str, Field(max_length=32)]
Kind = Literal["read", "write-prepare"]


class World:
    """A registry with one tool of each kind taking ``pin: annotation``, whose handler (or
    ``prepare``) raises ``RuntimeError(message(pin))``."""

    def __init__(self, root: Path, annotation: Any, message: Callable[[Any], str]) -> None:
        self.store = MemoryAuditStore()
        self.registry = Registry(audit=AuditLog(self.store))
        self.ledger = open_ledger(str(root))
        self.writes = WritePath(self.registry, self.ledger)

        def vault_item_get(name: str, pin: Any) -> Item:
            """Read one vault item by name, unlocked by the user's PIN. Use it to read a
            stored note. It does not change anything."""
            raise RuntimeError(message(pin))

        vault_item_get.__annotations__ = {"name": NAME, "pin": annotation, "return": Item}
        self.registry.tool(effects=[read("vault:item/{name}")], scope="vault.read")(vault_item_get)
        unlock: type[BaseModel] = create_model(
            "Unlock",
            __config__=ConfigDict(extra="forbid", strict=True, frozen=True),
            name=(NAME, ...),
            pin=(annotation, ...),
        )

        def prepare(args: Any, principal: Principal) -> Unlocked:
            raise RuntimeError(message(args.pin))

        register_unlock(self.registry, unlock, prepare)

    async def call(self, kind: Kind, pin: object) -> ToolError:
        ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1", approvals=ALLOW).context(
            "direct", "r1:c1"
        )
        args = {"name": "n1", "pin": pin}
        try:
            if kind == "write-prepare":
                await self.writes.preview_call("vault_item_unlock", args, ctx)
            else:
                await self.registry.call("vault_item_get", args, ctx)
        except ToolError as exc:
            return exc
        raise AssertionError("the call failed")

    def recorded(self) -> str:
        self.registry.audit.flush()
        return repr(self.store.query())


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Callable[[Any, Callable[[Any], str]], World]]:
    made: list[World] = []

    def make(annotation: Any, message: Callable[[Any], str]) -> World:
        root = tmp_path / str(len(made))
        root.mkdir()
        made.append(World(root, annotation, message))
        return made[-1]

    yield make
    for world in made:
        world.ledger.close()


def _kept_nowhere(
    hidden: str, error: ToolError, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    assert hidden not in str(error)
    assert hidden not in (error.detail or "")
    assert hidden not in json.dumps(error.to_wire())
    recorded = world.recorded()
    assert "RuntimeError" in recorded  # the failure is recorded, with what it was...
    assert hidden not in recorded  # ...without the secret in any form
    assert hidden not in caplog.text
    assert "RuntimeError" in caplog.text


# -- encoded forms of a string ----------------------------------------------------------------

PINS = {
    "ascii with symbols": 'Zq9-hunter2 pass/word+"x"\\end',
    "not ascii": "pässwört-Ω-77 ünd/mehr",
    "not ascii with symbols": 'pä"ss-Wörd\\42/x',
}


def _b64_core(blob: str) -> str:
    """The middle of a base64 text: what holds no bit of the bytes around the value."""
    return blob[4:-4]


def _php(value: object) -> str:
    """JSON as PHP writes it: ``/`` as ``\\/``."""
    return json.dumps(value).replace("/", "\\/")


def _lower_hex(text: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), text)


def _b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


# name: (what the exception says, given the value; what of it must appear nowhere)
FORMS: dict[str, tuple[Callable[[str], str], Callable[[str], str]]] = {
    "as written": (lambda v: f"bad {v}", lambda v: v),
    "url-quoted": (
        lambda v: f"url 'https://api.example.org/items?pin={quote(v, safe='')}'",
        lambda v: quote(v, safe=""),
    ),
    "url path, slash kept": (lambda v: f"/items/{quote(v)}/", quote),
    "form-encoded": (lambda v: f"pin={quote_plus(v)}&x=1", quote_plus),
    "utf-8 bytes repr": (lambda v: f"sent {v.encode()!r}", lambda v: repr(v.encode())[2:-1]),
    "json": (lambda v: json.dumps({"pin": v}), lambda v: json.dumps(v)[1:-1]),
    "json, not ascii": (
        lambda v: json.dumps({"pin": v}, ensure_ascii=False),
        lambda v: json.dumps(v, ensure_ascii=False)[1:-1],
    ),
    "json twice": (
        lambda v: json.dumps(json.dumps({"pin": v})),
        lambda v: json.dumps(json.dumps(v))[3:-3],
    ),
    "json twice, the inner layer not ascii": (
        lambda v: json.dumps(json.dumps({"pin": v}, ensure_ascii=False)),
        lambda v: json.dumps(json.dumps(v, ensure_ascii=False))[3:-3],
    ),
    "json twice, the outer layer not ascii": (
        lambda v: json.dumps(json.dumps({"pin": v}), ensure_ascii=False),
        lambda v: json.dumps(json.dumps(v), ensure_ascii=False)[3:-3],
    ),
    "json twice, neither layer ascii": (
        lambda v: json.dumps(json.dumps({"pin": v}, ensure_ascii=False), ensure_ascii=False),
        lambda v: json.dumps(json.dumps(v, ensure_ascii=False), ensure_ascii=False)[3:-3],
    ),
    "json, slash escaped (PHP)": (lambda v: _php({"pin": v}), lambda v: _php(v)[1:-1]),
    "json twice, slash escaped": (
        lambda v: _php(_php({"pin": v})),
        lambda v: _php(_php(v))[3:-3],
    ),
    "url-quoted, lower-case hex": (
        lambda v: f"?pin={_lower_hex(quote(v, safe=''))}",
        lambda v: _lower_hex(quote(v, safe="")),
    ),
    "url path, lower-case hex": (lambda v: _lower_hex(quote(v)), lambda v: _lower_hex(quote(v))),
    "form-encoded, slash kept": (
        lambda v: f"pin={quote_plus(v, safe='/')}&x=1",
        lambda v: quote_plus(v, safe="/"),
    ),
    "unicode_escape": (
        lambda v: f"got {v.encode('unicode_escape').decode()}",
        lambda v: v.encode("unicode_escape").decode(),
    ),
    "base64": (lambda v: f"auth {_b64(v)} refused", _b64),
    "base64, url-safe": (
        lambda v: f"token={base64.urlsafe_b64encode(v.encode()).decode()}",
        lambda v: base64.urlsafe_b64encode(v.encode()).decode(),
    ),
    "base64 of user:value (Basic auth)": (
        lambda v: f"basic auth {_b64('u:' + v)} refused",
        lambda v: _b64_core(_b64("u:" + v)),
    ),
    "base64 after one byte": (lambda v: _b64("x" + v), lambda v: _b64_core(_b64("x" + v))),
    "base64 of the value then more": (
        lambda v: _b64(v + ":tail"),
        lambda v: _b64_core(_b64(v + ":tail")),
    ),
}


@pytest.mark.parametrize("kind", ["read", "write-prepare"])
@pytest.mark.parametrize("pin", PINS.values(), ids=PINS.keys())
@pytest.mark.parametrize("form", FORMS)
async def test_a_secret_string_in_an_encoded_form_is_kept_nowhere(
    form: str,
    pin: str,
    kind: Kind,
    make_world: Callable[[Any, Callable[[Any], str]], World],
    caplog: pytest.LogCaptureFixture,
) -> None:
    said, hidden = FORMS[form]
    world = make_world(Annotated[str, Secret(), Field(max_length=64)], said)
    with caplog.at_level(logging.DEBUG, logger="airlock"):
        error = await world.call(kind, pin)
    assert len(hidden(pin)) >= 8
    _kept_nowhere(hidden(pin), error, world, caplog)


# -- values that are not strings --------------------------------------------------------------


class Creds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: Annotated[str, Field(max_length=64)]
    password: Annotated[str, Field(max_length=64)]


SESSION = "8c1f2e34-5b6a-4c7d-9e0f-123456789abc"
WHEN = "2031-07-19T04:05:06.789000"

# name: (the field's type, what is sent, what the exception says, what must appear nowhere)
SCALARS: dict[str, tuple[Any, object, Callable[[Any], str], str]] = {
    "uuid": (uuid.UUID, SESSION, lambda v: f"session {v} expired", SESSION),
    "uuid repr": (uuid.UUID, SESSION, lambda v: f"session {v!r} expired", SESSION),
    "datetime": (datetime.datetime, WHEN, lambda v: f"at {v}", str(WHEN).replace("T", " ")),
    "datetime iso": (datetime.datetime, WHEN, lambda v: f"at {v.isoformat()}", WHEN),
    "datetime repr": (datetime.datetime, WHEN, lambda v: f"at {v!r}", "2031, 7, 19, 4, 5"),
    "date": (datetime.date, "2031-07-19", lambda v: f"born {v}", "2031-07-19"),
    "ip address": (ipaddress.IPv4Address, "10.98.76.54", lambda v: f"from {v!r}", "10.98.76.54"),
    "nested model": (
        Creds,
        {"user": "u-name-1", "password": "Zq9-hunter2"},
        lambda v: f"login refused for {v!r}",
        "Zq9-hunter2",
    ),
    "nested model as json": (
        Creds,
        {"user": "u-name-1", "password": "Zq9/hunter2"},
        lambda v: f"login refused: {quote(v.model_dump_json(), safe='')}",
        "Zq9%2Fhunter2",
    ),
}


@pytest.mark.parametrize("kind", ["read", "write-prepare"])
@pytest.mark.parametrize("case", SCALARS)
async def test_a_secret_that_is_not_a_string_is_kept_nowhere(
    case: str,
    kind: Kind,
    make_world: Callable[[Any, Callable[[Any], str]], World],
    caplog: pytest.LogCaptureFixture,
) -> None:
    annotation, sent, said, hidden = SCALARS[case]
    world = make_world(Annotated[annotation, Secret()], said)
    with caplog.at_level(logging.DEBUG, logger="airlock"):
        error = await world.call(kind, sent)
    _kept_nowhere(hidden, error, world, caplog)


@pytest.mark.parametrize("value", [7 * 10**5000 + 123456789, -(10**4300)], ids=["long", "negative"])
async def test_an_int_longer_than_python_writes_is_withheld_not_raised(
    value: int, make_world: Callable[[Any, Callable[[Any], str]], World]
) -> None:
    world = make_world(Annotated[int, Secret()], str)
    error = await world.call("read", value)  # (it raised ValueError, not a tool error)
    assert error.code == "invalid_input"
    try:
        raise RuntimeError(f"account ending {value % 10**9} refused")
    except RuntimeError as exc:
        detail = failure_detail(exc, argument_secrets({"pin": value}, {"pin"}))
    assert detail == f"RuntimeError: {TOO_MANY}"


@pytest.mark.parametrize(
    ("value", "found"),
    [
        (uuid.UUID(SESSION), SESSION),
        (decimal.Decimal("987654.321"), "987654.321"),  # (no tool takes one: its JSON is uncapped)
        (datetime.datetime.fromisoformat(WHEN), WHEN),
        (ipaddress.IPv4Address("10.98.76.54"), "10.98.76.54"),
        (Creds(user="u-name-1", password="Zq9-hunter2"), "Zq9-hunter2"),
        ([{"when": datetime.date(2031, 7, 19)}], "2031-07-19"),
        (b"\xff\xferaw-bytes", "\\xff\\xferaw-bytes"),
    ],
)
def test_the_secret_values_of_typed_arguments(value: object, found: str) -> None:
    assert found in argument_secrets({"pin": value}, {"pin"})


# -- values validation changed, then a validator echoed -----------------------------------------


def _rejected(pin: str) -> str:
    raise RuntimeError(f"pin service rejected {pin}")


TRANSFORMED: dict[str, tuple[object, str, str]] = {
    # name: (what validation does before the validator, what is sent, what it then holds)
    "stripped": (StringConstraints(strip_whitespace=True), " Hunter2-Secret ", "Hunter2-Secret"),
    "lower-cased": (StringConstraints(to_lower=True), "Hunter2-Secret", "hunter2-secret"),
    "upper-cased": (StringConstraints(to_upper=True), "Hunter2-Secret", "HUNTER2-SECRET"),
    "reversed": (BeforeValidator(lambda v: v[::-1]), "Hunter2-Secret", "terceS-2retnuH"),
    "dashes dropped": (
        BeforeValidator(lambda v: v.replace("-", "")),
        "Hunter2-Secret",
        "Hunter2Secret",
    ),
}


@pytest.mark.parametrize("case", TRANSFORMED)
async def test_a_secret_a_validator_changed_then_echoed_is_kept_nowhere(
    case: str,
    make_world: Callable[[Any, Callable[[Any], str]], World],
    caplog: pytest.LogCaptureFixture,
) -> None:
    change, sent, hidden = TRANSFORMED[case]
    annotation = Annotated[str, Secret(), change, Field(max_length=64), AfterValidator(_rejected)]
    world = make_world(annotation, str)
    with caplog.at_level(logging.DEBUG, logger="airlock"):
        error = await world.call("read", sent)
    assert error.code == "invalid_input"
    _kept_nowhere(hidden, error, world, caplog)
    assert "RuntimeError: [text withheld" in world.recorded()


def _refused(pin: str) -> str:
    raise UpstreamError("the pin service refused", detail=f"pin service rejected {pin}")


# name: (what the validator raises, given the value as validation changed it; the code)
VALIDATOR_RAISES: dict[str, tuple[Callable[[str], str], str]] = {
    "an exception": (_rejected, "invalid_input"),
    "a tool error with a detail": (_refused, "upstream"),
}


@pytest.mark.parametrize("case", VALIDATOR_RAISES)
async def test_what_a_validator_raises_of_a_changed_secret_is_withheld(
    case: str,
    make_world: Callable[[Any, Callable[[Any], str]], World],
    caplog: pytest.LogCaptureFixture,
) -> None:
    check, code = VALIDATOR_RAISES[case]
    change = StringConstraints(to_lower=True)
    annotation = Annotated[str, Secret(), change, Field(max_length=64), AfterValidator(check)]
    world = make_world(annotation, str)
    with caplog.at_level(logging.DEBUG, logger="airlock"):
        error = await world.call("read", "Hunter2-Secret")
    assert error.code == code
    hidden = "hunter2-secret"
    assert hidden not in (error.detail or "")
    assert hidden not in world.recorded()
    assert hidden not in caplog.text
    assert (error.detail or "").endswith(WITHHELD)


def test_the_withheld_text_keeps_the_type_and_the_frames() -> None:
    pin = "Hunter2-Secret"
    try:
        _rejected(pin)
    except RuntimeError as exc:
        detail = failure_detail(exc, (), withheld=True)
        trace = failure_trace(exc, (), withheld=True)
    assert detail.startswith("RuntimeError: [text withheld")
    assert "Hunter2" not in detail + trace
    assert "_rejected" in trace  # the frames say where it was raised
    assert "RuntimeError: [text withheld" in trace


# -- a stored effect that no longer builds its model -------------------------------------------

PASSWORD = "Zq9-hunter2-correct-horse"
_CHANGED: list[bool] = []
"""Whether the effect model "changed" since the step was prepared (its validator refuses)."""


def _still_valid(password: str) -> str:
    if _CHANGED:
        raise ValueError("passwords are now checked otherwise")
    return password


class TransferArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    account: Annotated[str, Field(max_length=10)]
    password: Annotated[str, Secret(), Field(max_length=64)]


class Transfer(BaseModel):
    account: str
    password: Annotated[str, Secret(), AfterValidator(_still_valid)]


async def test_a_step_whose_effect_no_longer_builds_keeps_its_secret_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryAuditStore()
    registry = Registry(audit=AuditLog(store))
    registry.register(
        write_tool(
            name="vault_transfer_create",
            description=(
                "Send a transfer from an account, authorized by its password. Use it when the "
                "user asks to pay. It does not show balances."
            ),
            input_model=TransferArgs,
            effect_model=Transfer,
            receipt_model=Item,
            prepare=lambda args, principal: Transfer(account=args.account, password=args.password),
            commit=lambda effect, key: {"name": effect.account},
            lookup=None,
            effects=[write("vault:account/{account}")],
            scope="vault.write",
        )
    )
    ledger = open_ledger(str(tmp_path))
    writes = WritePath(registry, ledger)
    ask = ApprovalPolicy((ApprovalRule(id="ask", action="ask", tools=("vault_*",)),))
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r1", approvals=ask).context(
        "direct", "r1:c1"
    )
    try:
        args = {"account": "acc_1", "password": PASSWORD}
        preview = await writes.preview_call("vault_transfer_create", args, ctx)
        writes.approve(preview.id, approver="carol", fingerprint=preview.fingerprint)
        _CHANGED.append(True)
        with caplog.at_level(logging.DEBUG, logger="airlock"), pytest.raises(ToolError) as info:
            await writes.commit(preview.id, preview.fingerprint, ALICE)
    finally:
        _CHANGED.clear()
        ledger.close()
    error = info.value
    assert error.code == "upstream"
    assert "no longer fits Transfer" in (error.detail or "")
    assert PASSWORD not in (error.detail or "")
    assert PASSWORD not in json.dumps(error.to_wire())
    registry.audit.flush()
    assert PASSWORD not in repr(store.query())
    assert PASSWORD not in caplog.text
