"""The vault tools the secret-handling suites share: a read and a write whose ``pin`` is the
argument under test, and whose handler or ``prepare`` raises with it in its text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from airlock.policies import Principal, write
from airlock.tools import Registry, write_tool

__all__ = ["Item", "Unlocked", "register_unlock"]


class Item(BaseModel):
    name: str


class Unlocked(BaseModel):
    name: str


def register_unlock(
    registry: Registry, input_model: type[BaseModel], prepare: Callable[[Any, Principal], Unlocked]
) -> None:
    """Register ``vault_item_unlock``: a write tool taking ``input_model`` whose ``prepare`` is
    the given one."""
    registry.register(
        write_tool(
            name="vault_item_unlock",
            description=(
                "Unlock one vault item with the user's PIN. Use it when the user asks to "
                "share a note. It does not show the note."
            ),
            input_model=input_model,
            effect_model=Unlocked,
            receipt_model=Item,
            prepare=prepare,
            commit=lambda effect, key: {"name": effect.name},
            lookup=None,
            effects=[write("vault:item/{name}")],
            scope="vault.write",
        )
    )
