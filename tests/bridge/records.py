"""A registry of record tools for the bridge tests: reads, a slow read, a rate-limited read, a
write, a hidden tool."""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, read, write
from airlock.tools import (
    AuditLog,
    CallContext,
    MemoryAuditStore,
    NotFoundError,
    RateLimitedError,
    Registry,
)

RecordId = Annotated[str, Field(pattern=r"^rec_[0-9]{1,6}$", max_length=12)]
RECORDS = {
    f"rec_{n}": {"record_id": f"rec_{n}", "tenant_id": "acme", "total": n * 10, "owner": "alice"}
    for n in range(1, 501)
}
RECORDS["rec_999"] = {"record_id": "rec_999", "tenant_id": "globex", "total": 1, "owner": "bob"}
RETRY_AFTER_S = 1.5
"""What ``records_limited_get`` asks a caller to wait, every time."""


class Record(BaseModel):
    """What a program may see of a record (the tenant and owner stay behind)."""

    record_id: str
    total: int


class Blob(BaseModel):
    data: str


def build_registry(
    *, audit: AuditLog | None = None, slow_s: float = 0.05, invoked: list[str] | None = None
) -> Registry:
    """The record tools; ``invoked`` collects the name of every handler that must never run
    (the write and the admin-only read) if one ever does."""
    registry = Registry(audit=audit or AuditLog(MemoryAuditStore()))
    never: list[str] = invoked if invoked is not None else []

    @registry.tool(effects=[read("records:record/{record_id}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    async def records_item_get(ctx: CallContext, record_id: RecordId) -> Record:
        """Fetch one record by id. Use it to read a record's total.
        It does not return the record's owner."""
        record = RECORDS.get(record_id)
        if record is None:
            raise NotFoundError(detail=f"no record {record_id}")
        ctx.ensure_tenant(str(record["tenant_id"]))
        return Record.model_validate(record)

    @registry.tool(effects=[read("records:record/{record_id}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    async def records_slow_get(record_id: RecordId) -> Record:
        """Fetch one record slowly. Use it to test concurrency.
        It does not return the record's owner."""
        await asyncio.sleep(slow_s)
        return Record.model_validate(RECORDS[record_id])

    @registry.tool(effects=[read("records:blob/{size}")], scope="records.read",
                   callers={"direct", "code"}, max_result_bytes=2_000_000)  # fmt: skip
    def records_blob_get(size: Annotated[int, Field(ge=0, le=1_500_000)]) -> Blob:
        """Return a blob of a given size. Use it to test byte caps.
        It does not store anything."""
        return Blob(data="b" * size)

    @registry.tool(effects=[read("records:record/{record_id}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    async def records_limited_get(record_id: RecordId) -> Record:
        """Fetch a record from a rate-limited store. Use it to test rate limits.
        It does not return the record's owner."""
        raise RateLimitedError(retry_after=RETRY_AFTER_S, detail=f"quota spent for {record_id}")

    @registry.tool(effects=[read("archive:record/{record_id}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    async def records_archive_get(record_id: RecordId) -> Record:
        """Fetch an archived record. Use it for old records.
        It does not return the record's owner."""
        return Record.model_validate(RECORDS[record_id])

    @registry.tool(effects=[write("records:record/{record_id}")], scope="records.read")
    async def records_item_delete(record_id: RecordId) -> Record:
        """Delete a record. Use it when a record was created by mistake.
        It does not delete archives."""
        never.append("records_item_delete")
        raise AssertionError("a write must never run from code")

    @registry.tool(effects=[read("records:secret/{record_id}")], scope="records.admin",
                   callers={"direct", "code"})  # fmt: skip
    async def records_secret_get(record_id: RecordId) -> Record:
        """Fetch a record's secret form. Use it for administration only.
        It does not return the owner."""
        never.append("records_secret_get")
        raise AssertionError("a hidden tool must never run")

    return registry


ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"records.read"}))
# The grant covers records but not the archive: records_archive_get is visible but denied.
GRANT = Grant(scopes=frozenset({"records.read"}), effects=(read("records:**"),))
