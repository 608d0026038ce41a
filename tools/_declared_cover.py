"""Whether a grant covers a read tool's declared effects whole, remembered per grant and
tool: a call of such a tool is then judged without checking each resolved effect."""

from __future__ import annotations

from airlock.policies import Grant
from airlock.tools._spec import ToolSpec

__all__ = ["covers_declared"]

# Per tool name, the last few (grant, spec) pairs judged and whether the grant covers the
# spec's declared effects whole. Found by identity (both are frozen; the objects are kept),
# with no id(): that raises an audit event, which the runtime checks would then look at.
_DECLARED_COVERED: dict[str, list[tuple[Grant, ToolSpec, bool]]] = {}
_DECLARED_COVERED_PER_TOOL = 8
_DECLARED_COVERED_TOOLS = 4096


def covers_declared(grant: Grant, spec: ToolSpec) -> bool:
    """Whether ``grant`` covers every effect a call of ``spec`` can resolve to, judged once
    per grant and spec from the declared patterns: a placeholder's value is always one
    segment, which the ``*`` of a pattern stands for, and :meth:`Grant.covers` of a pattern is
    conservative (it may say no to a contained pattern, never yes to one that is not). For
    reads only (a write's effects come from its ``prepare``); an amount (``spend``) is judged
    on every call, and so is everything when this says no."""
    known = _DECLARED_COVERED.get(spec.name)
    if known is not None:
        for judged_grant, judged_spec, covered in known:
            if judged_grant is grant and judged_spec is spec:
                return covered
    covered = not any(e.kind == "spend" for e in spec.effects) and all(
        grant.covers(e) for e in spec.effects
    )
    if known is None:
        if len(_DECLARED_COVERED) >= _DECLARED_COVERED_TOOLS:
            _DECLARED_COVERED.clear()
        known = _DECLARED_COVERED.setdefault(spec.name, [])
    known.insert(0, (grant, spec, covered))
    del known[_DECLARED_COVERED_PER_TOOL:]
    return covered
