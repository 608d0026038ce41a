"""Snapshot of what a model sees, and who sees what."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from airlock.policies import Principal, read
from airlock.tools import Registry
from tests.tools.billing import ALICE, Handled, build_registry

INVOICE_GET = {
    "name": "billing_invoice_get",
    "description": (
        "Fetch one invoice by id. Use it to check an amount before acting on it.\n"
        "It does not return notes or payment details."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "invoice_id": {
                "type": "string",
                "description": "Invoice id, inv_...",
                "maxLength": 36,
                "pattern": "^inv_[a-z0-9]{1,32}$",
            }
        },
        "required": ["invoice_id"],
        "additionalProperties": False,
    },
    "strict": True,
}
EXPORT_MAKE_PARAMETERS = {
    "type": "object",
    "properties": {"size": {"type": "integer", "minimum": 0, "maximum": 10_000_000}},
    "required": ["size"],
    "additionalProperties": False,
}


def _definitions(registry: Registry, **kw: object) -> dict[str, dict[str, object]]:
    return {
        d.name: {
            "name": d.name,
            "description": d.description,
            "parameters": d.parameters,
            "strict": d.strict,
        }
        for d in registry.visible(ALICE, "code")
    }


def test_schema_snapshot() -> None:
    definitions = _definitions(build_registry(Handled()))
    assert definitions["billing_invoice_get"] == INVOICE_GET
    assert definitions["billing_export_make"]["parameters"] == EXPORT_MAKE_PARAMETERS


def test_every_object_is_closed_and_every_field_required() -> None:
    for definition in build_registry(Handled()).visible(ALICE, "direct"):
        schema = definition.parameters
        assert schema["additionalProperties"] is False
        assert isinstance(schema["properties"], dict)
        assert schema["required"] == list(schema["properties"])
        assert "title" not in str(schema)


def test_visibility_follows_scope_and_caller() -> None:
    registry = build_registry(Handled())
    from_code = [d.name for d in registry.visible(ALICE, "code")]
    direct = [d.name for d in registry.visible(ALICE, "direct")]
    assert "billing_invoice_void" in direct  # direct-only
    assert "billing_invoice_void" not in from_code
    assert "billing_invoice_audit" not in direct  # needs billing.admin
    admin = ALICE.model_copy(update={"scopes": ALICE.scopes | {"billing.admin"}})
    assert "billing_invoice_audit" in [d.name for d in registry.visible(admin, "code")]
    nobody = ALICE.model_copy(update={"scopes": frozenset()})
    assert registry.visible(nobody, "direct") == []
    assert direct == sorted(direct)


def test_definitions_are_copies() -> None:
    registry = build_registry(Handled())
    first = registry.visible(ALICE, "direct")[0]
    first.parameters["additionalProperties"] = True
    assert registry.visible(ALICE, "direct")[0].parameters["additionalProperties"] is False


class Count(BaseModel):
    n: int


def test_optional_fields_are_required_and_nullable() -> None:

    from pydantic import BaseModel

    class Out(BaseModel):
        n: int

    registry = Registry()

    @registry.tool(effects=[read("svc:item/*")], scope="svc.read")
    async def svc_item_list(
        status: Annotated[str, Field(max_length=10)] | None = None, limit: int = 10
    ) -> Count:
        """List items. Use it to browse. It does not return deleted items."""
        return Count(n=0)

    principal = Principal(user_id="u", tenant_id="t", scopes=frozenset({"svc.read"}))
    (definition,) = registry.visible(principal, "direct")
    assert definition.parameters == {
        "type": "object",
        "properties": {
            "status": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]},
            "limit": {"type": "integer"},
        },
        "required": ["status", "limit"],
        "additionalProperties": False,
    }
