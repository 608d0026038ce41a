"""The harness: a model's tool calls become admitted reads, sandboxed programs and write
previews, one :class:`Session` per conversation, within its :class:`Budget`; every call is
in the audit log (SQLite under :func:`airlock_home` unless the application chose a store)
before its answer returns, and :class:`AuditSpans` exports it as OpenTelemetry spans.

:class:`ModelTool` and :class:`ModelResult` are the provider-neutral surface every front end
(:mod:`airlock.frontends`) renders.
"""

from airlock.harness._artifacts import ArtifactStore
from airlock.harness._budget import Budget
from airlock.harness._commit_authority import CommitAuthority
from airlock.harness._database import (
    DATABASE_ENV,
    database_url,
    is_postgres,
    open_audit_store,
    open_ledger,
)
from airlock.harness._execute_code import EXECUTE_CODE, ExecuteCodeArgs
from airlock.harness._harness import Harness, NoToolsWarning
from airlock.harness._home import airlock_home
from airlock.harness._model_tools import ModelResult, ModelTool, ModelToolSurface
from airlock.harness._otel import AuditSpans
from airlock.harness._paused import PendingWrite
from airlock.harness._results import HARNESS_CODES, HarnessCode, failure
from airlock.harness._session import Session

__all__ = [
    "DATABASE_ENV",
    "EXECUTE_CODE",
    "HARNESS_CODES",
    "ArtifactStore",
    "AuditSpans",
    "Budget",
    "CommitAuthority",
    "ExecuteCodeArgs",
    "Harness",
    "HarnessCode",
    "ModelResult",
    "ModelTool",
    "ModelToolSurface",
    "NoToolsWarning",
    "PendingWrite",
    "Session",
    "airlock_home",
    "database_url",
    "failure",
    "is_postgres",
    "open_audit_store",
    "open_ledger",
]
