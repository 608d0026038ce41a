"""A small in-memory ModelToolSurface for tests of the front ends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from airlock.harness import ModelResult, ModelTool

INVOICE_TOOL = ModelTool(
    name="billing_invoice_get",
    description="Fetch one invoice by id.",
    input_schema={
        "type": "object",
        "properties": {"invoice_id": {"type": "string", "description": "Invoice id, inv_..."}},
        "required": ["invoice_id"],
        "additionalProperties": False,
    },
    read_only=True,
    destructive=False,
    idempotent=True,
)


class EchoSurface:
    """Answers billing_invoice_get with its arguments; the first call waits the longest."""

    def __init__(self, delays: dict[str, float] | None = None) -> None:
        self.delays = delays or {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    def tools(self) -> list[ModelTool]:
        return [INVOICE_TOOL]

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        self.calls.append((name, arguments))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delays.get(str(arguments.get("invoice_id")), 0))
        finally:
            self.in_flight -= 1
        if name != INVOICE_TOOL.name:
            return ModelResult(
                is_error=True, content='{"error":"unknown_tool"}', code="unknown_tool"
            )
        return ModelResult(is_error=False, content=json.dumps(arguments, separators=(",", ":")))
