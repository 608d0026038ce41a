"""The contract of one tool, as a frozen record."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from airlock.policies import Effect
from airlock.tools._context import Caller
from airlock.tools._records import RecordsRead
from airlock.tools._secret import Secret
from airlock.tools._write_contract import WriteContract

__all__ = ["Precondition", "Secret", "ToolSpec", "requires"]


@dataclass(frozen=True, slots=True)
class Precondition:
    """Evidence a call needs: an earlier successful call of :attr:`tool` in the same run whose
    arguments agree with this call's on :attr:`fields` (this field -> that tool's field)."""

    tool: str
    """The tool whose successful call is the evidence, e.g. ``orders_order_get``."""
    fields: Mapping[str, str]
    """Each input field of this tool mapped to the field of :attr:`tool` that must be equal."""


def requires(tool: str, *same: str, **renamed: str) -> Precondition:
    """Evidence needed first: ``requires("orders_status_get", "order_id")`` means a successful
    ``orders_status_get`` call in the same run with the same ``order_id``; ``renamed`` maps a
    field of this tool to a differently named field of ``tool`` (``id="order_id"``)."""
    return Precondition(tool, {**{name: name for name in same}, **renamed})


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """Everything the registry knows about one tool. Usually built by ``@registry.tool``."""

    name: str
    """``service_object_verb``: 1-64 lower-case characters, unique in a registry."""
    description: str
    """What it does, when to use it, what it does not return (three or four sentences)."""
    handler: Callable[..., Any]
    """The function that does the work, sync or async; keyword arguments are the input."""
    input_model: type[BaseModel]
    """Strict input model (``extra="forbid"``); its JSON Schema is what the model sees."""
    output_model: type[BaseModel]
    """Allow-list of the result: every other field the handler returns is dropped."""
    effects: tuple[Effect, ...]
    """What a call may do, with ``{field}`` placeholders filled from the input."""
    callers: frozenset[Caller]
    """``{"direct"}`` or ``{"direct", "code"}``: routing, not access control."""
    scope: str
    """Scope the principal needs to see the tool and the grant needs to call it."""
    timeout: float = 10.0
    """Seconds a call may run; the run's remaining budget can shorten it."""
    reversible: bool = True
    """Whether the tool's effects can be undone (used by approval rules)."""
    preconditions: tuple[Precondition, ...] = ()
    """Evidence the run must hold before a call (see :func:`requires`)."""
    max_result_bytes: int = 64_000
    """Largest shaped result in bytes of JSON; larger is ``result_too_large``."""
    takes_context: bool = False
    """Whether the handler's first parameter receives the ``CallContext``."""
    secret_fields: frozenset[str] = field(default=frozenset())
    """Input fields left out of the audit hash (marked with :class:`Secret`)."""
    destinations: tuple[str, ...] = ()
    """Network origins its adapter reaches (``https://api.example.com:443``), for the effect
    inventory; a REST adapter's :attr:`~airlock.tools.RestAdapter.destinations`."""
    credentials: tuple[str, ...] = ()
    """Names of the credentials its adapter sends (``BILLING_TOKEN_ACME``), never their
    values, for the effect inventory; a REST adapter's
    :attr:`~airlock.tools.RestAdapter.credentials`."""
    tenant_credentials: Mapping[str, str] = field(default_factory=dict)
    """When the adapter picks a credential by the principal's tenant: tenant id -> the name
    of the credential that tenant's calls send (``{"acme": "BILLING_TOKEN_ACME"}``), so the
    effect inventory can say which one each principal uses. A tenant not listed has none
    (its calls are refused). Empty: every principal's calls may send any of
    :attr:`credentials`."""
    write: WriteContract | None = None
    """Set for write tools (built with ``write_tool``): prepare and commit instead of
    ``handler``; a direct call yields a preview, never an effect."""
    records: RecordsRead | None = None
    """Set for a read tool whose result names the records it returned (``records=``): its
    calls' audit events then hold one effect per record instead of the declared pattern."""

    @property
    def reaches_network(self) -> bool:
        """Whether a call may reach the network: it declares a ``network`` effect, or its
        adapter has :attr:`destinations` (a REST service's origin). Such a tool is never
        offered as read-only, and the effect inventory marks it so."""
        return bool(self.destinations) or any(e.kind == "network" for e in self.effects)
