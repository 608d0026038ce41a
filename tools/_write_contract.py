"""What a write tool declares beyond the tool contract, and the registry's seam to the ledger.

A write tool never runs a handler on the model's say-so. Its direct call is admitted like
any other (look-up, validation, scope, preconditions), then :attr:`WriteContract.prepare`
computes the exact effect without changing anything, and the write path stores a preview of
it: the call's normal outcome, returned as a value (:meth:`WriteRunner.propose`). Only a
commit by the harness, after approval, calls :attr:`WriteContract.commit`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, get_args

from pydantic import BaseModel

from airlock.policies import currency_from_field
from airlock.tools._arguments import effect_field_problems, secret_fields_of

if TYPE_CHECKING:
    from airlock.policies import Effect
    from airlock.tools._admission import Admission
    from airlock.tools._context import CallContext
    from airlock.tools._errors import ToolError
    from airlock.tools._preview import Preview

__all__ = ["WriteContract", "WriteRunner", "unbound_currency_problem", "write_contract_problems"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteContract:
    """The two halves of a write, and how its intent is named. Build with ``write_tool``."""

    prepare: Callable[..., Any]
    """``prepare(args, principal) -> effect``: sync or async; reads, computes, changes
    nothing. ``args`` is the validated input model, the effect an :attr:`effect_model`.
    Record-level checks belong here (another tenant's record is ``NotFoundError``)."""
    commit: Callable[..., Any]
    """``commit(effect, idempotency_key) -> receipt``: sync or async; sends the effect to the
    system of record with the key. A ``ToolError`` whose outcome is ``error`` means the
    system refused and nothing happened; any other failure leaves the step ``unknown``."""
    effect_model: type[BaseModel]
    """The exact effect; the declared effects' ``{field}`` placeholders name its fields."""
    intent: tuple[str, ...]
    """Input fields that name the intent; with the run id and tool they make the key. Empty
    only for a tool without input fields: its intent is the tool, for the run's principal."""
    lookup: Callable[..., Any] | None = None
    """``lookup(effect, idempotency_key) -> receipt | None``: asks the system of record
    whether the key was committed. Reconciliation uses it when given, else resends."""
    summarize: Callable[[Any], str] | None = None
    """A short line describing an effect; by default the resolved effects are listed."""
    secret_inputs: frozenset[str] = frozenset()
    """Input fields marked ``Secret()``: never part of the intent (the key is stored)."""
    proposable: bool = False
    """Whether a program may *propose* this write from code (``tools.propose.NAME(...)``):
    the host admits and prepares it exactly as a direct call and stores its preview in the
    run's batch; nothing is ever committed from code. Off by default; the policy must also
    allow it (``propose = [...]`` in the grant)."""


class WriteRunner(Protocol):
    """The write path as the registry sees it (implemented by ``WritePath``)."""

    async def propose(self, admission: Admission, ctx: CallContext) -> Preview:
        """Prepare the effect of an admitted write call (or take an admitted read that waits
        for approval), authorize it, store its preview, and record the call's final audit
        event.

        Raises:
            ToolError: preparing failed (``not_found``, ``timeout``, ``upstream``, ...), or
                the grant or a policy rule refused the prepared effect (``denied``).
        """
        ...

    def waiting(self, preview: Preview) -> ToolError:
        """What a caller that knows only answers and errors is told about ``preview``."""
        ...


def write_contract_problems(
    contract: WriteContract,
    *,
    input_fields: Collection[str],
    effects: Collection[Effect],
) -> list[str]:
    """What is wrong with a write tool's contract, as sentences that say how to fix it."""
    problems = []
    if not (
        isinstance(contract.effect_model, type) and issubclass(contract.effect_model, BaseModel)
    ):
        return [f"effect_model {contract.effect_model!r} must be a pydantic model class"]
    if not any(e.is_side_effect for e in effects):
        problems.append(
            "a write tool must declare a write, spend or disclose effect; a tool without one "
            "is a read tool, register it with @registry.tool"
        )
    fields: Mapping[str, object] = contract.effect_model.model_fields
    for effect in effects:
        missing = sorted(effect.placeholders - set(fields))
        if missing:
            problems.append(
                f"effect {effect} names {missing}, which are not fields of the effect model "
                f"{contract.effect_model.__name__} (a write tool's effects come from prepare)"
            )
    problems += effect_field_problems(effects, contract.effect_model, computed=True)
    unbound = unbound_currency_problem(effects, contract.effect_model, computed=True)
    if unbound:
        problems.append(unbound)
    if not contract.intent and input_fields:
        problems.append("name the intent: intent=('invoice_id', ...) with input fields")
    unknown = sorted(set(contract.intent) - set(input_fields))
    if unknown:
        problems.append(f"intent fields {unknown} are not input fields")
    hidden = sorted(set(contract.intent) & contract.secret_inputs)
    if hidden:
        problems.append(
            f"intent fields {hidden} are marked Secret(); the idempotency key is stored, so "
            "name the intent with fields that are not secret"
        )
    for name in sorted(secret_fields_of(contract.effect_model)):
        annotation = contract.effect_model.model_fields[name].annotation
        if annotation is not str:
            problems.append(
                f"effect field {name!r} is marked Secret() but is not a str; the ledger "
                "seals a secret as text, so declare it as str"
            )
    for role in ("prepare", "commit"):
        if not callable(getattr(contract, role)):
            problems.append(f"{role} must be callable")
    if contract.lookup is not None and not callable(contract.lookup):
        problems.append("lookup must be callable or None")
    return problems


def unbound_currency_problem(
    effects: Collection[Effect], model: type[BaseModel], *, computed: bool
) -> str | None:
    """What is wrong when ``model`` holds a currency that no spend of ``effects`` is bound
    to, or ``None``: a spend declared in a fixed code beside it would be judged, shown and
    audited in that code, whatever the call spends.

    A currency field is one named ``currency``, ``currency_...`` or ``..._currency``. Each
    one at the top level of ``model`` must be the currency of some spend
    (``currency="{field}"``): the registry cannot tell which of two currency fields the money
    moves in, so an unbound one is refused rather than guessed harmless (rename a field that
    holds no currency of a spend). A spend can name top-level fields only, so one in a nested
    model is refused outright: its author lifts it to the top level.

    ``computed``: ``model`` is a write tool's effect model, what prepare computes; its
    currency must be bound even when no spend is declared (the spend is missing then). A
    tool's input (``computed=False``) may hold a currency for a tool that spends nothing.
    """
    spends = [e for e in effects if e.kind == "spend"]
    if not (spends or computed):
        return None
    where = "the effect model" if computed else "the input model"
    nested = _nested_currencies(model, "", {model})
    if nested:
        return (
            f"{where} {model.__name__} holds the currency field(s) {nested} in a nested "
            "model, which no spend can be bound to (a spend names top-level fields); lift "
            "the currency to a top-level field and declare spend('{amount_minor}', "
            "currency='{currency}') so the grant and the rules judge the currency the call "
            "spends (rename the field if it holds no currency of a spend)"
        )
    bound = {e.target[1:-1] for e in spends if currency_from_field(e.target)}
    unbound = [name for name in model.model_fields if _is_currency(name) and name not in bound]
    if not unbound:
        return None
    names = " and ".join(map(repr, unbound))
    return (
        f"{where} {model.__name__} has {'a field' if len(unbound) == 1 else 'fields'} "
        f"{names} that no spend effect is bound to; declare spend('{{amount_minor}}', "
        f"currency='{{{unbound[0]}}}') so the grant and the rules judge the currency the call "
        "spends: every currency field must be some spend's (rename a field that holds no "
        "currency of a spend, so that it neither is 'currency' nor starts with 'currency_' "
        "nor ends with '_currency')"
    )


def _is_currency(name: str) -> bool:
    return name == "currency" or name.startswith("currency_") or name.endswith("_currency")


def _nested_currencies(model: type[BaseModel], prefix: str, seen: set[type]) -> list[str]:
    """The dotted paths of the currency fields in the models nested in ``model``."""
    found: list[str] = []
    for name, info in model.model_fields.items():
        for inner in _models_in(info.annotation):
            if inner in seen:
                continue
            seen.add(inner)
            path = f"{prefix}{name}."
            found += [path + field for field in inner.model_fields if _is_currency(field)]
            found += _nested_currencies(inner, path, seen)
    return found


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    """The pydantic models an annotation holds (``Money``, ``list[Money] | None``, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models_in(arg)
