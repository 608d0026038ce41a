"""Which records a listing returned: one audit effect per record instead of a pattern.

A tool that lists a collection declares a pattern (``read(billing:invoice/*)``): that is what
the grant checks before it runs, and all the audit log could say of it afterwards. When the
tool's result names the records it returned, it can say so::

    @registry.tool(
        effects=[read("billing:invoice/*")],
        records=RecordsRead("invoices", read("billing:invoice/{invoice_id}")),
        ...
    )

and the call's audit event holds ``read(billing:invoice/inv_1)``, ``read(billing:invoice/
inv_7)``... one per item of the result's ``invoices`` list, each filled in from that item's
fields, in place of the declared pattern (``airlock audit find --resource ...`` then matches
the call by record). A tool that does not declare it keeps its pattern, which says that it
cannot tell which records it read; so does a call whose items cannot fill the effect.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from airlock.policies import Effect, EffectArgumentError, Grant, UsageError
from airlock.tools._errors import PermanentUpstreamError

__all__ = ["RecordsRead", "record_effects", "records_problem", "refuse_bad_records"]

_MAX_RECORDS = 10_000


@dataclass(frozen=True, slots=True)
class RecordsRead:
    """Where a read tool's result names the records it returned, and the effect of reading
    one of them (placeholders filled from each record's fields)."""

    field: str
    """The output field holding the list of records, e.g. ``invoices``."""
    effect: Effect
    """The read of one record, e.g. ``read("billing:invoice/{invoice_id}")``."""


def records_problem(
    records: RecordsRead, *, output_model: type[BaseModel], effects: tuple[Effect, ...]
) -> str | None:
    """What is wrong with ``records`` for a tool with this output and these declared
    effects, or ``None``: the field must be a list of models in the output, the effect a
    read whose placeholders are fields of those models and which a declared effect covers."""
    effect = records.effect
    if not isinstance(effect, Effect) or effect.kind != "read":
        return f"records effect {effect!r} must be a read, e.g. read('service:object/{{id}}')"
    field = output_model.model_fields.get(records.field)
    if field is None:
        return f"records field {records.field!r} is not a field of {output_model.__name__}"
    item = _item_model(field.annotation)
    if item is None:
        return f"records field {records.field!r} must be a list of pydantic models"
    missing = sorted(effect.placeholders - set(item.model_fields))
    if missing:
        return f"records effect {effect} names {missing}, which are not fields of {item.__name__}"
    if not Grant(effects=tuple(_patterns(effects, "read"))).covers(effect):
        return f"records effect {effect} is not covered by the tool's declared read effects"
    return None


def record_effects(
    records: RecordsRead, result: Any, declared: tuple[Effect, ...]
) -> tuple[Effect, ...] | None:
    """The call's effects with each declared read that covers ``records.effect`` replaced by
    one read per record of ``result`` (a shaped result), or ``None`` when the result does
    not name them all (the declared pattern then stands): a value that cannot fill the
    effect (a path, a float, an int of over 200 digits) leaves the pattern standing.

    Raises:
        PermanentUpstreamError: naming the records failed otherwise (a bug): the call fails
            as a result that cannot be shaped does, never with an exception of its own.
    """
    try:
        return _named(records, result, declared)
    except Exception as exc:
        raise PermanentUpstreamError(
            "the service's answer could not be read; do not retry this call",
            outcome="unknown",
            detail=f"naming the records in {records.field!r} failed: {type(exc).__name__}: {exc}"[
                :500
            ],
        ) from exc


def _named(
    records: RecordsRead, result: Any, declared: tuple[Effect, ...]
) -> tuple[Effect, ...] | None:
    items = result.get(records.field) if isinstance(result, dict) else None
    if not isinstance(items, list) or len(items) > _MAX_RECORDS:
        return None
    each: dict[Effect, None] = {}
    try:
        for item in items:
            if not isinstance(item, dict):
                return None
            each[records.effect.resolve(item)] = None
    except EffectArgumentError:
        return None
    covered = _covers(records.effect)
    return (*(e for e in declared if not covered(e)), *each)


def _covers(effect: Effect) -> Callable[[Effect], bool]:
    def covers(declared: Effect) -> bool:
        if declared.kind != effect.kind:
            return False
        return Grant(effects=(Effect(declared.kind, declared.pattern),)).covers(effect)

    return covers


def _patterns(effects: tuple[Effect, ...], kind: str) -> list[Effect]:
    return [Effect(e.kind, e.pattern) for e in effects if e.kind == kind]


def _item_model(annotation: Any) -> type[BaseModel] | None:
    if typing.get_origin(annotation) not in (list, tuple):
        return None
    args = typing.get_args(annotation)
    item = args[0] if args else None
    if isinstance(item, type) and issubclass(item, BaseModel):
        return item
    return None


def refuse_bad_records(
    records: RecordsRead | None,
    *,
    output_model: type[BaseModel],
    effects: tuple[Effect, ...],
    refuse: Callable[[str], UsageError],
) -> None:
    """Raise ``refuse(problem)`` when ``records`` does not fit the tool (see
    :func:`records_problem`)."""
    if records is None:
        return
    problem = records_problem(records, output_model=output_model, effects=effects)
    if problem is not None:
        raise refuse(problem)
