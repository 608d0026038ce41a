"""The tools' API as Python source (:func:`render_api`): the model reads it in ``execute_code``'s
description, and the guest builds the same functions from the stubs of the ``run`` frame
(:func:`~airlock.bridge._api.tool_stubs`), so both show one signature and one docstring.
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection

from airlock.bridge._api import (
    BY_KEYWORD,
    ParamStub,
    ToolStub,
    proposal_stubs,
    python_name,
    tool_stubs,
)
from airlock.bridge.airlock_wire import ERRORS, MAX_BATCH_ITEMS, MAX_IN_FLIGHT
from airlock.policies import Principal
from airlock.tools import Registry

__all__ = ["render_api", "signature_text"]


def signature_text(params: tuple[ParamStub, ...]) -> str:
    """The parameters as a signature shows them: a default after its annotation, and ``*``
    before a required parameter that follows one with a default (keyword-only from there).
    Those whose names are not Python's (a field's alias, ``from``) are taken by a last
    ``**kwargs`` (the docstring names them): the text stays Python, as the guest's is."""
    parts: list[str] = []
    optional_seen = keyword_only = False
    by_keyword = [p.annotation for p in params if not python_name(p.name)]
    for param in params:
        if not python_name(param.name):
            continue
        if param.required and optional_seen and not keyword_only:
            parts.append("*")
            keyword_only = True
        text = f"{param.name}: {param.annotation}"
        if not param.required:
            optional_seen = True
            text += f" = {param.default_text}"
        parts.append(text)
    if by_keyword:
        parts.append(f"**{BY_KEYWORD}: {' | '.join(dict.fromkeys(by_keyword))}")
    return ", ".join(parts)


_FIELD_NOTES = {
    "issues": "a list of {'field': ..., 'reason': ...}",
    "retry_after": "seconds to wait, or None",
}


def _errors_item() -> str:
    """The preamble's list item on errors, from the contract's table of error classes."""
    classes = []
    for shape in ERRORS.values():
        fields = ", ".join(
            f"`.{name}`" + (f": {_FIELD_NOTES[name]}" if name in _FIELD_NOTES else "")
            for name in shape.fields
        )
        classes.append(f"`tools.{shape.name}`" + (f" ({fields})" if fields else ""))
    text = (
        "A refused or failed call raises `tools.ToolError`, or the subclass for its code, "
        "with `.code`, `.message`, `.retryable` and the typed attributes listed here: "
        + "; ".join(classes)
        + "."
    )
    return textwrap.fill(
        text,
        width=92,
        initial_indent="- ",
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


_PREAMBLE = f'''\
"""Tools a program can call as `tools.NAME(...)`. Every call is checked on the host.

- `tools.NAME(**args)` calls and returns the result (a dict).
- `await tools.NAME.aio(**args)` is the same call as a coroutine, sent at once: fan out
  independent calls with `asyncio.gather(...)` (or tasks; `asyncio.wait` takes only
  tasks). At most {MAX_IN_FLIGHT} calls wait for results at once
  (the run's `max_in_flight`, counting calls from every thread); the rest are sent as
  results come (a call from a thread waits its turn), so a gather of any size is fine.
  Cancelling one (`asyncio.wait_for` timing out) cancels it on the host too.
- `tools.NAME.batch([args, ...])` makes many calls of one tool in one round trip and
  returns their results in order (`return_errors=True` puts failures in the list, an item
  that does not fit the signature too). A list longer than {MAX_BATCH_ITEMS} items (the run's
  `max_batch_items`), or too many bytes for one call, goes in several round trips, one
  after another.
{_errors_item()}
- Set the program's answer with `result(value)` or end with an expression; only that value
  (JSON) and capped stdout return.
"""
'''


def render_api(
    registry: Registry,
    principal: Principal,
    *,
    names: Collection[str] | None = None,
    proposals: Collection[str] = (),
) -> str:
    """The typed API ``principal``'s programs can call, as Python source with docstrings.

    ``names``, when given, narrows the tools as in :func:`tool_stubs`; ``proposals`` names
    the write tools the run's programs may propose (:func:`proposal_stubs`), rendered as the
    ``propose`` namespace.
    """
    blocks = [_PREAMBLE]
    for stub in tool_stubs(registry, principal, names=names):
        blocks.append(_function(stub))
    if len(blocks) == 1:
        blocks.append("# No tools are callable from code for this principal.\n")
    proposed = proposal_stubs(registry, principal, names=proposals) if proposals else []
    if proposed:
        functions = "\n".join(textwrap.indent(_function(stub), "    ") for stub in proposed)
        blocks.append(f'class propose:\n    """{_PROPOSE_DOC}"""\n\n{functions}')
    return "\n\n".join(blocks)


_PROPOSE_DOC = """Writes a program may propose, never make: `tools.propose.NAME(**args)`.

    Each proposal is admitted and prepared on the host as a direct call of the tool would be
    (the amount and target come from the system of record) and returns its preview's id and
    summary. When the program ends, its proposals wait as one batch for a person to approve;
    the program's answer says how many there are. `await tools.propose.NAME.aio(**args)` and
    `tools.propose.NAME.batch([args, ...])` work as for tools.
    """


def _function(stub: ToolStub) -> str:
    params = signature_text(stub.params)
    doc = textwrap.indent(stub.doc, "    ").lstrip()
    return f'def {stub.name}({params}) -> {stub.returns}:\n    """{doc}\n    """\n'
