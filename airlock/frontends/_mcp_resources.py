"""A conversation's resources: the artifacts its calls produced and the writes they paused.

A call's answer links its artifacts (``resource_link``) only as far as the session's result
cap leaves room after the text: the links, like the text, enter the model's context, and a
program can leave many files with long names. The text then says how many are not linked;
``resources/list`` names them all, a page at a time (MCP's cursor).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
from collections.abc import Sequence
from typing import Final

import mcp_types as types
from mcp.shared.exceptions import MCPError

from airlock.frontends._mcp_conversations import Conversation
from airlock.frontends._mcp_read_budget import ReadBudget, hand_off
from airlock.sandbox import ArtifactRef

__all__ = [
    "MAX_RESOURCE_BYTES",
    "RESOURCES_PAGE",
    "fitting_links",
    "list_page",
    "read_artifact",
    "read_offered",
]

MAX_RESOURCE_BYTES: Final = 64 * 2**20
"""The largest artifact served as a resource (larger ones: ``airlock artifacts get``)."""
RESOURCES_PAGE: Final = 50
"""Resources in one page of ``resources/list``."""
_CURSOR: Final = re.compile(r"([0-9]{1,9})\.([0-9]{1,9})")
_WRITE_DESCRIPTION: Final = "where a write that waited for approval stands (write_status)"


def _described(ref: ArtifactRef) -> str:
    return f"a file a program left in /out (sha256 {ref.sha256})"


def _resource(ref: ArtifactRef) -> types.Resource:
    return types.Resource(
        name=ref.name,
        uri=ref.uri,
        mime_type=ref.media_type,
        size=ref.size_bytes,
        description=_described(ref),
    )


def _link(ref: ArtifactRef) -> types.ResourceLink:
    return types.ResourceLink(
        name=ref.name,
        uri=ref.uri,
        mime_type=ref.media_type,
        size=ref.size_bytes,
        description=_described(ref),
    )


def _left_out(count: int) -> str:
    return (
        f"{count} more files this call left are not linked here (the answer's size cap): "
        "resources/list names them all"
    )


def fitting_links(
    refs: Sequence[ArtifactRef], room: int
) -> list[types.TextContent | types.ResourceLink]:
    """Links to ``refs``, in order, as far as they fit ``room`` bytes (as JSON); when some do
    not, a text that says how many, within ``room`` too."""
    links = [_link(ref) for ref in refs]
    sizes = [len(link.model_dump_json(by_alias=True, exclude_none=True).encode()) for link in links]
    if sum(sizes) <= room:
        return list(links)
    room -= len(_left_out(len(refs)).encode())
    kept: list[types.TextContent | types.ResourceLink] = []
    for link, size in zip(links, sizes, strict=True):
        if size > room:
            break
        kept.append(link)
        room -= size
    if room < 0:  # not even the note fits: the links' count is in the text already
        return []
    return [*kept, types.TextContent(text=_left_out(len(refs) - len(kept)))]


def list_page(talk: Conversation, cursor: str | None) -> types.ListResourcesResult:
    """One page of ``talk``'s resources: artifacts first, then paused writes, each in the
    order they came. The cursor counts what earlier pages gave of each, so one that arrives
    meanwhile is listed later, never twice nor skipped.

    Raises:
        MCPError: ``cursor`` is none this server gave.
    """
    artifacts, writes = 0, 0
    if cursor is not None:
        found = _CURSOR.fullmatch(cursor)
        if found is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"cursor {cursor[:40]!r} is none this server gave: send the nextCursor of the "
                "previous page, or none for the first",
            )
        artifacts, writes = int(found.group(1)), int(found.group(2))
    refs = list(talk.offered.values())[artifacts : artifacts + RESOURCES_PAGE]
    room = RESOURCES_PAGE - len(refs)
    paused = list(talk.paused.items())[writes : writes + room] if room else []
    resources = [_resource(ref) for ref in refs] + [
        types.Resource(
            name=preview_id, uri=uri, mime_type="application/json", description=_WRITE_DESCRIPTION
        )
        for uri, preview_id in paused
    ]
    artifacts += len(refs)
    writes += len(paused)
    more = artifacts < len(talk.offered) or writes < len(talk.paused)
    return types.ListResourcesResult(
        resources=resources, next_cursor=f"{artifacts}.{writes}" if more else None
    )


def read_artifact(ref: ArtifactRef, *, max_bytes: int = MAX_RESOURCE_BYTES) -> bytes:
    """The content of ``ref`` as stored, when it is still what was reported.

    Raises:
        MCPError: too large, gone, or changed since (its SHA-256 differs).
    """
    _check_size(ref, max_bytes)
    try:
        fd = os.open(ref.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:
            # One byte more than reported tells a file that grew, without reading it all.
            data = file.read(ref.size_bytes + 1)
    except OSError:
        raise MCPError(types.INVALID_PARAMS, f"{ref.uri} is no longer stored") from None
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise MCPError(types.INVALID_PARAMS, f"{ref.uri} changed since the program wrote it")
    return data


def _check_size(ref: ArtifactRef, max_bytes: int) -> None:
    if ref.size_bytes > max_bytes:
        raise MCPError(
            types.INVALID_PARAMS,
            f"{ref.uri} is {ref.size_bytes} bytes; resources are served up to {max_bytes}: "
            f"copy it with `airlock artifacts get`",
        )


async def read_offered(
    ref: ArtifactRef, *, reads: ReadBudget, request: object
) -> types.ReadResourceResult:
    """The answer to ``resources/read`` of ``ref``, read within the budget ``reads``; the
    share is kept until the answer to ``request`` (the handler's ``ctx.request``) is sent.

    Raises:
        MCPError: refused by :func:`read_artifact`, or ``server_busy`` (see
            :meth:`ReadBudget.reserve`).
    """
    _check_size(ref, MAX_RESOURCE_BYTES)  # before waiting for a share it would not use
    release = await reads.reserve(ref.size_bytes)
    try:
        data = await asyncio.to_thread(read_artifact, ref)
        answer = _contents(ref, data)
    except BaseException:
        release()
        raise
    hand_off(request, release)
    return answer


def _contents(ref: ArtifactRef, data: bytes) -> types.ReadResourceResult:
    if ref.media_type.startswith("text/"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            contents = types.TextResourceContents(uri=ref.uri, mime_type=ref.media_type, text=text)
            return types.ReadResourceResult(contents=[contents])
    blob = types.BlobResourceContents(
        uri=ref.uri, mime_type=ref.media_type, blob=base64.b64encode(data).decode("ascii")
    )
    return types.ReadResourceResult(contents=[blob])
