"""Registration refuses broken contracts with a UsageError that says what to change."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from airlock.policies import UsageError, disclose, read, spend, write
from airlock.tools import CallContext, Credential, Registry, ToolSpec, requires

DOC = "Do a thing. Use it when needed. It does not return secrets."
Id = Annotated[str, Field(max_length=20)]


class Out(BaseModel):
    ok: bool


class LooseOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    ok: bool


class OpenNested(BaseModel):
    name: Id


async def good(item_id: Id) -> Out:
    return Out(ok=True)


async def uncapped(note: str) -> Out:
    return Out(ok=True)


async def unbounded_list(ids: list[Id]) -> Out:
    return Out(ok=True)


async def open_mapping(extra: dict[str, int]) -> Out:
    return Out(ok=True)


async def open_nested(item: OpenNested) -> Out:
    return Out(ok=True)


async def untyped(item_id) -> Out:  # type: ignore[no-untyped-def]
    return Out(ok=True)


async def star_args(*ids: Id) -> Out:
    return Out(ok=True)


async def no_output(item_id: Id) -> dict[str, Any]:
    return {}


async def late_context(item_id: Id, ctx: CallContext) -> Out:
    return Out(ok=True)


async def anything(value: Any) -> Out:
    return Out(ok=True)


async def priced(
    item_id: Id,
    amount_minor: Annotated[int, Field(ge=0)],
    currency: Annotated[str, Field(max_length=3)],
) -> Out:
    return Out(ok=True)


async def priced_by_code(
    item_id: Id,
    amount_minor: Annotated[int, Field(ge=0)],
    currency_code: Annotated[str, Field(max_length=3)],
) -> Out:
    return Out(ok=True)


class Money(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount_minor: Annotated[int, Field(ge=0)]
    currency: Annotated[str, Field(max_length=3)]


async def priced_nested(
    item_id: Id, amount_minor: Annotated[int, Field(ge=0)], money: Money
) -> Out:
    return Out(ok=True)


async def priced_twice(
    item_id: Id,
    amount_minor: Annotated[int, Field(ge=0)],
    currency: Annotated[str, Field(max_length=3)],
    currency_settled: Annotated[str, Field(max_length=3)],
) -> Out:
    return Out(ok=True)


R = read("svc:item/{item_id}")

# function, decorator options, fragment the message must contain
BAD: list[tuple[str, Callable[..., Any], dict[str, Any], str]] = [
    ("name with two parts", good, {"name": "billing_get"}, "service_object_verb"),
    ("name upper case", good, {"name": "Billing_invoice_get"}, "service_object_verb"),
    ("name and a newline", good, {"name": "billing_invoice_get\n"}, "service_object_verb"),
    ("name too long", good, {"name": "a_b_" + "c" * 61}, "1-64"),
    ("two sentences", good, {"description": "Get it. Use it."}, "three or four"),
    ("no docstring", good, {"description": ""}, "0 sentence"),
    (
        "write from code",
        good,
        {"effects": [write("svc:item/{item_id}")], "callers": {"direct", "code"}},
        "cannot be called from code",
    ),
    (
        "spend from code",
        good,
        {"effects": [R, spend(5)], "callers": {"direct", "code"}},
        "cannot be called from code",
    ),
    (
        "disclose from code",
        good,
        {"effects": [R, disclose("email:x")], "callers": {"direct", "code"}},
        "cannot be called from code",
    ),
    (
        "spend in a fixed currency, the input names one",
        priced,
        {"effects": [R, spend("{amount_minor}", currency="USD")]},
        "no spend effect is bound to",
    ),
    (
        "spend in a fixed currency, the input names a currency_code",
        priced_by_code,
        {"effects": [R, spend("{amount_minor}", currency="USD")]},
        "has a field 'currency_code' that no spend effect is bound to",
    ),
    (
        "spend in a fixed currency, the input nests a currency",
        priced_nested,
        {"effects": [R, spend("{amount_minor}", currency="USD")]},
        "lift the currency to a top-level field",
    ),
    (
        "spend bound to one of two currencies the input names",
        priced_twice,
        {"effects": [R, spend("{amount_minor}", currency="{currency}")]},
        "has a field 'currency_settled' that no spend effect is bound to",
    ),
    ("code only", good, {"callers": {"code"}}, "must include 'direct'"),
    ("unknown caller", good, {"callers": {"direct", "cron"}}, "unknown callers"),
    ("bad scope", good, {"scope": "Billing"}, "dotted lower case"),
    ("zero timeout", good, {"timeout": 0}, "timeout"),
    ("huge timeout", good, {"timeout": 10_000}, "timeout"),
    ("no effects", good, {"effects": []}, "at least one effect"),
    (
        "effect names unknown field",
        good,
        {"effects": [read("svc:item/{other}")]},
        "not input fields",
    ),
    ("not an effect", good, {"effects": ["read(svc:x)"]}, "not an Effect"),
    ("uncapped string", uncapped, {"effects": [read("svc:x")]}, "without a length cap"),
    ("uncapped list", unbounded_list, {"effects": [read("svc:x")]}, "list without a length"),
    ("open mapping", open_mapping, {"effects": [read("svc:x")]}, "open mapping"),
    ("nested model allows extra", open_nested, {"effects": [read("svc:x")]}, "extra fields"),
    ("any value", anything, {"effects": [read("svc:x")]}, "any value"),
    ("untyped parameter", untyped, {}, "needs a type annotation"),
    ("star args", star_args, {"effects": [read("svc:x")]}, "plain keyword parameter"),
    ("no output model", no_output, {}, "output=SomeModel"),
    ("context not first", late_context, {}, "must come first"),
    ("output allows extra", good, {"output": LooseOut}, "ignore extra fields"),
    (
        "precondition on unknown field",
        good,
        {"requires": [requires("svc_item_get", "x")]},
        "must name input fields",
    ),
    (
        "precondition on a non-tool",
        good,
        {"requires": [requires("get", "item_id")]},
        "not a tool name",
    ),
    (
        "precondition on a name and a newline",
        good,
        {"requires": [requires("svc_item_get\n", "item_id")]},
        "not a tool name",
    ),
    ("result cap zero", good, {"max_result_bytes": 0}, "max_result_bytes"),
    (
        "credential not a name",
        good,
        {"credentials": ["Bearer tok_123"]},
        "must be a credential's name",
    ),
    (
        "credential object, not its name",
        good,
        {"credentials": [Credential.from_value("tok_123", name="SVC_TOKEN")]},
        "pass Credential.name",
    ),
]


def _register(registry: Registry, fn: Callable[..., Any], **options: Any) -> None:
    kwargs: dict[str, Any] = {
        "effects": [R],
        "scope": "svc.read",
        "name": "svc_item_get",
        "description": DOC,
    } | options
    registry.tool(**kwargs)(fn)


@pytest.mark.parametrize(
    ("fn", "options", "fragment"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_registration_refuses(
    fn: Callable[..., Any], options: dict[str, Any], fragment: str
) -> None:
    registry = Registry()
    with pytest.raises(UsageError, match=re.escape(fragment)):
        _register(registry, fn, **options)
    assert registry.specs() == ()


def test_a_spend_bound_to_the_currency_its_input_names_registers() -> None:
    registry = Registry()
    _register(registry, priced, effects=[R, spend("{amount_minor}", currency="{currency}")])
    (spec,) = registry.specs()
    assert str(spec.effects[1]) == "spend({amount_minor} {currency})"


def test_a_name_is_taken_once() -> None:
    registry = Registry()
    _register(registry, good)
    with pytest.raises(UsageError, match="already registered"):
        _register(registry, good)


def test_an_input_model_that_allows_extra_fields_is_refused() -> None:
    class Loose(BaseModel):
        item_id: Id

    spec = ToolSpec(
        name="svc_item_get",
        description=DOC,
        handler=good,
        input_model=Loose,
        output_model=Out,
        effects=(R,),
        callers=frozenset({"direct"}),
        scope="svc.read",
    )
    with pytest.raises(UsageError, match="extra='forbid'"):
        Registry().register(spec)


def test_the_decorator_builds_a_frozen_spec_and_returns_the_function() -> None:
    registry = Registry()

    @registry.tool(effects=[write("svc:item/{item_id}")], scope="svc.write")
    async def svc_item_delete(ctx: CallContext, item_id: Id) -> Out:
        """Delete an item. Use it when asked to remove one. It does not return the item."""
        return Out(ok=True)

    spec = registry.get("svc_item_delete")
    assert spec is not None
    assert spec.takes_context
    assert spec.callers == {"direct"}
    assert spec.reversible is False  # side effects default to irreversible
    assert spec.input_model.model_config.get("extra") == "forbid"
    assert spec.output_model is Out
    assert svc_item_delete.__name__ == "svc_item_delete"
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]


def test_destinations_and_credential_names_are_declared_on_the_spec() -> None:
    registry = Registry()
    _register(
        registry,
        good,
        destinations=["https://api.svc.example:443"],
        credentials=["SVC_TOKEN"],
    )
    spec = registry.get("svc_item_get")
    assert spec is not None
    assert spec.destinations == ("https://api.svc.example:443",)
    assert spec.credentials == ("SVC_TOKEN",)


# -- destinations and credentials: every form listed, nothing dropped --------------------------

# declared -> the canonical text the spec (and so the inventory) holds
DESTINATIONS: dict[str, str] = {
    "api.svc.example": "api.svc.example",
    "API.Svc.Example.": "api.svc.example",
    "*.cdn.svc.example": "*.cdn.svc.example",
    "api.svc.example:8443": "api.svc.example:8443",
    "10.0.0.7": "10.0.0.7",
    "[2001:db8::1]:443": "[2001:db8::1]:443",
    "deploy@backup.svc.example": "deploy@backup.svc.example",
    "https://api.svc.example:443": "https://api.svc.example:443",
    "https://api.svc.example/v1/reports/": "https://api.svc.example/v1/reports",
    "HTTPS://API.svc.example/V1": "https://api.svc.example/V1",
    "s3://svc-exports/reports": "s3://svc-exports/reports",
    "postgres://db.internal:5432/app": "postgres://db.internal:5432/app",
    "smtp://mail.svc.example:587": "smtp://mail.svc.example:587",
    "sftp://deploy@files.svc.example/incoming": "sftp://deploy@files.svc.example/incoming",
    "redis://cache.internal:6379": "redis://cache.internal:6379",
    "unix:///run/svc/app.sock": "unix:///run/svc/app.sock",
    "UNIX:///run/svc/app.sock/": "unix:///run/svc/app.sock",
}

# declared -> a fragment of the refusal
BAD_DESTINATIONS: dict[str, str] = {
    "": "1-512 characters",
    "api.svc.example/a b": "white space",
    "https://user:secret@api.svc.example": "carries a password",
    "https://api.svc.example/search?q=1": "query or fragment",
    "https://api.svc.example/#top": "query or fragment",
    "file:///etc/passwd": "not a network destination",
    "mailto:ops@svc.example": "not a network destination",
    "2001:db8::1": "write it in brackets",
    "[2001:db8::zz]": "not an IPv6 address",
    "api.svc.example:0": "not 1-65535",
    "api.svc.example:99999": "not 1-65535",
    "https://": "has no host",
    "ht!tp://api.svc.example": "malformed scheme",
    "api..svc.example": "not a host name",
    "https://a.**.svc.example": "not a host name",
    "https://api.svc.example/a<b>": "path",
    "unix://run/app.sock": "not a Unix socket path",
    "unix:///": "not a Unix socket path",
}


@pytest.mark.parametrize(("declared", "canonical"), sorted(DESTINATIONS.items()))
def test_every_destination_form_is_kept_in_canonical_form(declared: str, canonical: str) -> None:
    registry = Registry()
    _register(registry, good, destinations=[declared])
    spec = registry.get("svc_item_get")
    assert spec is not None
    assert spec.destinations == (canonical,)


@pytest.mark.parametrize(("declared", "fragment"), sorted(BAD_DESTINATIONS.items()))
def test_a_destination_that_does_not_parse_is_refused(declared: str, fragment: str) -> None:
    registry = Registry()
    with pytest.raises(UsageError, match=re.escape(fragment)) as info:
        _register(registry, good, destinations=[declared])
    assert repr(declared) in str(info.value)
    assert registry.specs() == ()


class Adapter:
    """A handler object that declares what it reaches, as adapters do."""

    def __init__(self, destinations: object, credentials: object) -> None:
        self.destinations = destinations
        self.credentials = credentials

    async def __call__(self, item_id: Id) -> Out:
        return Out(ok=True)


class ItemInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item_id: Id


def _adapter_spec(handler: Adapter, **changes: Any) -> ToolSpec:
    return ToolSpec(
        name="svc_item_get",
        description=DOC,
        handler=handler,
        input_model=ItemInput,
        output_model=Out,
        effects=(R,),
        callers=frozenset({"direct"}),
        scope="svc.read",
        **changes,
    )


def test_an_adapters_own_destinations_and_credentials_join_the_spec() -> None:
    handler = Adapter(["https://API.svc.example"], [Credential.from_value("t", name="SVC_KEY")])
    registry = Registry()
    registry.register(_adapter_spec(handler, destinations=("db.internal:5432", "*.svc.example")))
    spec = registry.get("svc_item_get")
    assert spec is not None
    assert spec.destinations == ("*.svc.example", "db.internal:5432", "https://api.svc.example")
    assert spec.credentials == ("SVC_KEY",)
    bare = Registry()
    bare.register(_adapter_spec(handler))  # nothing declared: the adapter's own are taken
    taken = bare.get("svc_item_get")
    assert taken is not None
    assert (taken.destinations, taken.credentials) == (("https://api.svc.example",), ("SVC_KEY",))


@pytest.mark.parametrize(
    ("destinations", "credentials", "fragment"),
    [
        (["not a host"], [], "white space"),
        ([42], [], "must be a string"),
        ({"api.svc.example": 1}, [], "list of strings"),
        ([], ["Bearer abc"], "must be a credential's name"),
        ([], 7, "list of strings"),
    ],
)
def test_an_adapter_declaration_that_does_not_parse_is_refused(
    destinations: object, credentials: object, fragment: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(fragment)):
        Registry().register(_adapter_spec(Adapter(destinations, credentials)))


def test_tenant_credentials_name_each_tenants_credential() -> None:
    registry = Registry()
    by_tenant = {"acme": "SVC_KEY_ACME", "globex": "SVC_KEY_GLOBEX"}
    _register(
        registry,
        good,
        destinations=["https://api.svc.example"],
        credentials=["SVC_KEY_ACME"],
        tenant_credentials=by_tenant,
    )
    spec = registry.get("svc_item_get")
    assert spec is not None
    assert dict(spec.tenant_credentials) == by_tenant
    assert spec.credentials == ("SVC_KEY_ACME", "SVC_KEY_GLOBEX")  # every name, declared once


@pytest.mark.parametrize(
    ("by_tenant", "fragment"),
    [
        ({"acme": "Bearer tok_1"}, "must be a credential's name"),
        ({"_acme": "SVC_KEY"}, "must be a tenant id"),
        ({"": "SVC_KEY"}, "must be a tenant id"),
    ],
)
def test_bad_tenant_credentials_are_refused(by_tenant: dict[str, str], fragment: str) -> None:
    with pytest.raises(UsageError, match=re.escape(fragment)):
        _register(Registry(), good, tenant_credentials=by_tenant)
