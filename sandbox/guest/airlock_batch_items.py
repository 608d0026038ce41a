"""A batch's items, from the program's list to the host's answers: each bound to the tool's
signature, sent ``max_batch_items`` to a frame (fewer when their bytes would pass
``max_call_frame_bytes``), and answered in the program's order.

Standard library only; shipped in the image next to the runner. The host ends a run whose
``batch`` frame holds more than its ``max_batch_items`` items, and refuses one over its
``max_call_frame_bytes``, limits the program is not meant to meet: a longer list goes in
several frames, one after another. An item that does not bind (or is not a dict), one whose
arguments the host's frame rules refuse, and one whose frame alone is over the bytes, is an
``InvalidInput`` naming the item's index: raised, or with ``return_errors=True`` put in the
item's place while the other items are called. An item the host fails is raised naming its
index too (its message, its issues' fields), as the host's error in its place otherwise.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
    from airlock.sandbox.guest import airlock_frames as frames
    from airlock.sandbox.guest.airlock_connection import Connection
    from airlock.sandbox.guest.airlock_tool_functions import ToolFunction
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_frames as frames
    import airlock_wire as wire


def bind_items(
    function: ToolFunction, items: Iterable[Any], *, return_errors: bool
) -> list[dict[str, Any] | errors.InvalidInput]:
    """Each item's arguments bound to ``function``'s signature, or (``return_errors``) the
    ``InvalidInput`` of an item that does not bind, in its place.

    Raises:
        InvalidInput: an item does not bind (without ``return_errors``); names its index.
    """
    bound: list[dict[str, Any] | errors.InvalidInput] = []
    for n, item in enumerate(items):
        try:
            if type(item) is not dict:
                if not (hasattr(item, "keys") and hasattr(item, "__getitem__")):
                    reason = f"is a {type(item).__name__}, not a dict of the tool's arguments"
                    raise errors.InvalidInput(
                        f"{function.name}: {reason}", issues=[{"field": "", "reason": reason}]
                    )
                item = dict(item)
            bound.append(function._arguments((), item))
        except errors.InvalidInput as refused:
            error = in_batch(refused, n)
            if not return_errors:
                raise error from None
            bound.append(error)
    return bound


def in_batch(error: errors.InvalidInput, index: int) -> errors.InvalidInput:
    """``error`` of one item, as the batch's: its message and fields name ``index``."""
    issues = [_issue_of(issue, index) for issue in error.issues if isinstance(issue, dict)]
    return errors.InvalidInput(f"item {index}: {error.message}", issues=issues)


def _issue_of(issue: dict[str, Any], index: int) -> dict[str, Any]:
    """An issue of one item's, as the batch's: its field starts with ``index``."""
    return {**issue, "field": f"{index}.{issue['field']}" if issue.get("field") else str(index)}


def send_batches(
    connection: Connection,
    tool: str,
    bound: list[dict[str, Any] | errors.InvalidInput],
    *,
    return_errors: bool,
) -> list[Any]:
    """Call ``tool`` with the ``bound`` items' arguments, ``max_batch_items`` to a frame (fewer
    when the frame would be over ``max_call_frame_bytes``), one frame after another; the
    results (or errors) in the items' order.

    Raises:
        InvalidInput: an item no frame can hold (its bytes alone, or a frame rule of the
            host's), without ``return_errors``: raised before any frame is sent.
        ToolError: the first failed item, without ``return_errors``.
    """
    results: list[Any] = list(bound)  # an item that did not bind stays as its error
    todo = [n for n, args in enumerate(bound) if type(args) is dict]
    if not todo:  # nothing to call: no frame (the host counts an empty batch)
        return results
    size = connection.max_batch_items
    # Without return_errors, an item no frame can hold is raised before any frame leaves:
    # checked up front when the items go in several frames (one frame checks itself).
    checked = return_errors
    if not checked and len(todo) > size:
        _refuse_unsendable(tool, todo, bound)
        checked = True
    chunks = [todo[start : start + size] for start in range(0, len(todo), size)][::-1]
    while chunks:  # the next to send last
        chunk = chunks.pop()
        answers = _send(connection, tool, chunk, bound, results, return_errors)
        if answers is None:  # its frame is over the bytes: in parts, in the same order
            if not checked:  # (the one frame is to be several after all)
                _refuse_unsendable(tool, chunk, bound)
                checked = True
            chunks.extend(reversed(_by_bytes(tool, chunk, bound)))
            continue
        for n, entry in zip(chunk, answers, strict=False):
            if entry.get("ok"):
                results[n] = entry.get("value")
                continue
            if not return_errors:  # raised, it names its item as the guest's refusals do
                raise errors.error_from_wire(_of_item(entry.get("error"), n))
            results[n] = errors.error_from_wire(entry.get("error"))
    return results


def _of_item(error: Any, index: int) -> Any:
    """The host's ``error`` (wire form) of the batch's item ``index``, as :func:`in_batch`
    names it: its message, and each issue's field, start with the index."""
    if not isinstance(error, dict):
        return error
    named = {**error, "message": f"item {index}: {error.get('message', '')}"}
    if isinstance(error.get("issues"), list):
        named["issues"] = [
            _issue_of(issue, index) if isinstance(issue, dict) else issue
            for issue in error["issues"]
        ]
    return named


def _send(
    connection: Connection,
    tool: str,
    chunk: list[int],
    bound: list[Any],
    results: list[Any],
    return_errors: bool,
) -> list[dict[str, Any]] | None:
    """The answers of one frame of the items ``chunk`` names (an item whose arguments the
    host's frame rules refuse is taken out of ``chunk``, its error in ``results``, as is a
    lone item over ``max_call_frame_bytes``); ``None`` when the items' frame is over it."""
    while chunk:
        message = {"type": wire.BATCH, "tool": tool, "items": [bound[n] for n in chunk]}
        try:
            return connection.call(message)  # type: ignore[no-any-return]
        except errors.InvalidInput as refused:
            blamed = _blamed(tool, refused, chunk)
            if blamed is None:  # the frame as a whole (its bytes): in parts
                return None
            n, error = blamed
            if not return_errors:
                raise error from None
            results[n] = error
            chunk.remove(n)
    return []


def _refuse_unsendable(tool: str, todo: list[int], bound: list[Any]) -> None:
    """Raise the error of the first item in ``todo`` that no frame can hold, as its own
    frame would (none: return); one pass over the items' JSON when they fit together."""
    items = frames.to_json([bound[n] for n in todo]).encode()
    room = frames.max_call_bytes() - len(frames.to_json(_EMPTY | {"tool": tool}))
    # The items' list sits in the frame's object: one level their own text does not show.
    if len(items) <= room and not frames.suspect(items, 1):
        return
    for n in todo:
        message = {**_EMPTY, "tool": tool, "items": [bound[n]]}
        try:
            frames.encode_call(message)
        except errors.InvalidInput as refused:
            blamed = _blamed(tool, refused, [n])
            raise (blamed[1] if blamed else refused) from None


def _blamed(
    tool: str, refused: errors.InvalidInput, chunk: list[int]
) -> tuple[int, errors.InvalidInput] | None:
    """The item ``refused`` (a frame of the items ``chunk`` names) blames, and its error;
    ``None`` when it blames the frame of several items as a whole (its bytes)."""
    (issue, *_) = refused.issues or [{}]
    place, _, field = str(issue.get("field", "")).partition(".")
    if not place.isdigit():
        return None if len(chunk) > 1 else (chunk[0], in_batch(refused, chunk[0]))
    n = chunk[int(place)]
    reason = str(issue.get("reason", ""))
    return n, errors.InvalidInput(
        f"{tool}: item {n}: the argument {field!r} {reason}; nothing was sent",
        issues=[{"field": f"{n}.{field}", "reason": reason}],
    )


def _by_bytes(tool: str, chunk: list[int], bound: list[Any]) -> list[list[int]]:
    """``chunk`` cut, in order, into parts whose frames fit ``max_call_frame_bytes`` by
    each item's JSON (an item alone over it is a part of its own: refused on its own)."""
    room = frames.max_call_bytes() - len(frames.to_json(_EMPTY | {"tool": tool}))
    parts: list[list[int]] = [[]]
    used = 0
    for n in chunk:
        size = len(frames.to_json(bound[n])) + 1  # and its comma
        if parts[-1] and used + size > room:
            parts.append([])
            used = 0
        parts[-1].append(n)
        used += size
    if len(parts) == 1:  # (cannot be: the frame was over) halves, so that each is less
        return [chunk[: len(chunk) // 2], chunk[len(chunk) // 2 :]]
    return parts


# A batch frame without its items and tool: its id as long as a frame's integer can be.
_EMPTY = {"type": wire.BATCH, "tool": "", "items": [], "id": 10**wire.MAX_INT_DIGITS - 1}

__all__ = ["bind_items", "in_batch", "send_batches"]
